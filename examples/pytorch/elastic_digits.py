#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""A torch.distributed DDP script that survives a lost rank in its own processes: the digits CNN,
its default group on the `ddp` backend, recovered in-job by ddp.torch.elastic.run.

    ddprun --nnodes 3:4 --max-restarts 3 python examples/pytorch/elastic_digits.py
    ddprun -np 4 --min-np 2 python examples/pytorch/elastic_digits.py     # no replacements

Kill one worker (`kill -9`, or --crash-at-epoch 2 to have the worker of rank 1 do it once): the
others fail their step naming it, go back to the last commit, re-form the default group among
themselves and train on; with --max-restarts ddprun starts a replacement, which joins at a commit
and receives the model, the optimizer and the sampler's place from a live worker. ElasticSampler
deals the epoch's unprocessed samples out among whoever is there, so none is lost or repeated.
"""

import argparse
import hashlib
import os
import signal
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from train_digits import Net, load_data

from ddp.torch import elastic


def evaluate(model, x, y):
    """Accuracy over the whole test set, each rank scoring its shard (torch.distributed)."""
    model.eval()
    with torch.no_grad():
        shard = slice(dist.get_rank(), None, dist.get_world_size())
        counts = torch.tensor([float((model(x[shard]).argmax(1) == y[shard]).sum()),
                               float(len(y[shard]))], dtype=torch.float64)
    dist.all_reduce(counts)
    model.train()
    return float(counts[0] / counts[1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--crash-at-epoch", type=int, default=-1,
                        help="the worker of rank 1 kills itself (SIGKILL) at this epoch, once")
    parser.add_argument("--target-accuracy", type=float, default=0.0,
                        help="exit with status 1 if the final test accuracy is below this")
    args = parser.parse_args()

    # ddp:// takes the rank and size from the launcher: under ddprun's elastic mode, from the
    # generation of the job this worker joins.
    dist.init_process_group("ddp", init_method="ddp://")
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    (x_train, y_train), (x_test, y_test) = load_data(args.seed)
    train_set = TensorDataset(x_train, y_train)
    sampler = elastic.ElasticSampler(train_set, shuffle=True, seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # What a failure goes back to (state.commit()) and what a new worker receives.
    state = elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0,
                               batch=0, accuracy=0.0)
    state.register_reset_callbacks([lambda: dist.get_rank() == 0 and print(
        f"the job goes on with {dist.get_world_size()} workers, from epoch {state.epoch + 1} "
        f"batch {state.batch}", flush=True)])

    @elastic.run
    def train(state):
        # DDP on this generation's group: built again after every reset.
        net = DistributedDataParallel(state.model)
        for state.epoch in range(state.epoch, args.epochs):
            for x, y in loader:
                if args.crash_at_epoch == state.epoch and dist.get_rank() == 1 and \
                        elastic.generation() == 0:
                    os.kill(os.getpid(), signal.SIGKILL)
                optimizer.zero_grad()
                F.cross_entropy(net(x), y).backward()
                optimizer.step()
                sampler.record_batch(state.batch, args.batch_size)
                state.batch += 1
                state.commit()
            state.accuracy = evaluate(model, x_test, y_test)
            if dist.get_rank() == 0:
                print(f"epoch {state.epoch + 1:2d}: test accuracy {state.accuracy:.2%} on "
                      f"{dist.get_world_size()} workers", flush=True)
            # The next epoch is what a failure from here on comes back to.
            state.batch = 0
            sampler.set_epoch(state.epoch + 1)
            state.epoch += 1
            state.commit()

    train(state)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).numpy().tobytes()
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}: final test accuracy "
          f"{state.accuracy:.2%}, weights {hashlib.sha256(weights).hexdigest()[:16]}", flush=True)
    dist.destroy_process_group()
    return 1 if state.accuracy < args.target_accuracy else 0


if __name__ == "__main__":
    sys.exit(main())
