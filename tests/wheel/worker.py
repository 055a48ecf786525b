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


def batch(torch, rank):
    """Rank `rank`'s batch: the same on every rank that asks for it."""
    return torch.randn(4, 8, generator=torch.Generator().manual_seed(rank + 1))


def averaged_gradients(torch, model, size):
    """What averaging every rank's gradient must give: each rank's batch through a copy of the
    model, here, alone."""
    grads = []
    for rank in range(size):
        model.zero_grad()
        model(batch(torch, rank)).square().sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    return [sum(g) / size for g in zip(*grads)]


def horovod_step(torch):
    import copy

    import ddp.torch as hvd

    hvd.init()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    want = [p.detach() - 0.1 * g for p, g in
            zip(model.parameters(), averaged_gradients(torch, copy.deepcopy(model), hvd.size()))]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    opt.zero_grad()
    model(batch(torch, hvd.rank())).square().sum().backward()
    opt.step()
    for got, expected in zip(model.parameters(), want):
        assert torch.allclose(got, expected, atol=1e-6), (got, expected)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = hvd.allgather(flat.unsqueeze(0))
    assert every.shape[0] == hvd.size(), every.shape
    assert all(torch.equal(every[0], row) for row in every), "parameters differ between ranks"
    hvd.shutdown()


def c10d_step(torch):
    import copy

    import torch.distributed as dist

    import ddp.torch  # noqa: F401 - the backend, where torch's entry point has not loaded it
    from ddp.torch import _native

    dist.init_process_group("ddp")
    rank, size = dist.get_rank(), dist.get_world_size()
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((5,), float(size * (size + 1) / 2))), t
    torch.manual_seed(0)
    plain = torch.nn.Linear(8, 2)
    want = averaged_gradients(torch, copy.deepcopy(plain), size)
    model = torch.nn.parallel.DistributedDataParallel(plain)
    model(batch(torch, rank)).square().sum().backward()
    for p, expected in zip(model.parameters(), want):
        assert torch.allclose(p.grad, expected, atol=1e-6), (p.grad, expected)
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
