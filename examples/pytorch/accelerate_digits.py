#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The digits CNN of train_digits.py trained with Hugging Face Accelerate on CPU over libddp's
torch.distributed backend.

    ddprun -np 4 python examples/pytorch/accelerate_digits.py
    torchrun --nproc-per-node 4 examples/pytorch/accelerate_digits.py

Accelerate's CPU path picks the backend itself: `mpi` where torch has it, else `gloo`, whatever
`InitProcessGroupKwargs(backend=...)` says (accelerate/state.py, `_prepare_backend`). It starts
the group only where none exists, so the way to run on `ddp` is to start the group first, with
`torch.distributed.init_process_group("ddp")`, and then make the `Accelerator`: it uses that
group for everything (DistributedDataParallel, its `gather` and `reduce`), though its
`state.backend` still says `gloo`. Every rank checks at the end that the group ran on `ddp`, that
the ranks' parameters are equal and the test accuracy (framework_checks.py).

Not `accelerate launch --cpu --num_processes 4` on one machine: Accelerate's launcher starts one
process there and leaves the others to mpirun (`--mpirun_hostfile`).
"""
import argparse
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

import ddp.torch  # noqa: F401 - registers the backend `ddp` (torch >= 2.5 also loads it by itself)
from framework_checks import check_trained
from train_digits import Net, load_data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=16, help="per rank")
    ap.add_argument("--lr", type=float, default=0.01, help="scaled by the number of ranks")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--target-accuracy", type=float, default=0.0)
    args = ap.parse_args()

    dist.init_process_group("ddp")  # before the Accelerator: it keeps this group
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(args.seed)
    (x_train, y_train), (x_test, y_test) = load_data(args.seed)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * accelerator.num_processes,
                          momentum=0.9)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.epochs)
    loader = DataLoader(TensorDataset(x_train, y_train), batch_size=args.batch_size,
                        shuffle=True)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    for _ in range(args.epochs):
        model.train()
        for x, y in loader:
            opt.zero_grad()
            accelerator.backward(F.cross_entropy(model(x), y))
            opt.step()
        sched.step()
    status = check_trained(accelerator.unwrap_model(model), x_test, y_test,
                           args.target_accuracy, "accelerate")
    accelerator.end_training()
    return status


if __name__ == "__main__":
    sys.exit(main())
