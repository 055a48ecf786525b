#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""One host: the parameter server's push+pull against the ring allreduce on the same bytes.

    .venv/bin/python benchmarks/training/compare_ps/run.py [--np 4] [--sizes-mb 1,16,64]
                                                           [--repeats 5]

Each configuration is a real job under ddprun, run alternately with the others, `--repeats`
times; the figure is the median over runs of each run's median step time (a step: every worker
contributes M bytes of f32 and gets back the sum over workers):

- allreduce: `ddp.allreduce_` (in place) on N ranks: the ring/shared-memory allreduce;
- ps-colocated: `ddp.ps.push_pull` of a sync key on N ranks, each also a server (the key is
  split over all N: every worker sends each byte once and receives each byte once);
- ps-servers: N workers and N more server processes (`ddprun --servers N`).

On one host every byte crosses shared memory, and the cores are shared by every process, so this
measures the overheads of each path (copies, round trips, scheduling), not the bandwidth argument
of separate server hosts (that is benchmarks/netsim). Writes a Markdown table and JSON next to
the other results.
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve()
RESULTS = HERE.parents[2] / "results"


def worker(args):
    import numpy as np
    count = int(args.mb * (1 << 20)) // 4
    times = []
    if args.mode == "allreduce":
        import ddp
        ddp.init()
        x = np.ones(count, np.float32)
        for i in range(args.warmup + args.steps):
            x.fill(1.0)
            start = time.perf_counter()
            ddp.allreduce_(x, op=ddp.Sum, name="x")
            times.append(time.perf_counter() - start)
        ok = float(x[0]) == ddp.size()
        first = ddp.rank() == 0
        ddp.shutdown()
    else:
        import ddp.ps as ps
        ps.init()
        x = np.ones(count, np.float32)
        ps.register("x", x, mode=args.ps_mode, optimizer="sum")
        out = np.empty_like(x)
        for i in range(args.warmup + args.steps):
            start = time.perf_counter()
            ps.push_pull("x", x, out=out)
            times.append(time.perf_counter() - start)
        ok = args.ps_mode != "sync" or float(out[0]) == ps.num_workers()
        first = ps.worker_index() == 0
        ps.finish()
    if not ok:
        print("WRONG RESULT", flush=True)
        sys.exit(1)
    if first:
        print("RESULT " + json.dumps(statistics.median(times[args.warmup:])), flush=True)


def launch(config, np_, mb, steps, warmup):
    ddprun = [sys.executable, "-m", "ddp.run", "-np", str(np_)]
    if config == "ps-servers":
        ddprun += ["--servers", str(np_)]
    mode = "allreduce" if config == "allreduce" else "ps"
    cmd = ddprun + [sys.executable, str(HERE), "--worker", mode, "--mb", str(mb), "--steps",
                    str(steps), "--warmup", str(warmup)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    for line in out.stdout.splitlines():
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1])
    raise RuntimeError(f"{config} {mb} MiB failed:\n{out.stdout}\n{out.stderr}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worker", choices=("allreduce", "ps"))
    p.add_argument("--mb", type=float, default=16)
    p.add_argument("--ps-mode", choices=("sync", "async"), default="sync",
                   help="the key's mode (async: the servers sum every push into the value)")
    p.add_argument("--np", type=int, default=4)
    p.add_argument("--sizes-mb", default="1,16,64")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    if args.worker:
        args.mode = args.worker
        return worker(args)
    configs = ("allreduce", "ps-colocated", "ps-servers")
    sizes = [float(s) for s in args.sizes_mb.split(",")]
    runs = {(c, s): [] for c in configs for s in sizes}
    for r in range(args.repeats):
        for s in sizes:
            for c in (configs if r % 2 == 0 else configs[::-1]):  # alternate the order
                runs[(c, s)].append(launch(c, args.np, s, args.steps, args.warmup))
    med = {k: statistics.median(v) for k, v in runs.items()}
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S")
    machine = f"{platform.node()}, {os.cpu_count()} cores"
    lines = [f"# Parameter server vs allreduce, one host ({stamp}, {machine})", "",
             f"{args.np} workers, f32 sum of M bytes per worker; median of {args.repeats} runs "
             f"(alternated) of each run's median over {args.steps} steps. "
             "Command: `" + " ".join(["python", "benchmarks/training/compare_ps/run.py"]
                                     + sys.argv[1:]) + "`",
             "", "| M | allreduce | ps colocated | ps + servers | allreduce / ps colocated | "
             "allreduce / ps + servers |", "|---|---|---|---|---|---|"]
    for s in sizes:
        a, c, v = med[("allreduce", s)], med[("ps-colocated", s)], med[("ps-servers", s)]
        lines.append(f"| {s:g} MiB | {a * 1e3:.2f} ms | {c * 1e3:.2f} ms | {v * 1e3:.2f} ms | "
                     f"{a / c:.2f}x | {a / v:.2f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"compare-ps-{stamp}.md").write_text(text)
    (RESULTS / f"compare-ps-{stamp}.json").write_text(json.dumps(
        {"machine": machine, "np": args.np, "runs": {f"{c}@{s}": v for (c, s), v in runs.items()}},
        indent=1))


if __name__ == "__main__":
    sys.exit(main())
