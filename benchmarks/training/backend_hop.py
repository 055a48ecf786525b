#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""What the torch.distributed backend `ddp` costs per operation and per DDP step beyond libddp's
own Python API: torch's C++ calls the backend (bindings/torch_native/backend.cc on torch 2, torch's
pybind trampoline on 1.13), which calls the Python implementation (ddp/torch/c10d/operations.py),
which calls libddp (ddp._ddp); `ddp.torch.allreduce_async_` goes from Python to libddp directly.

Run under ddprun, one process per rank (rank 0 prints the report):

    .venv-torch2/bin/ddprun -np 2 .venv-torch2/bin/python benchmarks/training/backend_hop.py

Each rank times, for a float32 tensor of --elements (4 KiB by default), the median over --calls
calls after --warmup, in --repeats groups (the median of the groups' medians):
  submit, backend   dist.all_reduce(t, async_op=True): the call alone, not the exchange
  submit, direct    ddp.torch.allreduce_async_(t): the same submission without torch's side
  round trip        the same two, waited for (the exchange included), and Gloo's on a group
                    of the same ranks (dist.new_group(backend="gloo"))
and counts the allreduces of one DistributedDataParallel step of the MLP of
examples/pytorch/synthetic_benchmark.py (DDP's default 25 MB buckets): the step's cost of the
hop is that count times (submit, backend - submit, direct).

--python-path runs torch 2's backend without its torch-native module, as on a torch that the
installed ddp was not built for (a wheel made against another torch): torch's Python trampolines
call the Python operations. Run it beside a run without it to see what the module saves.
"""
import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def median_us(call, calls, warmup, repeats):
    """The median over `repeats` groups of the median time of `calls` calls, in microseconds."""
    for _ in range(warmup):
        call()
    groups = []
    for _ in range(repeats):
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        groups.append(statistics.median(times) * 1e6)
    return statistics.median(groups)


def submit_and_drain(submit, wait, pending):
    """A call that submits one operation and keeps at most 8 in flight, so that the submission
    is timed and not the exchange (waited for outside the timed call, 8 at a time)."""
    def call():
        pending.append(submit())
        if len(pending) >= 8:
            for handle in pending:
                wait(handle)
            pending.clear()
    return call


def ddp_step_allreduces(torch, dist):
    """How many allreduces one DDP step of the MLP makes (one per bucket)."""
    sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
    import synthetic_benchmark as sb
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    torch.manual_seed(42)
    model = torch.nn.parallel.DistributedDataParallel(sb.MODELS["mlp"](), broadcast_buffers=False)
    count = [0]

    def counting(state, bucket):
        count[0] += 1
        return default_hooks.allreduce_hook(state, bucket)

    model.register_comm_hook(None, counting)
    data = torch.randn(32, *sb.IMAGE_SHAPE)
    target = torch.randint(0, sb.NUM_CLASSES, (32,))
    for _ in range(2):  # DDP rebuilds its buckets after the first step
        count[0] = 0
        torch.nn.functional.cross_entropy(model(data), target).backward()
    return count[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", type=int, default=1024)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--python-path", action="store_true",
                    help="torch 2's backend without its torch-native module")
    args = ap.parse_args()

    import torch
    import torch.distributed as dist

    import ddp.torch as hvd
    from ddp.torch import _native

    if args.python_path:
        _native.module, _native.missing = None, "left out by --python-path"
    path = "python" if _native.module is None else "native"
    dist.init_process_group("ddp")  # ddprun's RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    torch.set_num_threads(1)
    gloo = dist.new_group(backend="gloo")
    t = torch.ones(args.elements)
    pending = []
    # name: (the timed call, how an operation it left in flight is waited for)
    measure = {
        "submit, backend": (lambda: dist.all_reduce(t, async_op=True), lambda w: w.wait()),
        "submit, direct": (lambda: hvd.allreduce_async_(t, op=hvd.Sum), hvd.synchronize),
        "round trip, backend": (lambda: dist.all_reduce(t), None),
        "round trip, direct": (lambda: hvd.allreduce_(t, op=hvd.Sum), None),
        "round trip, Gloo": (lambda: dist.all_reduce(t, group=gloo), None),
    }
    results = {}
    for name, (call, wait) in measure.items():
        dist.barrier(group=gloo)
        timed = call if wait is None else submit_and_drain(call, wait, pending)
        results[name] = median_us(timed, args.calls, args.warmup, args.repeats)
        for handle in pending:  # what the last group left in flight
            wait(handle)
        pending.clear()
    buckets = ddp_step_allreduces(torch, dist)
    medians = [None] * dist.get_world_size()
    dist.all_gather_object(medians, results, group=gloo)
    if dist.get_rank() == 0:
        worst = {k: max(m[k] for m in medians) for k in results}  # the slowest rank's
        hop = worst["submit, backend"] - worst["submit, direct"]
        print(f"torch {torch.__version__} ({path} path), {dist.get_world_size()} ranks, "
              f"{args.elements * 4} B float32, the slowest rank's medians:")
        for name, value in worst.items():
            print(f"  {name:22s} {value:9.1f} us")
        print(f"  hop per operation      {hop:9.1f} us")
        print(f"  allreduces per DDP step of the MLP: {buckets}; hop per step "
              f"{hop * buckets / 1000:.3f} ms")
        print(f"RESULT torch={torch.__version__} path={path} ranks={dist.get_world_size()} "
              + " ".join(f"{k.replace(', ', '_').replace(' ', '_')}_us={v:.1f}"
                         for k, v in worst.items())
              + f" hop_us={hop:.1f} buckets={buckets} hop_step_ms={hop * buckets / 1000:.3f}")
    dist.barrier(group=gloo)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
