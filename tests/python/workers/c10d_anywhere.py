# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""One script under every launcher: init_process_group(BACKEND, init_method="ddp://") with no
rank=, world_size= or MASTER_*, under ddprun's, torchrun's, mpirun's or srun's variables alone.
Then an allreduce, a DDP step against the one-process reference, the store torch was handed
(set/get/add/wait/check, from every rank), and a barrier. Prints "c10d anywhere ok <rank>".
    c10d_anywhere.py [ddp|gloo]"""
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import ddp.torch  # registers the backend and ddp://

backend = sys.argv[1] if len(sys.argv) > 1 else "ddp"
dist.init_process_group(backend, init_method="ddp://", timeout=timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
assert (rank, size) == (ddp.torch.rank(), ddp.torch.size()), (rank, size)
assert dist.get_backend() == backend, dist.get_backend()

t = torch.full((5,), float(rank + 1))
dist.all_reduce(t)
assert t.tolist() == [size * (size + 1) / 2] * 5, t

# One DDP step: every rank's batch is a slice of one batch, so the averaged gradient is the
# one-process gradient of the whole batch.
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
reference = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
reference.load_state_dict(model.state_dict())
x, y = torch.randn(4 * size, 6), torch.randn(4 * size, 1)
wrapped = DistributedDataParallel(model)
torch.nn.functional.mse_loss(wrapped(x[rank * 4:(rank + 1) * 4]), y[rank * 4:(rank + 1) * 4]) \
    .backward()
torch.nn.functional.mse_loss(reference(x), y).backward()
for p, q in zip(model.parameters(), reference.parameters()):
    assert torch.allclose(p.grad, q.grad, atol=1e-6), (p.grad, q.grad)

# The store torch was handed: every rank reaches the same one.
store = dist.distributed_c10d._get_default_store()
store.set(f"anywhere/{rank}", f"from {rank}")
assert store.add("anywhere/count", 1) >= 1
store.wait([f"anywhere/{r}" for r in range(size)], timedelta(seconds=30))
assert store.get(f"anywhere/{(rank + 1) % size}") == f"from {(rank + 1) % size}".encode()
if hasattr(store, "check"):  # torch 1.13's Python binding has no check
    assert store.check([f"anywhere/{rank}"]) and not store.check(["anywhere/never"])
dist.barrier()
print(f"c10d anywhere ok {rank}", flush=True)
dist.destroy_process_group()
