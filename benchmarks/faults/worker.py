# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""One rank (torchrun) or one replica (torchft) of goodput.py's training job: the digits CNN or an
MLP, trained with the DDP API until a wall-clock time, its progress printed as it goes.

    --mode torchrun --backend gloo   DDP on torch.distributed under torchrun --max-restarts; rank 0
                                     writes a checkpoint every epoch (atomically) and every rank
                                     starts from it
    --mode torchft --backend gloo|ddp  one replica of a torchft job (torchft's DDP and Manager),
                                     its process group torchft's ProcessGroupGloo or libddp's
                                     ddp.torch.torchft.ProcessGroupDDP
    --mode elastic                   DDP on torch.distributed's default group on `ddp` under
                                     ddprun --nnodes 1:N --max-restarts: libddp's in-job recovery
                                     (ddp.torch.elastic.run), a commit every --commit-every steps

Lines (the driver reads them; times are time.time()):
    S <step> <time> <participants>   a committed step (torchrun: rank 0 only)
    D <step> <time> <error>          a step discarded (torchft, elastic)
    R <step> <time>                  started, or restarted, from <step>
    F <step> <time> <accuracy>       the end: the step reached and the test accuracy
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "pytorch"))
from train_digits import Net, load_data  # noqa: E402


class MLP(torch.nn.Module):
    """The digits as 64 values, through two hidden layers of 1024 (1.1M parameters)."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(64, 1024), torch.nn.ReLU(),
            torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))

    def forward(self, x):
        return self.layers(x)


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("torchrun", "torchft", "elastic"), required=True)
    p.add_argument("--backend", choices=("gloo", "ddp"), default="gloo")
    p.add_argument("--model", choices=("cnn", "mlp"), default="cnn")
    p.add_argument("--until", type=float, required=True, help="the end, as time.time()")
    p.add_argument("--replica-id", type=int, default=0)
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--lighthouse", default=None)
    p.add_argument("--checkpoint-dir", default=None)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--commit-every", type=int, default=5)
    return p.parse_args()


def say(*words):
    print(*words, flush=True)


def batch(x, y, who, step, size):
    g = torch.Generator().manual_seed(1_000_003 * who + step)
    idx = torch.randint(len(y), (size,), generator=g)
    return x[idx], y[idx]


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def torchrun_main(args, model, opt, data):
    """DDP under torchrun: every (re)start resumes from rank 0's last checkpoint."""
    (x, y), (xt, yt) = data
    # Each restart's keys apart in the agent's store: without it a restarted rank can read the
    # address a rank of the killed attempt left there and fail to connect (Gloo's
    # connectFullMesh), attempt after attempt (seen with torch 2.15).
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.PrefixStore(f"attempt{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}",
                             dist.TCPStore(os.environ["MASTER_ADDR"],
                                           int(os.environ["MASTER_PORT"]), size, False,
                                           timeout=timedelta(seconds=args.timeout)))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size,
                            timeout=timedelta(seconds=args.timeout))
    path = os.path.join(args.checkpoint_dir, "checkpoint.pt")
    step = 0
    if os.path.exists(path):
        state = torch.load(path)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
    ddp_model = torch.nn.parallel.DistributedDataParallel(model)
    epoch = max(len(y) // (size * args.batch_size), 1)
    if rank == 0:
        say("R", step, f"{time.time():.3f}")
    while time.time() < args.until:
        xb, yb = batch(x, y, rank, step, args.batch_size)
        opt.zero_grad()
        F.cross_entropy(ddp_model(xb), yb).backward()
        opt.step()
        step += 1
        if rank == 0:
            say("S", step, f"{time.time():.3f}", size)
            if step % epoch == 0:  # a whole file or none: written aside, then renamed
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step},
                           path + ".tmp")
                os.replace(path + ".tmp", path)
    if rank == 0:
        say("F", step, f"{time.time():.3f}", f"{accuracy(model, xt, yt):.4f}")
    dist.destroy_process_group()


