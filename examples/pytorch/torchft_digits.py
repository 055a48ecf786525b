#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""One replica of a fault-tolerant job with torchft, on libddp: train_digits.py's CNN under
torchft's DistributedDataParallel, its gradients averaged among the replicas of each quorum by
ddp.torch.torchft.ProcessGroupDDP (needs `pip install torchft`).

    torchft_lighthouse --min_replicas 1 --bind [::]:29510 &
    python examples/pytorch/torchft_digits.py --replica-id 0 --lighthouse http://HOST:29510 &
    python examples/pytorch/torchft_digits.py --replica-id 1 --lighthouse http://HOST:29510

Kill a replica: the others' step in flight fails at once naming it (libddp sees its connection
close), is discarded, and they train on in the next quorum without it. Start it again with the
same --replica-id: it joins the next quorum and takes the model and optimizer from a live replica
(torchft's checkpoint transport), not from disk. Each replica trains on batches of its own
(seeded by replica and step); every replica prints its parameters' checksum at the end, the same
on all of them.
"""
import argparse
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torchft import Manager
from torchft.ddp import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # train_digits beside this file
from train_digits import Net, load_data

from ddp.torch.torchft import ProcessGroupDDP


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--replica-id", type=int, required=True)
    p.add_argument("--lighthouse", default=os.environ.get("TORCHFT_LIGHTHOUSE"),
                   help="the Lighthouse's address (default: $TORCHFT_LIGHTHOUSE)")
    p.add_argument("--steps", type=int, default=300, help="committed steps to train")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-replicas", type=int, default=1,
                   help="fewer replicas in a quorum than this and its steps are not committed")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds an operation waits for a peer that is neither seen to die nor "
                        "answers")
    p.add_argument("--step-delay", type=float, default=0.0,
                   help="seconds to sleep each step (to watch it, or to give a test time)")
    p.add_argument("--freeze-at-step", type=int, default=None,
                   help="stop this process (SIGSTOP) at that step, once in its quorum and before "
                        "its allreduce: a hung replica, to try the failure path with (kill it)")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0,
                   help="DDP's gradient buckets (smaller: more allreduces a step)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def main():
    args = parse()
    if not args.lighthouse:
        sys.exit("torchft_digits: --lighthouse (or TORCHFT_LIGHTHOUSE) is needed")
    torch.set_num_threads(1)
    (x_train, y_train), (x_test, y_test) = load_data(args.seed)
    torch.manual_seed(args.seed)  # the same start everywhere; torchft syncs it at step 0 anyway
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    def state_dict():
        return {"model": model.state_dict(), "opt": opt.state_dict()}

    def load_state_dict(state):
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])

    store = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    timeout = timedelta(seconds=args.timeout)
    pg = ProcessGroupDDP(timeout=timeout)
    manager = Manager(pg=pg, min_replica_size=args.min_replicas, load_state_dict=load_state_dict,
                      state_dict=state_dict, replica_id=f"digits_{args.replica_id}",
                      store_addr="localhost", store_port=store.port, rank=0, world_size=1,
                      lighthouse_addr=args.lighthouse, timeout=timeout, quorum_timeout=timeout)
    ddp_model = DistributedDataParallel(manager, model, bucket_cap_mb=args.bucket_cap_mb)
    who = f"replica {args.replica_id}"
    try:
        train(args, who, manager, pg, ddp_model, opt, x_train, y_train)
        model.eval()
        with torch.no_grad():
            accuracy = float((model(x_test).argmax(1) == y_test).float().mean())
        checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
        print(f"{who}: done at step {manager.current_step()}, test accuracy {accuracy:.4f}, "
              f"checksum {checksum:.10e}", flush=True)
    finally:
        manager.shutdown(wait=False)


def train(args, who, manager, pg, ddp_model, opt, x, y):
    quorum = None
    while manager.current_step() < args.steps:
        step = manager.current_step()
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + args.replica_id * 10_007 + step)
        idx = torch.randint(len(y), (args.batch_size,), generator=g)
        opt.zero_grad()
        manager.start_quorum()
        loss = F.cross_entropy(ddp_model(x[idx]), y[idx])
        if step == args.freeze_at_step:
            manager.wait_quorum()
            print(f"{who}: frozen at step {step} at {time.time():.3f}", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        loss.backward()
        error = manager.errored() or pg.errored()  # the group's failures reach pg.errored()
        if manager.should_commit():
            opt.step()
        else:
            cause = getattr(error, "original_exception", error) or "too few replicas"
            print(f"{who}: step {step} discarded at {time.time():.3f}: {cause}", flush=True)
        if quorum != manager.num_participants():
            quorum = manager.num_participants()
            print(f"{who}: step {manager.current_step()} with {quorum} replica(s) at "
                  f"{time.time():.3f}", flush=True)
        if manager.current_step() % 50 == 0 and manager.current_step() != step:
            print(f"{who}: step {manager.current_step()}, loss {loss.item():.4f}", flush=True)
        if args.step_delay:
            time.sleep(args.step_delay)


if __name__ == "__main__":
    main()
