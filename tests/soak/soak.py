#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The soak: a training loop of N ranks on libddp's engine for a long time (tests/soak/worker.py,
started by ddprun on this host, so over shared memory, the embedded default), sampled from
outside once a second: each rank's resident memory (VmRSS), open file descriptors and threads,
and the bytes libddp holds in /dev/shm. After the warm-up, each must stay flat:

- resident memory: the least-squares slope over the rest of the run, times its length, at most
  max(4 MiB, 2% of the rank's median);
- file descriptors: a range of at most 1, and a slope amounting to less than 1 over the run;
- threads: a range of at most 2 (the engine's and transport's threads are fixed);
- /dev/shm: libddp's segments the same bytes in every sample, and the file system's use growing
  by less than 1 MiB.

    tests/soak/soak.py --minutes 30 --out benchmarks/results     # make soak
    tests/soak/soak.py --minutes 1                                # make test (tests/python)

Exit status 0: flat; 1: something grew (named); 2: the job failed. With --out, writes
soak-<date>.{json,md,png} there.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "worker.py")


def proc_sample(pid: int) -> dict | None:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return {"rss_kib": int(status["VmRSS"].split()[0]), "fds": fds,
            "threads": int(status["Threads"].strip())}


def shm_used() -> int:
    """Bytes in use on /dev/shm's file system, whoever holds them."""
    st = os.statvfs("/dev/shm")
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def shm_bytes() -> int:
    """Bytes of libddp's segments in /dev/shm (named ddp-...: unlinked once every peer mapped
    them, so none during a healthy job)."""
    total = 0
    for name in os.listdir("/dev/shm"):
        if name.startswith("ddp-"):
            try:
                total += os.stat(os.path.join("/dev/shm", name)).st_size
            except FileNotFoundError:
                pass
    return total


