# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""One rank of the wheel's clean-room checks (tests/wheel_install_test.sh), under ddprun:

    worker.py numpy   a 2-rank allreduce of the numpy API
    worker.py torch   the Horovod-style step (DistributedOptimizer) and init_process_group("ddp")
                      with DistributedDataParallel, on whatever torch this Python has

Each rank checks its results against what they must be and prints "rank R: ok ..." with where
`ddp` was imported from and, for torch, which path the backend took (the torch-native module or
the Python one). Exits non-zero on a mismatch.
"""
import os
import sys

import numpy as np

import ddp


def check_numpy():
    ddp.init()
    rank, size = ddp.rank(), ddp.size()
    x = np.arange(1000, dtype=np.float32) * (rank + 1)
    out = ddp.allreduce(x, op=ddp.Sum)
    want = np.arange(1000, dtype=np.float32) * (size * (size + 1) / 2)
    assert np.array_equal(out, want), (out[:4], want[:4])
    ddp.shutdown()
    return f"allreduce of {size} ranks"


def horovod_step(torch):
    import ddp.torch as hvd

    hvd.init()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    torch.manual_seed(hvd.rank() + 1)  # each rank its own batch
    loss = model(torch.randn(4, 8)).square().sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = hvd.allgather(flat.unsqueeze(0))
    assert all(torch.equal(every[0], row) for row in every), "parameters differ between ranks"
    hvd.shutdown()


def c10d_step(torch):
    import torch.distributed as dist

    import ddp.torch  # noqa: F401 - the backend, where torch's entry point has not loaded it
    from ddp.torch import _native

    dist.init_process_group("ddp")
    rank, size = dist.get_rank(), dist.get_world_size()
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((5,), float(size * (size + 1) / 2))), t
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
    torch.manual_seed(rank + 1)
    model(torch.randn(4, 8)).sum().backward()
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    every = [torch.empty_like(grads) for _ in range(size)]
    dist.all_gather(every, grads)
    assert all(torch.equal(every[0], g) for g in every), "DDP's gradients differ between ranks"
    dist.destroy_process_group()
    return "native" if _native.module is not None else "python"


def main():
    mode = sys.argv[1]
    where = os.path.dirname(ddp.__file__)
    if mode == "numpy":
        what = check_numpy()
    else:
        import torch

        horovod_step(torch)
        path = c10d_step(torch)
        what = f"torch {torch.__version__}, backend path {path}"
    print(f"rank {os.environ.get('DDP_RANK', '?')}: ok {mode}: {what}; ddp {ddp.__version__} "
          f"from {where}", flush=True)


if __name__ == "__main__":
    main()
