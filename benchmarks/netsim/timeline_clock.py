#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""timeline_clock: how well ddprun --job-timeline puts the ranks of several hosts on one clock.

Runs a small job (allreduces and allgathers) on HOSTS network-namespace hosts, one rank each,
with --job-timeline, RUNS times, and reads the clock offsets each rank measured against rank 0
at the start (libddp/src/clock_sync.h: 9 rounds of a barrier and a gather of the clocks, the
median taken). The namespaces share one kernel clock, so every offset measured is the method's
error. Prints each run's offsets and spreads, and the largest |offset|; written to
benchmarks/results/timeline_clock-<date>.md. Needs root (ip netns); makes and deletes its own
namespaces. Run with .venv's python after `make build`.
"""
import argparse
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "netsim"))
import netsim  # noqa: E402

JOB = """
import numpy as np
import ddp
ddp.init()
x = np.ones(1 << 12, np.float32)
for step in range(5):
    ddp.allreduce(x, name=f"grad{step % 2}")
"""


def one_run(cluster, hosts: int, folder: pathlib.Path) -> dict:
    script = folder / "job.py"
    script.write_text(JOB)
    out = folder / "job.json"
    done = cluster.run(0, [sys.executable, "-m", "ddp.run", "-np", str(hosts), "-H",
                           ",".join(f"{a}:1" for a in cluster.addresses[:hosts]), "--rsh",
                           cluster.rsh, "--job-timeline", str(out), sys.executable, str(script)],
                       capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        sys.exit(f"timeline_clock: the job failed: {done.stderr[-2000:]}")
    return json.loads(out.read_text())["otherData"]["clock_sync"]


def picture(cluster, hosts: int, folder: pathlib.Path, now: datetime.datetime) -> None:
    out = folder / "straggler.json"
    done = cluster.run(0, [sys.executable, "-m", "ddp.run", "-np", str(hosts), "-H",
                           ",".join(f"{a}:1" for a in cluster.addresses[:hosts]), "--rsh",
                           cluster.rsh, "--job-timeline", str(out), "--stragglers", "always",
                           sys.executable, str(ROOT / "benchmarks" / "netsim" /
                                               "straggler_job.py")],
                       capture_output=True, text=True, timeout=300)
    print(done.stderr[-3000:])
    png = ROOT / "benchmarks" / "results" / f"job-timeline-{now:%Y-%m-%d-%H%M%S}.png"
    subprocess.run([sys.executable, "-m", "ddp.timeline", "render", str(out), "-o", str(png),
                    "--last-ms", "40"], check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=3)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--picture", action="store_true",
                    help="also run straggler_job.py once and draw its merged timeline's last "
                    "40 ms (ddp-timeline render) to benchmarks/results/job-timeline-<date>.png")
    args = ap.parse_args()
    why = netsim.available()
    if why:
        sys.exit(f"timeline_clock: network namespaces: {why}")
    now = datetime.datetime.now()
    offsets, lines = [], []
    with netsim.Cluster(args.hosts) as cluster, tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            folder = pathlib.Path(tmp) / str(run)
            folder.mkdir()
            sync = one_run(cluster, args.hosts, folder)
            cells = [f"{sync[str(r)]['offset_us']} ({sync[str(r)]['spread_us']})"
                     for r in range(1, args.hosts)]
            offsets += [abs(sync[str(r)]["offset_us"]) for r in range(1, args.hosts)]
            lines.append(f"| {run + 1} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
        if args.picture:
            picture(cluster, args.hosts, pathlib.Path(tmp), now)
    head = [f"# timeline_clock, {now:%Y-%m-%d %H:%M}, {os.cpu_count()} cores", "",
            f"{args.hosts} network-namespace hosts, one rank each; offset to rank 0 measured at "
            "start, us (the spread of its 9 rounds in parentheses). One kernel clock: every "
            "offset is the method's error.", "",
            "| run | " + " | ".join(f"rank {r}" for r in range(1, args.hosts)) + " |",
            "|---" * args.hosts + "|"]
    tail = ["", f"|offset|: median {statistics.median(offsets):.0f} us, largest "
            f"{max(offsets)} us, over {len(offsets)} measurements."]
    text = "\n".join(head + lines + tail) + "\n"
    print(text)
    path = ROOT / "benchmarks" / "results" / f"timeline_clock-{now:%Y-%m-%d-%H%M%S}.md"
    path.write_text(text)
    print(f"written to {path}")


if __name__ == "__main__":
    main()
