#!/usr/bin/python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The parameter server across simulated hosts against the ring allreduce, and against the
bandwidth argument for it (benchmarks/netsim).

    sudo .venv/bin/python benchmarks/netsim/ps_scaling.py                  # n = 4, 8 at 1 Gbit/s
    sudo .venv/bin/python benchmarks/netsim/ps_scaling.py --workers 4 --rate 400mbit --mb 16
    sudo .venv/bin/python benchmarks/netsim/ps_scaling.py --congestion-control reno

For each n in --workers one cluster of 2n hosts is made (netsim.Cluster: a namespace per host,
tc tbf on both ends of every link at --rate), and three jobs run in it, alternately, --repeats
times each (the worker is benchmarks/training/compare_ps/run.py: every step, each worker
contributes M bytes of f32 and gets back the sum over the workers):

- ring: `ddp.allreduce_` on n ranks, one per host (hosts 0..n-1);
- ps: n workers on hosts 0..n-1 and k servers on hosts n..n+k-1 (`ddprun --servers k`), sync
  mode, `ddp.ps.push_pull` of one key (split over the k servers);
- ps-colocated: n ranks on hosts 0..n-1, each a worker and a server.

The model (B = the link rate each way, M = bytes per worker): the ring's step is at least
2(n-1)/n x M/B; the parameter server's max(M/B, nM/(kB)), so with k = n servers it should be
2(n-1)/n times faster (1.5x at n = 4, 1.75x at n = 8); colocated servers move 2(n-1)/n x M each
way per host, the ring's bound, so they cannot win. The figure is the median over runs of each
run's median step time (as seen by worker 0); the table gives each against its bound, the
measured speedup and its share of the predicted one (the goal: >= 90%).

Writes benchmarks/results/ps-scaling-<date>.{json,md,png} (--report JSON: only the table and
plot of a saved run). Needs root.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import netsim  # noqa: E402
from scaling import machine  # noqa: E402

try:
    import ddp_model as model  # the cost model, installed with libddp's package (make build)
except ImportError as e:
    raise SystemExit(f"{e}: run this with the Python that `make build` installs libddp into "
                     f"(.venv/bin/python)") from None

WORKER = os.path.join(ROOT, "benchmarks", "training", "compare_ps", "run.py")
CONFIGS = ("ring", "ps", "ps-colocated")


def run_config(args, c: netsim.Cluster, config: str, n: int, k: int) -> float:
    """Seconds per step (worker 0's median over --steps) of one job."""
    hosts = c.hosts_arg(1, n + k if config == "ps" else n)
    cmd = [args.ddprun, "-np", str(n), "-H", hosts, "--rsh", c.rsh]
    if config == "ps":
        cmd += ["--servers", str(k)]
    cmd += [args.python, WORKER, "--worker", "allreduce" if config == "ring" else "ps",
            "--mb", str(args.mb), "--steps", str(args.steps), "--warmup", str(args.warmup),
            "--ps-mode", args.mode]
    env = {**os.environ, "DDP_TIMEOUT_SECONDS": "300"}
    done = c.run(0, cmd, capture_output=True, text=True, timeout=args.limit, env=env)
    for line in done.stdout.splitlines():
        if "RESULT " in line and done.returncode == 0:
            return float(json.loads(line.split("RESULT ", 1)[1]))
    tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
    raise RuntimeError(f"{config} n={n} k={k} exited {done.returncode}:\n{tail}")


