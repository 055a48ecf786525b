# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""A rank of the soak (tests/soak/soak.py): a training loop on libddp's engine for SECONDS.

Each step submits a model's worth of gradients (24 named tensors from 1 KB to 1.2 MB, fused by
the engine) as asynchronous allreduces, waits for them and checks every sum; every 10th step it
also allgathers, broadcasts and reduces a scalar loss. The ranks stop together: each step's last
allreduce carries whether any rank's clock is past SECONDS. Writes DIR/pid.<rank> first, so that
the driver can sample the process; prints "SOAK STEPS <n>" at the end.

    worker.py DIR SECONDS
"""
import os
import sys
import time

import numpy as np

import ddp

SIZES = [256, 2_500, 25_000, 300_000]  # float32 elements: 1 KB .. 1.2 MB


def main():
    folder, seconds = sys.argv[1], float(sys.argv[2])
    ddp.init()
    rank, size = ddp.rank(), ddp.size()
    with open(os.path.join(folder, f"pid.{rank}"), "w", encoding="utf-8") as f:
        f.write(str(os.getpid()))
    start = time.monotonic()
    step = 0
    while True:
        grads = [np.full(SIZES[i % len(SIZES)], rank + i, dtype=np.float32) for i in range(24)]
        handles = [ddp.allreduce_async_(g, name=f"layer{i}.grad", op=ddp.Sum)
                   for i, g in enumerate(grads)]
        for i, (g, h) in enumerate(zip(grads, handles)):
            ddp.synchronize(h)
            want = size * i + size * (size - 1) / 2
            if g[0] != want or g[-1] != want:
                raise SystemExit(f"rank {rank} step {step}: layer{i} is {g[0]}, not {want}")
        if step % 10 == 0:
            rows = ddp.allgather(np.array([[rank, step]], dtype=np.int64), name="gather")
            if rows.shape != (size, 2) or list(rows[:, 0]) != list(range(size)):
                raise SystemExit(f"rank {rank} step {step}: allgather gave {rows}")
            weights = ddp.broadcast(np.full(1000, step, dtype=np.float64), root_rank=0,
                                    name="weights")
            if weights[0] != step:
                raise SystemExit(f"rank {rank} step {step}: broadcast gave {weights[0]}")
            ddp.allreduce(np.array([0.5]), name="loss")
        late = np.array([1.0 if time.monotonic() - start > seconds else 0.0])
        ddp.allreduce_(late, name="stop", op=ddp.Max)
        step += 1
        if late[0] > 0:
            break
    print(f"SOAK STEPS {step}", flush=True)
    ddp.shutdown()


if __name__ == "__main__":
    main()
