#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Data-parallel training of a small CNN on scikit-learn's handwritten digits, with libddp.

    ddprun -np 4 python examples/pytorch/train_digits.py
    mpirun -np 4 -x DDP_JOB_TOKEN python examples/pytorch/train_digits.py

The 1797 8x8 images ship with scikit-learn (no download). Every rank trains on its own shard of the
training set; the initial weights are broadcast from rank 0, gradients are averaged by
ddp.DistributedOptimizer as backward produces them, and loss/accuracy are averaged over ranks.
Rank 0 shows progress and writes a checkpoint.
"""

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits

import ddp.torch as ddp


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = torch.nn.Linear(64 * 4 * 4, 128)
        self.fc2 = torch.nn.Linear(128, 10)
        self.dropout = torch.nn.Dropout(0.25)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.dropout(torch.flatten(x, 1))
        return self.fc2(F.relu(self.fc1(x)))


def load_data(seed):
    """The same shuffled 80/20 split on every rank, images scaled to [0, 1]."""
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    x, y = x[order], y[order]
    n_test = len(y) // 5
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test])


def progress(epoch, epochs, done, total, loss):
    width = 30
    filled = width * done // total
    bar = "#" * filled + "." * (width - filled)
    end = "\n" if done == total else "\r"  # redraws in place on a terminal
    print(f"epoch {epoch + 1:2d}/{epochs} [{bar}] {done}/{total} loss {loss:.4f}", end=end,
          flush=True)


def evaluate(model, x, y):
    """Accuracy over the whole test set: each rank scores its shard, the counts are summed."""
    model.eval()
    with torch.no_grad():
        shard = slice(ddp.rank(), None, ddp.size())
        correct = (model(x[shard]).argmax(1) == y[shard]).sum()
    counts = torch.tensor([float(correct), float(len(y[shard]))], dtype=torch.float64)
    counts = ddp.allreduce(counts, op=ddp.Sum, name="eval.counts")
    model.train()
    return float(counts[0] / counts[1])


def pick_device(choice):
    """CUDA tensors go through libddp's NCCL backend; a rank uses the GPU of its local rank."""
    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    torch.cuda.set_device(ddp.local_rank() % torch.cuda.device_count())
    return torch.device("cuda", torch.cuda.current_device())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--lr", type=float, default=0.01, help="scaled by the number of ranks")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--fp16-allreduce", action="store_true")
    parser.add_argument("--checkpoint", default="checkpoints/digits.pt",
                        help="written by rank 0 after training ('' to skip)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: this rank's GPU (its local rank) where torch sees one")
    parser.add_argument("--target-accuracy", type=float, default=0.0,
                        help="exit with status 1 if the final test accuracy is below this")
    args = parser.parse_args()

    ddp.init()
    rank, size = ddp.rank(), ddp.size()
    # Ranks share the machine's cores: one intra-op thread each unless there are cores to spare.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // ddp.local_size()))
    torch.manual_seed(args.seed + rank)  # different dropout per rank; weights come from rank 0
    device = pick_device(args.device)

    (x_train, y_train), (x_test, y_test) = load_data(args.seed)
    x_test, y_test = x_test.to(device), y_test.to(device)
    x_shard, y_shard = x_train[rank::size].to(device), y_train[rank::size].to(device)

    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)
    ddp.broadcast_parameters(model.state_dict(), root_rank=0)
    ddp.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = ddp.Compression.fp16 if args.fp16_allreduce else ddp.Compression.none
    optimizer = ddp.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)
    # Cosine decay to zero over the run: the last epochs settle instead of bouncing.
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, args.epochs)
    # Every rank runs the same number of steps per epoch (shards differ by at most one sample).
    steps = len(y_train) // size // args.batch_size
    if rank == 0:
        print(f"training on {size} ranks: {len(y_train)} images ({len(x_shard)} on rank 0), "
              f"{len(y_test)} held out, {sum(p.numel() for p in model.parameters())} "
              f"parameters on {device}, {steps} steps of {args.batch_size} per rank per epoch",
              flush=True)

    start = time.perf_counter()
    samples = 0
    for epoch in range(args.epochs):
        order = torch.randperm(len(y_shard), device=device)
        total_loss = torch.zeros(1, dtype=torch.float64)
        for step in range(steps):
            batch = order[step * args.batch_size:(step + 1) * args.batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x_shard[batch]), y_shard[batch])
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
            samples += len(batch)
            if rank == 0 and (step % 5 == 4 or step == steps - 1):
                progress(epoch, args.epochs, step + 1, steps, total_loss.item() / (step + 1))
        scheduler.step()
        mean_loss = ddp.allreduce(total_loss / steps, name="epoch.loss").item()
        accuracy = evaluate(model, x_test, y_test)
        if rank == 0:
            print(f"epoch {epoch + 1:2d}: mean loss over ranks {mean_loss:.4f}, "
                  f"test accuracy {accuracy:.2%}", flush=True)
    elapsed = time.perf_counter() - start

    throughput = ddp.allreduce(torch.tensor([samples / elapsed]), op=ddp.Sum,
                               name="throughput").item()
    if rank == 0:
        print(f"final test accuracy {accuracy:.2%} after {args.epochs} epochs in {elapsed:.1f} s; "
              f"throughput {throughput:.0f} images/s over {size} ranks "
              f"({throughput / size:.0f} per rank)", flush=True)
        if args.checkpoint:
            os.makedirs(os.path.dirname(args.checkpoint) or ".", exist_ok=True)
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "epochs": args.epochs, "accuracy": accuracy}, args.checkpoint)
            print(f"checkpoint written to {args.checkpoint}", flush=True)
    ddp.shutdown()
    if accuracy < args.target_accuracy:
        print(f"rank {rank}: test accuracy {accuracy:.2%} is below the target "
              f"{args.target_accuracy:.2%}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
