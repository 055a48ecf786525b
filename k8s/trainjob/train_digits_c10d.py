#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The digits CNN under torchrun, on torch.distributed's backend `ddp` (libddp) with torch's own
DistributedDataParallel: what Kubeflow Trainer's torch runtime runs here (k8s/trainjob/). The model
and the data split are the demo's (examples/pytorch/train_digits.py, imported); the gradients go
through torch's DDP hooks to libddp's engine instead of through ddp.DistributedOptimizer.

    torchrun --nnodes 2 --nproc-per-node 2 ... k8s/trainjob/train_digits_c10d.py
    (Trainer sets torchrun's PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_*)
"""
import argparse
import importlib.util
import os
import pathlib
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

DEMO = pathlib.Path(__file__).resolve().parents[2] / "examples" / "pytorch" / "train_digits.py"


def load_demo():
    spec = importlib.util.spec_from_file_location("train_digits", DEMO)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)  # imports ddp.torch, which registers the backend `ddp`
    return demo


def evaluate(model, x, y, rank, size):
    model.eval()
    with torch.no_grad():
        shard = slice(rank, None, size)
        counts = torch.tensor([float((model(x[shard]).argmax(1) == y[shard]).sum()),
                               float(len(y[shard]))], dtype=torch.float64, device=x.device)
    dist.all_reduce(counts)
    model.train()
    return float(counts[0] / counts[1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--lr", type=float, default=0.01, help="scaled by the number of ranks")
    parser.add_argument("--target-accuracy", type=float, default=0.0)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: the GPU of torchrun's LOCAL_RANK (NCCL under libddp)")
    args = parser.parse_args()
    demo = load_demo()
    dist.init_process_group("ddp")  # env://: torchrun's RANK, WORLD_SIZE, MASTER_ADDR/PORT
    rank, size = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    torch.set_num_threads(1)
    torch.manual_seed(42)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    (x_train, y_train), (x_test, y_test) = demo.load_data(42)
    x_test, y_test = x_test.to(device), y_test.to(device)
    x_shard, y_shard = x_train[rank::size].to(device), y_train[rank::size].to(device)
    model = torch.nn.parallel.DistributedDataParallel(
        demo.Net().to(device), device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, args.epochs)
    steps = len(y_train) // size // args.batch_size
    for _ in range(args.epochs):
        order = torch.randperm(len(y_shard), device=device)
        for step in range(steps):
            batch = order[step * args.batch_size:(step + 1) * args.batch_size]
            optimizer.zero_grad()
            F.cross_entropy(model(x_shard[batch]), y_shard[batch]).backward()
            optimizer.step()
        scheduler.step()
    accuracy = evaluate(model, x_test, y_test, rank, size)
    if rank == 0:
        print(f"final test accuracy {accuracy:.2%} after {args.epochs} epochs on {size} ranks "
              f"(torch.distributed backend {dist.get_backend()}, torch {torch.__version__})",
              flush=True)
    dist.destroy_process_group()
    return 1 if accuracy < args.target_accuracy else 0


if __name__ == "__main__":
    sys.exit(main())
