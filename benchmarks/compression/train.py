# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""One rank of time_to_accuracy.py's runs: trains the digits CNN or a 12M-parameter MLP on
scikit-learn's digits, data parallel, with one way of reducing gradients, and (rank 0) prints a
JSON line: steps, time to the target test accuracy, median step time, final accuracy.

    --how libddp --compression none|fp16-horovod|bf16|fp16|int8|powersgd   (under ddprun)
    --how gloo-powersgd                 (torch.distributed on Gloo, DDP with torch's PowerSGD
                                         hook; RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set)"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits


class Cnn(torch.nn.Module):
    """examples/pytorch/train_digits.py's."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = torch.nn.Linear(64 * 4 * 4, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


def mlp():
    """64 -> 3400 -> 3400 -> 10: 11.8M parameters."""
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3400), torch.nn.ReLU(),
                               torch.nn.Linear(3400, 3400), torch.nn.ReLU(),
                               torch.nn.Linear(3400, 10))


def data(seed=42):
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    x, y = x[order], y[order]
    n_test = len(y) // 5
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test])


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        correct = (model(x).argmax(1) == y).float().mean().item()
    model.train()
    return correct


def setup(args):
    """(model, optimizer, rank, size) for the way of reducing asked for."""
    torch.manual_seed(0)
    model = Cnn() if args.model == "cnn" else mlp()
    if args.how == "gloo-powersgd":
        import torch.distributed as dist
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
        dist.init_process_group("gloo")
        # One bucket for the whole model: torch's hook hangs on Gloo at its first compressed
        # step when a bucket holds only matrices (its uncompressed group is then empty; the
        # MLP's 3400 x 3400 weight fills a 25 MB bucket alone), as seen with torch 1.13 and 2.15.
        model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1024)
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=args.rank,
                                   start_powerSGD_iter=2)
        model.register_comm_hook(state, psgd.powerSGD_hook)
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
        return model, opt, dist.get_rank(), dist.get_world_size()
    import ddp.torch as hvd
    hvd.init()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    compression = {"none": hvd.Compression.none, "fp16-horovod": hvd.Compression.fp16,
                   "bf16": hvd.Compression.bf16, "int8": hvd.Compression.int8,
                   "powersgd": hvd.Compression.powersgd(rank=args.rank)}[args.compression]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9),
                                   named_parameters=model.named_parameters(),
                                   compression=compression)
    return model, opt, hvd.rank(), hvd.size()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--how", choices=("libddp", "gloo-powersgd"), default="libddp")
    p.add_argument("--compression", default="none")
    p.add_argument("--rank", type=int, default=4, help="PowerSGD's")
    p.add_argument("--model", choices=("cnn", "mlp"), default="cnn")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--target", type=float, default=0.95)
    p.add_argument("--eval-every", type=int, default=10)
    args = p.parse_args()
    torch.set_num_threads(1)
    model, opt, rank, size = setup(args)
    (x, y), (x_test, y_test) = data()
    x, y = x[rank::size], y[rank::size]
    gen = torch.Generator().manual_seed(rank)
    # Rank 0 alone evaluates (every rank holds the same weights), and the time to the target is
    # training time: the sum of the steps' times until then, evaluations left out.
    times, reached = [], None
    for step in range(1, args.steps + 1):
        t0 = time.monotonic()
        batch = torch.randint(len(y), (args.batch,), generator=gen)
        opt.zero_grad()
        F.cross_entropy(model(x[batch]), y[batch]).backward()
        opt.step()
        times.append(time.monotonic() - t0)
        if rank == 0 and reached is None and step % args.eval_every == 0 and \
                accuracy(model, x_test, y_test) >= args.target:
            reached = (step, sum(times))
    if rank == 0:
        final = accuracy(model, x_test, y_test)
        print(json.dumps({"steps": args.steps, "step_s": statistics.median(times),
                          "total_s": sum(times),
                          "reached_step": reached[0] if reached else None,
                          "time_to_target_s": reached[1] if reached else None,
                          "final_accuracy": final}), flush=True)


if __name__ == "__main__":
    main()
