# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""DistributedDataParallel on the 'ddp' backend: plain, find_unused_parameters,
gradient_as_bucket_view, no_sync (gradient accumulation), and DDP's comm hooks (fp16 compression,
PowerSGD), on torch 2 through the backend's C++ part (bindings/torch_native), DDP's logging data
naming the backend, its allreduces completed by libddp's engine from C++; with the argument
"python-backend" or "as-process-group", torch 2 without that part: the Backend written in Python,
or the ProcessGroup that torch 2 releases without a Python-constructible Backend get. Each exact
variant is checked against the same model trained in this process on every rank's batch; every
variant ends with the same weights on every rank. Started with torchrun's variables (ddprun sets
them). Prints "c10d ddp ok <variants>"."""
import sys
import warnings

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.nn.parallel import DistributedDataParallel as DDP

import ddp.torch  # registers the backend
import ddp.torch.c10d

STEPS = 4


class Net(torch.nn.Module):
    """Small, with a branch that only some steps use (find_unused_parameters)."""

    def __init__(self, branchy):
        super().__init__()
        self.a = torch.nn.Linear(6, 16)
        self.b = torch.nn.Linear(16, 3)
        if branchy:
            self.unused_sometimes = torch.nn.Linear(16, 3)

    def forward(self, x, branch=False):
        h = torch.tanh(self.a(x))
        return self.unused_sometimes(h) if branch else self.b(h)


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(5, 6, generator=g, dtype=torch.float64), \
        torch.randn(5, 3, generator=g, dtype=torch.float64)


def loss_of(model, rank, step, branch):
    x, y = batch(rank, step)
    return torch.nn.functional.mse_loss(model(x, branch), y)


def reference(size, accumulate, branchy):
    """The same training in this process: the average of every rank's gradient."""
    torch.manual_seed(0)
    model = Net(branchy).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(0, STEPS, accumulate):
        opt.zero_grad()
        for s in range(step, step + accumulate):
            for r in range(size):
                (loss_of(model, r, s, branchy and s % 2 == 1) / size).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def train(rank, size, accumulate=1, branchy=False, hook=None, **ddp_args):
    torch.manual_seed(0)
    model = DDP(Net(branchy).double(), **ddp_args)
    if hook is not None:
        hook(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(0, STEPS, accumulate):
        opt.zero_grad()
        for s in range(step, step + accumulate):
            branch = branchy and s % 2 == 1
            if s < step + accumulate - 1:
                with model.no_sync():  # accumulate locally, exchange on the last micro-step
                    loss_of(model, rank, s, branch).backward()
            else:
                loss_of(model, rank, s, branch).backward()
        opt.step()
    return [p.detach().clone() for p in model.module.parameters()]


def same_everywhere(what, params, size):
    for p in params:
        gathered = [torch.empty_like(p) for _ in range(size)]
        dist.all_gather(gathered, p.contiguous())
        if not all(torch.equal(gathered[0], g) for g in gathered):
            sys.exit(f"rank {dist.get_rank()}: {what}: ranks disagree on the weights")


def close(what, got, want, tol):
    for g, w in zip(got, want):
        if not torch.allclose(g, w, rtol=tol, atol=tol):
            sys.exit(f"rank {dist.get_rank()}: {what}: {(g - w).abs().max()} from the reference")


def main():
    how = sys.argv[1] if len(sys.argv) > 1 else "native"
    if how in ("python-backend", "as-process-group"):
        # torch 2 without the backend's C++ part (a build that did not see this torch): the
        # Backend written in Python, or where torch cannot make one from Python (2.11), the
        # creator's fallback, a ProcessGroup of libddp's own. Both warn that they lack the C++
        # part.
        ddp.torch._native.module = None
        ddp.torch.c10d.backend._backend_constructible = how == "python-backend"
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        dist.init_process_group("ddp")
    group = dist.group.WORLD
    if how == "as-process-group":
        assert isinstance(group, ddp.torch.c10d.ProcessGroupDDP), type(group)
    elif how == "python-backend":
        assert isinstance(group._get_backend(torch.device("cpu")),
                          ddp.torch.c10d.BackendDDP), group
    elif hasattr(torch._C._distributed_c10d, "Backend"):  # torch 2 through the C++ part
        assert type(group).__name__ == "NamedProcessGroup", type(group)
    python_only = [w for w in warned if "Python trampolines" in str(w.message)]
    assert bool(python_only) == (how != "native"), [str(w.message) for w in warned]
    rank, size = dist.get_rank(), dist.get_world_size()
    if how == "native":  # torch's reports name the backend: DDP's logging data here
        name = DDP(Net(False).double())._get_ddp_logging_data().get("backend_name")
        assert name == "ddp", f"DDP's logging data names the backend {name!r}"
    variants = {
        "plain": (dict(), 1, False, 1e-12),
        "find_unused_parameters": (dict(find_unused_parameters=True), 1, True, 1e-12),
        "gradient_as_bucket_view": (dict(gradient_as_bucket_view=True, bucket_cap_mb=0.001), 1,
                                    False, 1e-12),
        "no_sync": (dict(), 2, False, 1e-12),
        "fp16_compress_hook": (dict(hook=lambda m: m.register_comm_hook(
            None, default_hooks.fp16_compress_hook)), 1, False, 1e-2),
    }
    for what, (args, accumulate, branchy, tol) in variants.items():
        params = train(rank, size, accumulate, branchy, **args)
        close(what, params, reference(size, accumulate, branchy), tol)
        same_everywhere(what, params, size)
    state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                   start_powerSGD_iter=2)
    params = train(rank, size, hook=lambda m: m.register_comm_hook(state, powersgd.powerSGD_hook))
    same_everywhere("powerSGD_hook", params, size)
    if how == "native" and hasattr(torch._C._distributed_c10d, "Backend"):
        # DDP's gradient allreduces (and the hooks') were completed by libddp's engine, from C++,
        # not by the Python side's threads: at least one per step of each variant.
        completed = group._get_backend(torch.device("cpu")).engine_completed
        assert completed >= STEPS * len(variants), completed
    print(f"c10d ddp ok {len(variants) + 1}", flush=True)
    dist.destroy_process_group()


main()
