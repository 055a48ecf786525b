# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Compression with torch: DistributedOptimizer(compression=Compression.bf16/.int8/.powersgd)
and the DDP comm hooks of ddp.torch.hooks on the "ddp" backend. Each trains a small model; the
loss falls, every rank ends with the same weights, and the bytes of its codec are counted.
argv[1]: "optimizer" or "hooks"."""
import hashlib
import sys

import torch
import torch.distributed as dist

import ddp.torch as hvd
from ddp.torch import hooks


def model_and_data(rank):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(256, 20, generator=g)
    return model, x, x[:, :8] * 0.5


def train(model, x, y, optimizer, steps=40):
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    assert losses[-1] < 0.7 * losses[0], losses
    return hashlib.sha1(b"".join(p.detach().numpy().tobytes()
                                 for p in model.parameters())).hexdigest()[:16]


def with_optimizer(rank):
    for name, compression in (("bf16", hvd.Compression.bf16), ("int8", hvd.Compression.int8),
                              ("powersgd", hvd.Compression.powersgd(rank=2))):
        model, x, y = model_and_data(rank)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        before = hvd.stats()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                       named_parameters=model.named_parameters(),
                                       compression=compression)
        digest = train(model, x, y, opt)
        sent = hvd.stats(since=before)["wire_bytes"]
        assert sent[name]["sent"] > 0, sent
        print("digest optimizer", name, digest, flush=True)


def with_hooks(rank):
    dist.init_process_group("ddp", init_method="ddp://")
    for name in ("allreduce_hook", "bf16_hook", "fp16_hook", "int8_hook", "powersgd_hook"):
        model, x, y = model_and_data(rank)
        model = torch.nn.parallel.DistributedDataParallel(model)
        state = hooks.PowerSGDState(matrix_approximation_rank=2) if name == "powersgd_hook" \
            else None
        model.register_comm_hook(state, getattr(hooks, name))
        before = hvd.stats()
        digest = train(model, x, y, torch.optim.SGD(model.parameters(), lr=0.05))
        codec = {"allreduce_hook": "none", "powersgd_hook": "powersgd"}.get(
            name, name.split("_")[0])
        sent = hvd.stats(since=before)["wire_bytes"]
        assert sent[codec]["sent"] > 0, (name, sent)
        print("digest hooks", name, digest, flush=True)
    dist.destroy_process_group()


hvd.init()
(with_optimizer if sys.argv[1] == "optimizer" else with_hooks)(hvd.rank())
print("compression torch ok", hvd.rank(), flush=True)
