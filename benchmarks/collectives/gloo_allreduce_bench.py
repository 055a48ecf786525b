#!/usr/bin/python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Gloo allreduce (f32 sum) through torch.distributed, measured as ddp-bench measures libddp.

One rank per process, initialised from MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE; with --np N it
launches N ranks on 127.0.0.1 itself. Prints the same nccl-tests-style table as ddp-bench.
--backend ddp measures libddp's torch.distributed backend the same way (same script, same
calls), as benchmarks/netsim/scaling.py's impl "c10d" does across simulated hosts.
"""

import argparse
import datetime
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

UNITS = {"": 0, "K": 10, "M": 20, "G": 30}


def parse_bytes(text):
    digits = text.rstrip("KMGkmg")
    suffix = text[len(digits):].upper()
    if not digits.isdigit() or suffix not in UNITS:
        raise argparse.ArgumentTypeError(f"bad size {text!r}")
    return int(digits) << UNITS[suffix]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--np", type=int, default=0, help="launch this many ranks on 127.0.0.1")
    p.add_argument("-b", dest="min_bytes", type=parse_bytes, default=8)
    p.add_argument("-e", dest="max_bytes", type=parse_bytes, default=64 << 20)
    p.add_argument("-f", dest="factor", type=float, default=2.0)
    p.add_argument("-w", dest="warmup", type=int, default=5)
    p.add_argument("-n", dest="iters", type=int, default=20)
    p.add_argument("-r", dest="repeats", type=int, default=5)
    p.add_argument("--backend", choices=("gloo", "ddp"), default="gloo",
                   help="torch.distributed backend (ddp: libddp's, registered by ddp.torch)")
    args = p.parse_args(argv)
    if args.factor <= 1 or args.iters < 1 or args.repeats < 1 or args.warmup < 0:
        p.error("need -f > 1, -n >= 1, -r >= 1, -w >= 0")
    if args.min_bytes > args.max_bytes:
        p.error("-b is larger than -e")
    return args


def free_loopback_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def describe_exit(code):
    if code < 0:
        return f"was killed by signal {-code} ({signal.Signals(-code).name})"
    return f"exited with code {code}"


def launch(args, argv):
    """Starts the ranks; after the first failure stops the rest (SIGTERM, SIGKILL after 5 s)."""
    child_argv = []
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a == "--np":
            skip = True
        elif not a.startswith("--np="):
            child_argv.append(a)
    port = free_loopback_port()
    procs = []
    for rank in range(args.np):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.np), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + child_argv,
                                      env=env))
    failed = False
    running = set(range(args.np))
    kill_at = None
    while running:
        for rank in sorted(running):
            code = procs[rank].poll()
            if code is None:
                continue
            running.discard(rank)
            if code == 0:
                continue
            if not failed:
                print(f"gloo-bench: rank {rank} {describe_exit(code)}; stopping the other ranks",
                      file=sys.stderr)
                failed = True
                kill_at = time.monotonic() + 5
                for r in running:
                    procs[r].terminate()
            else:
                print(f"gloo-bench: rank {rank} then {describe_exit(code)}", file=sys.stderr)
        if failed and time.monotonic() >= kill_at:
            for r in running:
                procs[r].kill()
        time.sleep(0.02)
    return 1 if failed else 0


def inputs(torch, rank, n, count):
    """ddp-bench's sum inputs: 1..4 plus an offset that cancels over each pair of ranks."""
    i = torch.arange(count, dtype=torch.int64)
    base = 1 + i % 4
    if rank == n - 1 and n % 2 == 1:
        return base.to(torch.float32)
    offset = (i + rank // 2) % 2
    return (base + offset if rank % 2 == 0 else base - offset).to(torch.float32)


def time_calls(dist, args, start_values):
    """Microseconds per call: median over timed groups on this rank, then the slowest rank."""
    import torch
    # all_reduce works in place: restart from the inputs before each group (untimed) so the
    # values stay finite.
    tensor = start_values.clone()
    for _ in range(args.warmup):
        dist.all_reduce(tensor)
    per_call_us = []
    for _ in range(args.repeats):
        tensor.copy_(start_values)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(tensor)
        per_call_us.append((time.perf_counter() - start) * 1e6 / args.iters)
    t = torch.tensor([statistics.median(per_call_us)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def check_call(dist, rank, n, count):
    """Elements wrong on all ranks together, from one fresh call (all_reduce works in place)."""
    import torch
    tensor = inputs(torch, rank, n, count)
    dist.all_reduce(tensor)
    want = (n * (1 + torch.arange(count, dtype=torch.int64) % 4)).to(torch.float32)
    wrong = torch.tensor([int((tensor != want).sum().item())], dtype=torch.int64)
    dist.all_reduce(wrong)
    return wrong.item()


def print_header(torch, args, n):
    print(f"# gloo-bench: torch {torch.__version__} torch.distributed {args.backend}")
    transport = "gloo-tcp" if args.backend == "gloo" else "libddp"
    print(f"# op: allreduce  ranks: {n}  transport: {transport}  dtype: f32  redop: sum  "
          f"inplace: 1")
    print(f"# sizes: {args.min_bytes}..{args.max_bytes} bytes x{args.factor:g}  warmup: "
          f"{args.warmup}  iters: {args.iters}  repeats: {args.repeats}  check: 1")
    print("# time: median over repeats of (group time / iters), max over ranks\n#")
    cols = ("size", "count", "type", "redop", "time_us", "algbw", "busbw", "#wrong")
    units = ("(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "")
    for row in (cols, units):
        print("# %10s  %12s  %6s  %7s  %10s  %8s  %8s  %6s" % row, flush=True)


def run_rank(args):
    import torch
    import torch.distributed as dist
    if "RANK" not in os.environ:  # alone
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(free_loopback_port()))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    if args.backend == "ddp":
        import ddp.torch  # noqa: F401 - registers the backend
    dist.init_process_group(args.backend, init_method="env://",
                            timeout=datetime.timedelta(seconds=300))
    rank, n = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print_header(torch, args, n)
    total_wrong, busbw_sum, rows, last_count = 0, 0.0, 0, 0
    size = args.min_bytes
    while size <= args.max_bytes:
        count = size // 4
        size = max(size + 1, int(size * args.factor))
        if count == 0 or count == last_count:
            continue
        last_count = count
        us = time_calls(dist, args, inputs(torch, rank, n, count))
        wrong = check_call(dist, rank, n, count)
        total_wrong += wrong
        algbw = count * 4 / us / 1e3
        busbw = algbw * 2 * (n - 1) / n
        busbw_sum += busbw
        rows += 1
        if rank == 0:
            print("  %10d  %12d  %6s  %7s  %10.2f  %8.3f  %8.3f  %6d"
                  % (count * 4, count, "f32", "sum", us, algbw, busbw, wrong), flush=True)
    if rank == 0:
        print(f"# Out of bounds values : {total_wrong} {'OK' if total_wrong == 0 else 'FAILED'}")
        print(f"# Avg bus bandwidth : {busbw_sum / rows if rows else 0.0:.3f}\n#", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if total_wrong and rank == 0:
        print(f"gloo-bench: {total_wrong} wrong elements", file=sys.stderr)
        return 1
    return 0


def main(argv):
    args = parse_args(argv)
    if args.np > 0:
        return launch(args, argv)
    return run_rank(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
