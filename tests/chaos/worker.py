# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""A rank of the chaos run (tests/chaos/chaos.py): a real, small training job on libddp's engine.

A two-layer perceptron learns a fixed random teacher from synthetic data, each rank on its own
shard. Every step allreduces (averages) the gradients of five named tensors asynchronously, as
a framework plugin does, about 1.6 MB in all, so that a cut or throttled link is felt at once;
rank 0's initial weights are broadcast first. Runs until SECONDS have passed (the ranks agree to
stop through a Max allreduce), or until libddp fails it.

Lines for the driver (stdout):
    CHAOS READY <rank> <pid> <host>          after ddp.init()
    CHAOS STEP <rank> <step> <loss>          every 10th step
    CHAOS ERROR <rank> <blamed ranks|-> <message on one line>   on a DDPError, then exit 1
    CHAOS DONE <rank> <steps>

    worker.py SECONDS [ARRIVE]   ARRIVE: each rank sleeps up to this long (at random) before
                                 ddp.init(), as ranks started on different hosts arrive apart
"""
import os
import socket
import sys
import time

import numpy as np

import ddp

IN, HIDDEN, OUT, EMBED = 256, 512, 16, 250_000  # 4 * (131k + 512 + 8k + 16 + 250k) B ~ 1.6 MB


def error_line(rank, e):
    ranks = ",".join(map(str, getattr(e, "ranks", []) or [])) or "-"
    message = " ".join(str(e).split())
    return f"CHAOS ERROR {rank} {ranks} {message}"


def main():
    seconds = float(sys.argv[1])
    rank = int(os.environ.get("DDP_RANK", "-1"))
    if len(sys.argv) > 2:
        time.sleep(np.random.default_rng([rank, os.getpid()]).uniform(0, float(sys.argv[2])))
    try:
        ddp.init()
    except ddp.DDPError as e:
        print(error_line(rank, e), flush=True)
        sys.exit(1)
    rank = ddp.rank()
    host = os.environ.get("DDP_HOSTNAME") or socket.gethostname()
    print(f"CHAOS READY {rank} {os.getpid()} {host}", flush=True)
    data = np.random.default_rng(1000 + rank)
    teacher = np.random.default_rng(7).standard_normal((IN, OUT)).astype(np.float32)
    init = np.random.default_rng(rank)  # different on every rank: the broadcast makes them one
    params = {
        "w1": (init.standard_normal((IN, HIDDEN)) / np.sqrt(IN)).astype(np.float32),
        "b1": np.zeros(HIDDEN, np.float32),
        "w2": (init.standard_normal((HIDDEN, OUT)) / np.sqrt(HIDDEN)).astype(np.float32),
        "b2": np.zeros(OUT, np.float32),
        "embed": np.zeros(EMBED, np.float32),  # a sparse layer's dense gradient
    }
    start = time.monotonic()
    step = 0
    try:
        for name, value in params.items():
            ddp.broadcast_(value, root_rank=0, name=f"init.{name}")
        while True:
            x = data.standard_normal((64, IN)).astype(np.float32)
            y = x @ teacher
            h = np.maximum(x @ params["w1"] + params["b1"], 0)
            err = h @ params["w2"] + params["b2"] - y
            loss = float((err ** 2).mean())
            dout = 2 * err / err.size
            dh = (dout @ params["w2"].T) * (h > 0)
            grads = {"w1": x.T @ dh, "b1": dh.sum(0), "w2": h.T @ dout, "b2": dout.sum(0),
                     "embed": np.full(EMBED, 1e-6 * (rank + 1), np.float32)}
            handles = {n: ddp.allreduce_async_(g, name=f"grad.{n}", op=ddp.Average)
                       for n, g in grads.items()}
            for n, handle in handles.items():
                ddp.synchronize(handle)
                params[n] -= 0.05 * grads[n]
            if step % 10 == 0:
                print(f"CHAOS STEP {rank} {step} {loss:.4f}", flush=True)
            late = np.array([1.0 if time.monotonic() - start > seconds else 0.0])
            ddp.allreduce_(late, name="stop", op=ddp.Max)
            step += 1
            if late[0] > 0:
                break
    except ddp.DDPError as e:
        print(error_line(rank, e), flush=True)
        sys.exit(1)
    print(f"CHAOS DONE {rank} {step}", flush=True)
    ddp.shutdown()


if __name__ == "__main__":
    main()
