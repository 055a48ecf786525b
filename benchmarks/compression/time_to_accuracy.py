#!/usr/bin/python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Time to accuracy with compression across 4 simulated hosts (docs/compression.md).

    sudo .venv/bin/python benchmarks/compression/time_to_accuracy.py
    sudo .venv/bin/python benchmarks/compression/time_to_accuracy.py --rates 1gbit --models mlp \\
        --repeats 1

For each link rate one cluster of 4 network-namespace hosts is made (benchmarks/netsim: tc tbf on
both ends of every link), one rank per host, and the digits CNN and a 12M-parameter MLP (train.py)
are trained with each way of reducing gradients, side by side in the same run: libddp without
compression, Horovod's fp16 (a cast before the allreduce), torch's own PowerSGD hook on Gloo (DDP,
rank 4, on PyTorch 2 in .venv-torch2), and each of libddp's codecs (bf16, int8, PowerSGD at rank 4)
in the engine. Reported per configuration, medians of --repeats: bytes on the wire per step (what
host 0's link sent, read from its interface's counters: every byte, headers included), the median
step time, the time until the test accuracy first reached --target, and the final accuracy. Rank 0
evaluates every 10 steps; the time to the target is training time (the steps' times summed,
evaluations left out).
Writes benchmarks/results/compression-<date>.md. Needs root.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "netsim"))
import netsim  # noqa: E402

CONFIGS = ("none", "fp16-horovod", "gloo-powersgd", "bf16", "int8", "powersgd")
HOSTS = 4


def tx_bytes(c: netsim.Cluster) -> int:
    done = subprocess.run(["ip", "netns", "exec", c.namespaces[0], "cat",
                           "/sys/class/net/eth0/statistics/tx_bytes"], capture_output=True,
                          text=True, check=True)
    return int(done.stdout)


