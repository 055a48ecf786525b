#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The digits CNN of train_digits.py trained with DeepSpeed (ZeRO stage 1 or 2, on CPU) over
libddp's torch.distributed backend: `deepspeed.init_distributed(dist_backend="ddp")`.

    DS_ACCELERATOR=cpu DDP_KEEP_FREED_MEMORY=0 ddprun -np 4 python \
        examples/pytorch/deepspeed_digits.py --zero-stage 2

DeepSpeed's CPU accelerator names `ccl` as its backend; the call above makes every DeepSpeed
collective (ZeRO's reduce-scatters and all-gathers of the partitioned gradients and parameters)
go through torch.distributed on `ddp`. Under ddprun, torchrun or SLURM DeepSpeed reads the rank
from torch's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), which ddprun sets. Every
rank checks at the end that the group ran on `ddp`, that the ranks' parameters are equal and the
test accuracy (framework_checks.py).
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before deepspeed is imported
# libddp keeps the memory a rank frees (glibc told not to trim, nor to mmap large blocks); with
# DeepSpeed's large temporaries on CPU that grows a rank's address space to 13-22 GB (VmData,
# 1.3 GB without), and a fork of such a rank (py-cpuinfo, DeepSpeed's compiler probes) fails
# with ENOMEM on a machine of 24 GB. Leave glibc as it is here.
os.environ.setdefault("DDP_KEEP_FREED_MEMORY", "0")
import deepspeed

import ddp.torch  # noqa: F401 - registers the backend `ddp` (torch >= 2.5 also loads it)
from framework_checks import check_trained
from train_digits import Net, load_data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zero-stage", type=int, choices=(0, 1, 2), default=2)
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--batch-size", type=int, default=16, help="per rank")
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--target-accuracy", type=float, default=0.0)
    args = ap.parse_args()

    deepspeed.init_distributed(dist_backend="ddp")
    torch.manual_seed(args.seed)
    (x_train, y_train), (x_test, y_test) = load_data(args.seed)
    model = Net()
    config = {
        "train_micro_batch_size_per_gpu": args.batch_size,
        "gradient_accumulation_steps": 1,
        # torch's Adam: DeepSpeed's own CPU Adam is a C++ extension built on first use.
        "optimizer": {"type": "Adam", "params": {"lr": args.lr, "torch_adam": True}},
        "zero_optimization": {"stage": args.zero_stage},
        "steps_per_print": 1 << 30,
    }
    engine, _, loader, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(),
        training_data=TensorDataset(x_train, y_train), config=config)
    for epoch in range(args.epochs):
        if hasattr(loader, "data_sampler"):
            loader.data_sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(engine(x), y)
            engine.backward(loss)
            engine.step()
    return check_trained(engine.module, x_test, y_test, args.target_accuracy,
                         f"deepspeed zero {args.zero_stage}")


if __name__ == "__main__":
    sys.exit(main())