def report(result: dict) -> str:
    r = result
    rate = r["rate_bits"]
    lines = [f"# Parameter server vs ring allreduce across simulated hosts ({r['date']})", "",
             f"{r['machine']['cpu']}, {r['machine']['cores']} cores, kernel "
             f"{r['machine']['kernel']}. Links {rate / 1e9:g} Gbit/s each way (tc tbf, both ends), "
             f"TCP congestion control {r.get('congestion', 'bbr')} in every host. "
             f"M = {r['mb']:g} MiB of f32 per worker per step; median of {r['repeats']} runs "
             f"(alternated) of each run's median over {r['steps']} steps. "
             f"Command: `{r['command']}`", "",
             "| n workers | k servers | ring | ps (k server hosts) | ps colocated | "
             "ring / ps: measured | predicted | share of predicted | "
             "ring, ps, colocated: of own bound |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in r["rows"]:
        t = row["seconds"]
        if any(t.get(c) is None for c in CONFIGS):
            lines.append(f"| {row['workers']} | {row['servers']} | failed: "
                         f"{'; '.join(row.get('errors', []))[:200]} |||||||")
            continue
        lines.append(
            f"| {row['workers']} | {row['servers']} | {t['ring'] * 1e3:.0f} ms | "
            f"{t['ps'] * 1e3:.0f} ms | {t['ps-colocated'] * 1e3:.0f} ms | "
            f"{row['speedup']:.2f}x | {row['predicted']:.2f}x | {row['share']:.0%} | "
            f"{row['of_bound']['ring']:.0%}, {row['of_bound']['ps']:.0%}, "
            f"{row['of_bound']['ps-colocated']:.0%} |")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: str) -> bool:
    """Step time of each configuration against its bound, per n (a PNG); False without
    matplotlib."""
    try:
        import matplotlib
    except ImportError:
        print("ps_scaling: no matplotlib, no plot", file=sys.stderr)
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [r for r in result["rows"] if all(r["seconds"].get(c) for c in CONFIGS)]
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.26
    labels = {"ring": "ring allreduce", "ps": "ps, k server hosts", "ps-colocated": "ps colocated"}
    for j, config in enumerate(CONFIGS):
        xs = [i + (j - 1) * width for i in range(len(rows))]
        ax.bar(xs, [r["seconds"][config] * 1e3 for r in rows], width, label=labels[config])
        ax.scatter(xs, [r["bound_seconds"][config] * 1e3 for r in rows], marker="_", s=400,
                   color="black", zorder=3, label="bound" if j == 0 else None)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"n = {r['workers']}, k = {r['servers']}" for r in rows])
    ax.set_ylabel("ms per step (lower is better)")
    ax.set_title(f"{result['mb']:g} MiB per worker, links {result['rate_bits'] / 1e9:g} Gbit/s "
                 f"({result['date'][:10]})")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_report(result: dict, out: str) -> str:
    """The markdown table and the plot beside the JSON file `out`."""
    base = out[:-len(".json")] if out.endswith(".json") else out
    text = report(result)
    if plot(result, base + ".png"):
        text += f"\n![step times against the bounds]({os.path.basename(base)}.png)\n"
    with open(base + ".md", "w", encoding="utf-8") as f:
        f.write(text)
    return text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", default="4,8", help="worker counts n (default 4,8)")
    p.add_argument("--servers", default="",
                   help="server counts k, one per n (default k = n)")
    p.add_argument("--rate", default="1gbit", help="link rate, tc's syntax (default 1gbit)")
    p.add_argument("--mb", type=float, default=64, help="MiB per worker per step (default 64)")
    p.add_argument("--mode", choices=("sync", "async"), default="sync",
                   help="the parameter server's mode (default sync)")
    p.add_argument("--congestion-control", metavar="CC",
                   help="every simulated host's TCP congestion control (default: the machine's;"
                        " reno stands in for cubic, Linux's default, where namespaces may not"
                        " choose cubic)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("-r", "--repeats", type=int, default=3)
    p.add_argument("--ddprun", default=os.path.join(ROOT, ".venv", "bin", "ddprun"))
    p.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"),
                   help="the Python with libddp installed (default .venv/bin/python)")
    p.add_argument("--limit", type=float, default=600, help="seconds one job may take")
    p.add_argument("--out", help="JSON file (default benchmarks/results/ps-scaling-<date>.json)")
    p.add_argument("--report", metavar="JSON", help="only write the table and plot of a saved run")
    args = p.parse_args(argv)
    if args.report:
        with open(args.report, encoding="utf-8") as f:
            print(write_report(json.load(f), args.report))
        return 0
    workers = [int(x) for x in args.workers.split(",")]
    servers = [int(x) for x in args.servers.split(",")] if args.servers else workers
    if len(servers) != len(workers) or min(workers + servers) < 1:
        p.error("--servers needs one count >= 1 per --workers entry")
    rate = netsim.rate_bits(args.rate)
    why = netsim.available()
    if why:
        print(f"ps_scaling: {why}", file=sys.stderr)
        return 77
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S")
    out = args.out or os.path.join(ROOT, "benchmarks", "results", f"ps-scaling-{stamp}.json")
    result = {"date": stamp, "machine": machine(), "command": " ".join(sys.argv),
              "rate_bits": rate, "mb": args.mb, "steps": args.steps, "repeats": args.repeats,
              "rows": []}
    size = int(args.mb * (1 << 20))
    for n, k in zip(workers, servers):
        runs: dict[str, list[float]] = {c: [] for c in CONFIGS}
        errors: list[str] = []
        with netsim.Cluster(n + k, rate=args.rate, congestion=args.congestion_control) as cluster:
            result["congestion"] = netsim.congestion_in(cluster.namespaces[0])
            for r in range(args.repeats):
                for config in (CONFIGS if r % 2 == 0 else CONFIGS[::-1]):
                    t0 = time.monotonic()
                    try:
                        runs[config].append(run_config(args, cluster, config, n, k))
                    except (RuntimeError, subprocess.TimeoutExpired) as e:
                        print(f"ps_scaling: {e}", file=sys.stderr, flush=True)
                        errors.append(f"{config}: {str(e).splitlines()[0]}")
                        continue
                    print(f"ps_scaling: {args.rate} n={n} k={k} {config:12s} "
                          f"{runs[config][-1] * 1e3:8.1f} ms/step [{time.monotonic() - t0:.0f} s]",
                          file=sys.stderr, flush=True)
        seconds = {c: statistics.median(v) if v else None for c, v in runs.items()}
        bounds = {"ring": model.bound("ring", size, n, 1, rate),
                  "ps": model.ps_bound(size, n, k, rate),
                  "ps-colocated": model.ps_bound(size, n, 0, rate)}
        row = {"workers": n, "servers": k, "runs": runs, "seconds": seconds,
               "bound_seconds": bounds, "errors": errors}
        if all(seconds.values()):
            row["of_bound"] = {c: bounds[c] / seconds[c] for c in CONFIGS}
            row["speedup"] = seconds["ring"] / seconds["ps"]
            row["predicted"] = bounds["ring"] / bounds["ps"]
            row["share"] = row["speedup"] / row["predicted"]
            row["colocated_speedup"] = seconds["ring"] / seconds["ps-colocated"]
        result["rows"].append(row)
        with open(out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    print(write_report(result, out))
    print(f"ps_scaling: saved {out}", file=sys.stderr)
    return 0 if all(not row["errors"] for row in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