def run_one(c: netsim.Cluster, config: str, model: str, args) -> dict:
    python = os.path.join(ROOT, args.venv, "bin", "python")
    train = [python, os.path.join(HERE, "train.py"), "--model", model, "--steps",
             str(args.steps[model]), "--target", str(args.target), "--rank", str(args.rank),
             "--batch", str(args.batch[model])]
    before = tx_bytes(c)
    if config == "gloo-powersgd":
        # PyTorch 2 (.venv-torch2): torch 1.13's hook breaks on Gloo here (ranks allreduce
        # different sizes at its first compressed step: gloo's "op.preamble.length <= op.nbytes").
        torch2 = os.path.join(ROOT, ".venv-torch2", "bin", "python")
        port = str(20000 + secrets.randbelow(20000))
        procs = [c.popen(h, [torch2, *train[1:], "--how", "gloo-powersgd"],
                         env={**os.environ, "RANK": str(h), "WORLD_SIZE": str(HOSTS),
                              "MASTER_ADDR": c.addresses[0], "MASTER_PORT": port,
                              "GLOO_SOCKET_IFNAME": "eth0"},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for h in range(HOSTS)]
        try:
            outs = [p.communicate(timeout=args.limit) for p in procs]
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise RuntimeError(f"gloo-powersgd: no end within {args.limit} s") from None
        failed = [(h, err) for h, (p, (_, err)) in enumerate(zip(procs, outs)) if p.returncode]
        if failed:
            raise RuntimeError("gloo-powersgd: " + "; ".join(f"rank {h}: {err[-600:]}"
                                                             for h, err in failed))
        out = outs[0][0]
    else:
        ddprun = os.path.join(ROOT, args.venv, "bin", "ddprun")
        done = c.run(0, [ddprun, "-np", str(HOSTS), "-H", c.hosts_arg(1), "--rsh", c.rsh,
                         *train, "--how", "libddp", "--compression", config],
                     capture_output=True, text=True, timeout=args.limit,
                     env={**os.environ, "DDP_TIMEOUT_SECONDS": "600"})
        if done.returncode != 0:
            raise RuntimeError(f"{config}: {(done.stdout + done.stderr)[-1500:]}")
        out = done.stdout
    line = next(ln for ln in out.splitlines() if "{" in ln)
    result = json.loads(line[line.index("{"):])
    result["wire_bytes_per_step"] = (tx_bytes(c) - before) / result["steps"]
    return result


def median_of(runs: list[dict], key: str):
    values = [r[key] for r in runs if r[key] is not None]
    return statistics.median(values) if len(values) == len(runs) else None


def table(rate: str, model: str, results: dict) -> list[str]:
    base = results.get("none")
    gloo = results.get("gloo-powersgd")
    lines = [f"### {model}, {rate} links", "",
             "| config | MB on the wire / step | step (s) | time to target (s) | final accuracy |"
             " vs none | vs torch PowerSGD on Gloo |", "|---|---|---|---|---|---|---|"]
    for config, runs in results.items():
        wire, step = median_of(runs, "wire_bytes_per_step"), median_of(runs, "step_s")
        ttt, acc = median_of(runs, "time_to_target_s"), median_of(runs, "final_accuracy")
        b = median_of(base, "time_to_target_s") if base else None
        g = median_of(gloo, "time_to_target_s") if gloo else None
        lines.append(f"| {config} | {wire / 1e6:.3f} | {step:.3f} | "
                     f"{'not reached' if ttt is None else f'{ttt:.1f}'} | {acc:.4f} | "
                     f"{'' if ttt is None or b is None else f'{b / ttt:.2f}x'} | "
                     f"{'' if ttt is None or g is None else f'{g / ttt:.2f}x'} |")
    return lines + [""]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="1gbit,10gbit")
    p.add_argument("--models", default="cnn,mlp")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps-cnn", type=int, default=200)
    p.add_argument("--steps-mlp", type=int, default=150)
    p.add_argument("--batch-cnn", type=int, default=32, help="per rank")
    p.add_argument("--batch-mlp", type=int, default=8,
                   help="per rank (small, so that on a small machine the links are the limit)")
    p.add_argument("--target", type=float, default=0.95)
    p.add_argument("--rank", type=int, default=4, help="PowerSGD's, libddp's and torch's")
    p.add_argument("--limit", type=int, default=1200, help="seconds a run may take")
    p.add_argument("--venv", default=".venv-torch2",
                   help="whose torch and ddp the libddp runs use (the Gloo run: .venv-torch2's, "
                   "so that every config computes with the same torch)")
    args = p.parse_args()
    args.steps = {"cnn": args.steps_cnn, "mlp": args.steps_mlp}
    args.batch = {"cnn": args.batch_cnn, "mlp": args.batch_mlp}
    why = netsim.available()
    if why:
        sys.exit(f"time_to_accuracy: network namespaces: {why}")
    now = datetime.datetime.now()
    lines = [f"# Time to accuracy with compression, {now:%Y-%m-%d %H:%M}", "",
             f"{HOSTS} network-namespace hosts, one rank each, on {os.cpu_count()} cores "
             f"({platform.node()}); `{' '.join(sys.argv)}`; medians of {args.repeats}; "
             f"target test accuracy {args.target}; PowerSGD rank {args.rank}.", ""]
    failures: list[str] = []
    path = os.path.join(ROOT, "benchmarks", "results", f"compression-{now:%Y-%m-%d-%H%M%S}.md")

    def write():  # after every table, so that a run cut short keeps what it measured
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines + (["Runs that failed:", "", *failures, ""] if failures
                                       else [])) + "\n")

    for rate in args.rates.split(","):
        with netsim.Cluster(HOSTS, rate=rate) as c:
            for model in args.models.split(","):
                results: dict[str, list] = {}
                for _ in range(args.repeats):  # the configs interleaved, repeat after repeat
                    for config in args.configs.split(","):
                        try:
                            r = run_one(c, config, model, args)
                        except (RuntimeError, subprocess.TimeoutExpired) as e:
                            print(rate, model, config, "failed:", e, flush=True)
                            failures.append(f"- {rate}, {model}, {config}: {str(e)[:300]}")
                            continue
                        print(rate, model, config, json.dumps(r), flush=True)
                        results.setdefault(config, []).append(r)
                lines += table(rate, model, results)
                print("\n".join(lines[-len(results) - 5:]), flush=True)
                write()
    write()
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