def torchft_main(args, model, opt, data):
    """One replica of a torchft job; a replacement takes the state from a live replica."""
    from torchft import Manager
    from torchft.ddp import DistributedDataParallel
    from torchft.process_group import ProcessGroupGloo
    (x, y), (xt, yt) = data
    timeout = timedelta(seconds=args.timeout)
    if args.backend == "ddp":
        from ddp.torch.torchft import ProcessGroupDDP
        pg = ProcessGroupDDP(timeout=timeout)
    else:
        pg = ProcessGroupGloo(timeout=timeout)
    store = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    manager = Manager(
        pg=pg, min_replica_size=1, replica_id=f"goodput_{args.replica_id}",
        load_state_dict=lambda s: (model.load_state_dict(s["model"]),
                                   opt.load_state_dict(s["opt"])),
        state_dict=lambda: {"model": model.state_dict(), "opt": opt.state_dict()},
        store_addr="localhost", store_port=store.port, rank=0, world_size=1,
        lighthouse_addr=args.lighthouse, timeout=timeout, quorum_timeout=timeout)
    ddp_model = DistributedDataParallel(manager, model)
    started = False
    try:
        while time.time() < args.until:
            step = manager.current_step()
            xb, yb = batch(x, y, args.replica_id, step, args.batch_size)
            opt.zero_grad()
            manager.start_quorum()
            F.cross_entropy(ddp_model(xb), yb).backward()
            error = manager.errored() or pg.errored()
            if manager.should_commit():
                opt.step()
                if not started:
                    say("R", step, f"{time.time():.3f}")
                    started = True
                say("S", manager.current_step(), f"{time.time():.3f}",
                    manager.num_participants())
            else:
                cause = str(getattr(error, "original_exception", error)).splitlines()[0:1]
                say("D", step, f"{time.time():.3f}", cause[0][:200] if cause else "")
        say("F", manager.current_step(), f"{time.time():.3f}",
            f"{accuracy(model, xt, yt):.4f}")
    finally:
        manager.shutdown(wait=False)


def elastic_main(args, model, opt, data):
    """libddp's in-job recovery: the survivors of a kill go back to the last commit and re-form
    the default group in their processes; a replacement joins at a commit with a peer's state."""
    from ddp.torch import elastic
    (x, y), (xt, yt) = data
    dist.init_process_group("ddp", init_method="ddp://")
    state = elastic.TorchState(model=model, optimizer=opt, step=0)

    @elastic.run
    def train(state):
        ddp_model = torch.nn.parallel.DistributedDataParallel(model)
        rank, size = dist.get_rank(), dist.get_world_size()
        if rank == 0:
            say("R", state.step, f"{time.time():.3f}")
        while True:
            try:
                # Every rank stops at the same step: rank 0's clock decides.
                stop = torch.tensor([float(time.time() >= args.until)])
                dist.broadcast(stop, 0)
                if stop.item():
                    return
                xb, yb = batch(x, y, rank, state.step, args.batch_size)
                opt.zero_grad()
                F.cross_entropy(ddp_model(xb), yb).backward()
            except Exception as e:
                say("D", state.step, f"{time.time():.3f}", str(e).splitlines()[0][:200])
                raise
            opt.step()
            state.step += 1
            if rank == 0:
                say("S", state.step, f"{time.time():.3f}", size)
            if state.step % args.commit_every == 0:
                state.commit()

    train(state)
    if dist.get_rank() == 0:
        say("F", state.step, f"{time.time():.3f}", f"{accuracy(model, xt, yt):.4f}")
    dist.destroy_process_group()


def main():
    args = parse()
    torch.set_num_threads(1)
    data = load_data(0)
    torch.manual_seed(0)
    model = Net() if args.model == "cnn" else MLP()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    run = {"torchrun": torchrun_main, "torchft": torchft_main, "elastic": elastic_main}
    run[args.mode](args, model, opt, data)


if __name__ == "__main__":
    main()
