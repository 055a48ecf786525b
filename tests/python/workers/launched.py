# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""A rank started by some launcher (torchrun, srun, or their variables set by hand), with no DDP_*
identity: checks that ddp.init() reads its place from the launcher's variables, then trains a
little through ddp.torch (a DistributedOptimizer step must agree on every rank) and sums ranks.

    launched.py torchrun|slurm [--torch]
Prints "launched <rank>/<size> local <local_rank>/<local_size> ok" on success."""
import os
import sys

import numpy as np

launcher = sys.argv[1]
use_torch = "--torch" in sys.argv[2:]
if launcher == "torchrun":
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"]) if "LOCAL_RANK" in os.environ else None
else:
    rank, size = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_STEP_NUM_TASKS"])
    local_rank = int(os.environ["SLURM_LOCALID"])
assert not any(k in os.environ for k in ("DDP_RANK", "DDP_SIZE")), "a DDP_* identity leaked in"

if use_torch:
    import torch

    import ddp.torch as ddp
else:
    import ddp

ddp.init()
assert (ddp.rank(), ddp.size()) == (rank, size), (ddp.rank(), ddp.size(), rank, size)
if local_rank is not None:
    assert ddp.local_rank() == local_rank, (ddp.local_rank(), local_rank)

total = ddp.allreduce(np.array([rank + 1], dtype=np.int64), op=ddp.Sum) if not use_torch else \
    ddp.allreduce(torch.tensor([rank + 1], dtype=torch.int64), op=ddp.Sum).numpy()
assert int(total[0]) == size * (size + 1) // 2, total

if use_torch:  # a training step through the Horovod-style API: every rank ends with rank 0's model
    torch.manual_seed(rank)
    model = torch.nn.Linear(4, 1)
    ddp.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = ddp.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x = torch.full((8, 4), float(rank + 1))
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
    weights = ddp.allgather(model.weight.detach().reshape(1, -1))
    assert torch.equal(weights[0], weights[-1]), weights

print(f"launched {ddp.rank()}/{ddp.size()} local {ddp.local_rank()}/{ddp.local_size()} ok",
      flush=True)
ddp.shutdown()