def slope(ts: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over ts (units per second)."""
    mt, my = statistics.fmean(ts), statistics.fmean(ys)
    var = sum((t - mt) ** 2 for t in ts)
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / var if var else 0.0


def analyse(samples: list[dict], ranks: int, warmup: float) -> dict:
    after = [s for s in samples if s["t"] >= warmup]
    verdict = {"warmup_seconds": warmup, "samples_after_warmup": len(after), "ranks": [],
               "problems": []}
    if len(after) < 10:
        verdict["problems"].append(f"only {len(after)} samples after the warm-up")
        return verdict
    ts = [s["t"] for s in after]
    window = ts[-1] - ts[0]
    for r in range(ranks):
        rows = [(s["t"], s["ranks"][r]) for s in after if s["ranks"][r] is not None]
        t = [x[0] for x in rows]
        rss = [x[1]["rss_kib"] for x in rows]
        fds = [x[1]["fds"] for x in rows]
        threads = [x[1]["threads"] for x in rows]
        rss_growth = slope(t, rss) * window
        rss_limit = max(4096.0, 0.02 * statistics.median(rss))
        fd_growth = slope(t, fds) * window
        row = {"rank": r, "rss_median_kib": statistics.median(rss),
               "rss_growth_kib": rss_growth, "rss_limit_kib": rss_limit,
               "fds": [min(fds), max(fds)], "fd_growth": fd_growth,
               "threads": [min(threads), max(threads)]}
        verdict["ranks"].append(row)
        if rss_growth > rss_limit:
            verdict["problems"].append(f"rank {r}: resident memory grew {rss_growth:.0f} KiB over "
                                       f"{window:.0f} s (limit {rss_limit:.0f})")
        if max(fds) - min(fds) > 1 or fd_growth >= 1:
            verdict["problems"].append(f"rank {r}: file descriptors {min(fds)}..{max(fds)}")
        if max(threads) - min(threads) > 2:
            verdict["problems"].append(f"rank {r}: threads {min(threads)}..{max(threads)}")
    shm = [s["shm_bytes"] for s in after]
    verdict["shm_bytes"] = [min(shm), max(shm)]
    if min(shm) != max(shm):
        verdict["problems"].append(f"/dev/shm held {min(shm)}..{max(shm)} bytes of segments")
    used = [s["shm_used"] for s in after]
    verdict["shm_used"] = [min(used), max(used)]
    verdict["shm_used_growth"] = slope(ts, used) * window
    if verdict["shm_used_growth"] > 1 << 20:
        verdict["problems"].append(f"/dev/shm's use grew {verdict['shm_used_growth']:.0f} bytes")
    return verdict


def report(result: dict) -> str:
    v = result["verdict"]
    lines = [f"# Soak ({result['date']})", "",
             f"{result['ranks']} ranks on one host ({result['machine']}), "
             f"{result['seconds']:.0f} s of training steps ({result['steps']} steps), sampled "
             f"every {result['interval']:g} s; "
             f"warm-up {v['warmup_seconds']:.0f} s. Command: `{result['command']}`", "",
             "| rank | resident memory (median) | growth after warm-up (limit) | fds | threads |",
             "|---|---|---|---|---|"]
    for row in v["ranks"]:
        lines.append(f"| {row['rank']} | {row['rss_median_kib'] / 1024:.1f} MiB | "
                     f"{row['rss_growth_kib']:+.0f} KiB ({row['rss_limit_kib']:.0f}) | "
                     f"{row['fds'][0]}..{row['fds'][1]} | "
                     f"{row['threads'][0]}..{row['threads'][1]} |")
    lines += ["", f"/dev/shm after the warm-up: libddp's segments {v['shm_bytes'][0]}.."
              f"{v['shm_bytes'][1]} bytes (they are unlinked once every peer has mapped them); "
              f"the file system's use {v['shm_used'][0]}..{v['shm_used'][1]} bytes.", "",
              "Verdict: " + ("flat." if not v["problems"] else "; ".join(v["problems"]))]
    return "\n".join(lines) + "\n"


def plot(result: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    samples = result["samples"]
    fig, axes = plt.subplots(3, 1, figsize=(7, 7), sharex=True)
    # Resident memory swings by megabytes within a step (arrays allocated and freed): each rank's
    # highest and lowest per minute show a trend, one line per sample would hide it.
    per = max(1, int(60 / result["interval"]))
    for r in range(result["ranks"]):
        pts = [(s["t"], s["ranks"][r]["rss_kib"] / 1024) for s in samples]
        chunks = [pts[i:i + per] for i in range(0, len(pts), per)]
        t = [c[len(c) // 2][0] for c in chunks]
        line, = axes[0].plot(t, [max(y for _, y in c) for c in chunks], label=f"rank {r}")
        axes[0].plot(t, [min(y for _, y in c) for c in chunks], color=line.get_color(),
                     linestyle="--", linewidth=0.8)
        axes[1].plot([s["t"] for s in samples], [s["ranks"][r]["fds"] for s in samples],
                     label=f"rank {r}")
    axes[2].plot([s["t"] for s in samples], [s["shm_used"] / 2**20 for s in samples])
    for ax, label in zip(axes, ("resident MiB\n(max, min per min)", "open fds",
                                "/dev/shm used, MiB")):
        ax.set_ylabel(label)
        ax.axvline(result["verdict"]["warmup_seconds"], color="gray", linestyle=":")
    axes[0].legend(fontsize=7, ncol=4)
    axes[2].set_xlabel("seconds")
    axes[0].set_title(f"soak: {result['ranks']} ranks, {result['seconds'] / 60:.0f} min "
                      f"({result['date'][:10]})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--warmup", type=float, default=0.25, help="share of the run (default 0.25)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    venv = os.path.join(ROOT, ".venv", "bin")
    p.add_argument("--ddprun", default=os.path.join(venv, "ddprun"))
    p.add_argument("--python", default=os.path.join(venv, "python"))
    p.add_argument("--out", help="folder for soak-<date>.{json,md,png}")
    p.add_argument("--report", metavar="JSON",
                   help="only rewrite the table and plot of a saved run")
    args = p.parse_args(argv)
    if args.report:
        with open(args.report, encoding="utf-8") as f:
            result = json.load(f)
        base = args.report[:-len(".json")] if args.report.endswith(".json") else args.report
        text = report(result)
        plot(result, base + ".png")
        with open(base + ".md", "w", encoding="utf-8") as f:
            f.write(text + f"\n![soak]({os.path.basename(base)}.png)\n")
        print(text)
        return 0
    seconds = args.minutes * 60
    with tempfile.TemporaryDirectory(prefix="ddp-soak-") as folder:
        log_path = os.path.join(folder, "job.log")
        with open(log_path, "wb") as log:
            job = subprocess.Popen([args.ddprun, "-np", str(args.ranks), args.python, WORKER,
                                    folder, str(seconds)], stdout=log, stderr=subprocess.STDOUT)
        start = time.monotonic()
        pids: list[int | None] = [None] * args.ranks
        samples = []
        while job.poll() is None:
            for r in range(args.ranks):
                if pids[r] is None:
                    try:
                        with open(os.path.join(folder, f"pid.{r}"), encoding="utf-8") as f:
                            pids[r] = int(f.read())
                    except (FileNotFoundError, ValueError):
                        pass
            if all(pids):
                samples.append({"t": time.monotonic() - start, "shm_bytes": shm_bytes(),
                                "shm_used": shm_used(),
                                "ranks": [proc_sample(pid) for pid in pids]})
            elif time.monotonic() - start > 120:
                job.kill()
                break
            time.sleep(args.interval)
        job.wait()
        with open(log_path, encoding="utf-8", errors="replace") as f:
            output = f.read()
    steps = [int(line.split()[-1]) for line in output.splitlines() if "SOAK STEPS" in line]
    if job.returncode != 0 or len(steps) != args.ranks:
        print(f"soak: the job failed (exit {job.returncode}):\n{output[-3000:]}", file=sys.stderr)
        return 2
    # A sample taken while ranks were exiting is not part of the run.
    samples = [s for s in samples if all(x is not None for x in s["ranks"])]
    result = {"date": datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S"),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                         f"Linux {platform.release()}",
              "command": " ".join(["tests/soak/soak.py", *(argv or sys.argv[1:])]),
              "ranks": args.ranks, "seconds": seconds, "interval": args.interval,
              "steps": steps[0], "samples": samples}
    result["verdict"] = analyse(samples, args.ranks, args.warmup * seconds)
    text = report(result)
    print(text)
    if args.out:
        base = os.path.join(args.out, f"soak-{result['date']}")
        with open(base + ".json", "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
        plot(result, base + ".png")
        with open(base + ".md", "w", encoding="utf-8") as f:
            f.write(text + f"\n![soak]({os.path.basename(base)}.png)\n")
        print(f"soak: saved {base}.{{json,md,png}}", file=sys.stderr)
    return 1 if result["verdict"]["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
