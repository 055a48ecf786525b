# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""FSDP on the 'ddp' backend (torch 2): FullyShardedDataParallel, and FSDP2's fully_shard where
torch has it, on CPU. Each trains a small model a few steps on every rank's batch and must match
the same model trained in this process on all the batches, with every rank's shard agreeing.
Started with torchrun's variables (ddprun sets them). Prints "c10d fsdp ok <variants>"."""
import sys

import torch
import torch.distributed as dist

import ddp.torch  # noqa: F401 - registers the backend

STEPS = 3


def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def batch(rank, step):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g)


def reference(size):
    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        opt.zero_grad()
        for r in range(size):
            x, y = batch(r, step)
            (torch.nn.functional.mse_loss(model(x), y) / size).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def train(model, rank):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        opt.zero_grad()
        x, y = batch(rank, step)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def check(what, full, want):
    if not torch.allclose(full, want, rtol=1e-5, atol=1e-6):
        sys.exit(f"rank {dist.get_rank()}: {what}: {(full - want).abs().max()} from the reference")


def main():
    dist.init_process_group("ddp")
    rank, size = dist.get_rank(), dist.get_world_size()
    want = reference(size)
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    model = FSDP(make(), use_orig_params=True, device_id=torch.device("cpu"))
    train(model, rank)
    with FSDP.summon_full_params(model):
        check("FullyShardedDataParallel",
              torch.cat([p.detach().reshape(-1) for p in model.parameters()]), want)
    variants = 1
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        fully_shard = None
    if fully_shard is not None:
        model = make()
        for layer in (model[0], model[2]):
            fully_shard(layer)
        fully_shard(model)
        train(model, rank)
        full = torch.cat([p.full_tensor().detach().reshape(-1) for p in model.parameters()])
        check("fully_shard", full, want)
        variants += 1
    print(f"c10d fsdp ok {variants}", flush=True)
    dist.destroy_process_group()


main()
