#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The digits CNN trained with libddp's parameter server: asynchronous by default, 2 servers.

    ddprun -np 4 --servers 2 python examples/ps/train_digits_ps.py            (make demo-ps)
    ddprun -np 4 --servers 2 python examples/ps/train_digits_ps.py --mode sync
    ddprun -np 4 python examples/ps/train_digits_ps.py                       (servers colocated)

Every worker trains on its own shard of scikit-learn's 1797 8x8 digits. In async mode the servers
hold the weights and run Adam: a worker pushes its gradients and pulls the weights as they are,
never waiting for the others (--staleness S bounds how far ahead it may run). In sync mode the
servers sum the gradients of each step and every worker runs the same Adam step. Accuracy is
summed over the workers through a sync key (there are no collectives in a parameter-server job).
"""

import argparse
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits

import ddp.ps as ps
import ddp.torch as ddp


class Net(torch.nn.Module):
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


def load_data(seed):
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    x, y = x[order], y[order]
    n_test = len(y) // 5
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("async", "sync"), default="async")
    parser.add_argument("--staleness", type=int, default=None, help="async: bound (steps)")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--lr", type=float, default=None,
                        help="Adam's; default 1e-3 async, 3e-3 sync (4x the batch per step)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--target-accuracy", type=float, default=0.0,
                        help="stop once the test accuracy reaches this (every worker sees the "
                             "same figure); exit with status 1 if it never does")
    args = parser.parse_args()

    if args.lr is None:
        args.lr = 1e-3 if args.mode == "async" else 3e-3
    ps.init()  # a server-only rank serves here and exits when the workers are done
    worker, workers = ps.worker_index(), ps.num_workers()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed + worker)  # the weights come from worker 0 through the servers
    (x_train, y_train), (x_test, y_test) = load_data(args.seed)
    x_shard, y_shard = x_train[worker::workers], y_train[worker::workers]

    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    # Async: each worker's gradient is one update of the shared weights (Adam on the servers).
    optimizer = ddp.ParameterServerOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             mode=args.mode, staleness=args.staleness)
    counts = np.zeros(2, dtype=np.float64)
    ps.register("eval.counts", counts)  # sync: the sum over workers
    steps = len(y_shard) // args.batch_size
    if worker == 0:
        print(f"parameter-server training ({args.mode}"
              f"{f', staleness {args.staleness}' if args.staleness is not None else ''}): "
              f"{workers} workers, {ps.num_servers()} servers, "
              f"{sum(p.numel() for p in model.parameters())} parameters, bytes per server "
              f"{ps.server_bytes()}, {steps} steps of {args.batch_size} per worker per epoch",
              flush=True)

    start = time.perf_counter()
    accuracy = 0.0
    for epoch in range(args.epochs):
        order = torch.randperm(len(y_shard))
        total = 0.0
        for step in range(steps):
            batch = order[step * args.batch_size:(step + 1) * args.batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x_shard[batch]), y_shard[batch])
            loss.backward()
            optimizer.step()
            total += loss.item()
        if args.mode == "async":
            optimizer.pull_parameters()  # score the servers' weights as they are now
        with torch.no_grad():
            shard = slice(worker, None, workers)
            correct = (model(x_test[shard]).argmax(1) == y_test[shard]).sum().item()
        summed = ps.push_pull("eval.counts", np.array([correct, len(y_test[shard])], np.float64))
        accuracy = summed[0] / summed[1]
        if worker == 0:
            print(f"epoch {epoch + 1:2d}: worker 0 loss {total / steps:.4f}, "
                  f"test accuracy {accuracy:.2%}", flush=True)
        # Async training keeps moving the weights (constant learning rate, other workers'
        # updates): stop at the target rather than score wherever the last epoch left them. The
        # summed counts are the same on every worker, so all stop at the same epoch.
        if args.target_accuracy > 0 and accuracy >= args.target_accuracy:
            break
    elapsed = time.perf_counter() - start
    if worker == 0:
        print(f"final test accuracy {accuracy:.2%} after {epoch + 1} epochs in {elapsed:.1f} s",
              flush=True)
    optimizer.finish()
    if accuracy < args.target_accuracy:
        print(f"worker {worker}: test accuracy {accuracy:.2%} is below the target "
              f"{args.target_accuracy:.2%}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
