#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Goodput under faults: a training job on 4 ranks of this machine, one rank killed (SIGKILL)
every --kill-every seconds and replaced, against the same job without faults, side by side in
one run (docs/reliability.md).

    .venv-torch2/bin/python benchmarks/faults/goodput.py
    .venv-torch2/bin/python benchmarks/faults/goodput.py --duration 60 --kill-every 20 --models mlp

The job (worker.py): the digits CNN or a 1.1M-parameter MLP with the DDP API, trained for
--duration seconds of wall time from its launch. The configurations:

    torchrun-gloo   torchrun --max-restarts on Gloo, rank 0 checkpointing every epoch (a kill
                    restarts every rank, which resume from the checkpoint)
    torchft-gloo    torchft (Lighthouse here, 4 replicas of one rank) on its ProcessGroupGloo
    torchft-ddp     torchft on libddp's ddp.torch.torchft.ProcessGroupDDP
    ddp-elastic     libddp's in-job recovery: ddprun --nnodes 1:4 --max-restarts, the default
                    group on `ddp`, ddp.torch.elastic.run with a commit every 5 steps (the
                    survivors go on in their processes; ddprun starts a replacement, which joins
                    at a commit with a live peer's state)

A killed torchft replica is started again at once with the same id (it takes the state from a
live one); a replica that exits before the end by itself is started again too, and counted as a
crash. A killed ddp-elastic worker is replaced by ddprun.

Reported per configuration: goodput (committed steps at the end against the fault-free run's),
detection (kill to the first sign a survivor noticed: a discarded step or a smaller quorum, or
torchrun's agent failing the worker group), trained again (kill to the next committed step
after that), final test accuracy (with and without faults), crashes. Medians over the kills.
Writes benchmarks/results/goodput-<date>.md.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "worker.py")
CONFIGS = ("torchrun-gloo", "torchft-gloo", "torchft-ddp", "ddp-elastic")


class Proc:
    """A process whose output lines are kept as (time received, line)."""

    def __init__(self, argv, env, name):
        self.name = name
        self.lines: list[tuple[float, str]] = []
        self.p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))

    def kill(self):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.p.wait()


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _events(procs):
    """Every worker line (S, D, R, F) of every process, as (time, kind, fields, process)."""
    out = []
    for proc in procs:
        for _, line in proc.lines:
            if line.startswith("[") and "] " in line:  # ddprun's "[worker] " prefix
                line = line.split("] ", 1)[1]
            words = line.split(" ", 4)
            if len(words) >= 3 and words[0] in ("S", "D", "R", "F"):
                try:
                    out.append((float(words[2]), words[0], words, proc))
                except ValueError:
                    pass
    return sorted(out, key=lambda e: e[0])


def _kill_children(launcher, args, faults, rng, until):
    """Until LAUNCHER ends (or 2 minutes past UNTIL), SIGKILLs one of its children (the worker
    processes it started, which it replaces) every --kill-every seconds; returns the kills'
    times. The launcher is killed at the end."""
    kills = []
    next_kill = time.time() + args.kill_every
    while launcher.p.poll() is None and time.time() < until + 120:
        if faults and time.time() >= next_kill and time.time() < until - 1:
            workers = _children(launcher.p.pid)
            if workers:
                os.kill(rng.choice(sorted(workers)), signal.SIGKILL)
                kills.append(time.time())
            next_kill += args.kill_every
        time.sleep(0.05)
    launcher.kill()
    return kills


def run_torchrun(args, model, faults, rng, env):
    until = time.time() + args.duration
    ckpt = tempfile.mkdtemp(prefix="goodput-ckpt-")
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.ranks),
            "--max-restarts", "1000", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"localhost:{_free_port()}", WORKER, "--mode", "torchrun",
            "--backend", "gloo", "--model", model, "--until", str(until),
            "--checkpoint-dir", ckpt]
    agent = Proc(argv, env, "torchrun")
    kills = _kill_children(agent, args, faults, rng, until)
    events = _events([agent])
    noticed = [t for t, line in agent.lines if "failed (exitcode" in line]  # the agent's word
    return _summary(events, kills, noticed, crashes=[])


def run_elastic(args, model, faults, rng, env):
    until = time.time() + args.duration
    argv = [sys.executable, "-m", "ddp.run", "--nnodes", f"1:{args.ranks}", "--max-restarts",
            "1000", sys.executable, WORKER, "--mode", "elastic", "--model", model, "--until",
            str(until)]
    driver = Proc(argv, env, "ddprun")
    kills = _kill_children(driver, args, faults, rng, until)
    crashes = [line.strip()[:160] for _, line in driver.lines
               if "Traceback" in line or "exited with status" in line]
    return _summary(_events([driver]), kills, None, crashes)


def run_torchft(args, model, backend, faults, rng, env):
    from torchft._torchft import LighthouseServer  # in .venv-torch2 alone
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=1, join_timeout_ms=1000,
                                  heartbeat_timeout_ms=1000)
    until = time.time() + args.duration

    def start(i):
        return Proc([sys.executable, WORKER, "--mode", "torchft", "--backend", backend,
                     "--model", model, "--until", str(until), "--replica-id", str(i),
                     "--lighthouse", lighthouse.address()], env, f"replica{i}")
    replicas = {i: start(i) for i in range(args.ranks)}
    every, kills, crashes = list(replicas.values()), [], []
    next_kill = time.time() + args.kill_every
    try:
        while time.time() < until + 60 and any(p.p.poll() is None for p in replicas.values()):
            now = time.time()
            if faults and now >= next_kill and now < until - 1:
                i = rng.randrange(args.ranks)
                replicas[i].kill()
                kills.append(time.time())
                replicas[i] = start(i)
                every.append(replicas[i])
                next_kill += args.kill_every
            for i, proc in list(replicas.items()):
                if proc.p.poll() not in (None, 0) and time.time() < until - 1:
                    crashes.append(_last_error(proc))
                    replicas[i] = start(i)
                    every.append(replicas[i])
            time.sleep(0.05)
    finally:
        for proc in replicas.values():
            proc.kill()
        lighthouse.shutdown()
    events = _events(every)
    return _summary(events, kills, None, crashes)


def _last_error(proc):
    """The last line of a crashed process that names an exception."""
    for _, line in reversed(proc.lines):
        if "Error" in line or "Exception" in line:
            return line.strip()[:160]
    return f"exit status {proc.p.returncode}"


def _summary(events, kills, noticed, crashes):
    """Goodput's inputs, detection and recovery times per kill, the final accuracy."""
    steps = [int(w[1]) for _, kind, w, _ in events if kind in ("S", "F")]
    finals = [float(w[3]) for _, kind, w, _ in events if kind == "F" and len(w) > 3]
    detect, again = [], []
    for k in kills:
        if noticed is not None:  # torchrun: the agent's word
            seen = [t for t in noticed if t >= k]
        else:
            seen = [t for t, kind, w, _ in events if t >= k and (
                kind == "D" or (kind == "S" and int(w[3]) < _quorum_before(events, k)))]
        if not seen:
            continue
        detect.append(seen[0] - k)
        trained = [t for t, kind, _, _ in events if kind == "S" and t > seen[0]]
        if trained:
            again.append(trained[0] - k)
    return {"steps": max(steps) if steps else 0, "accuracy": min(finals) if finals else None,
            "kills": len(kills), "detect": detect, "again": again, "crashes": crashes}


def _quorum_before(events, k):
    before = [int(w[3]) for t, kind, w, _ in events if kind == "S" and t < k]
    return before[-1] if before else 0


def _median(values):
    return f"{statistics.median(values):.2f}" if values else "-"


def table(model, results):
    rows = [f"### {model}", "",
            "| configuration | goodput | committed steps (faults / none) | kills | detection, s "
            "| trained again, s | final accuracy (faults / none) | crashes |",
            "|---|---|---|---|---|---|---|---|"]
    for config, (fault_free, faulty) in results.items():
        goodput = faulty["steps"] / fault_free["steps"] if fault_free["steps"] else 0.0
        acc = (f"{faulty['accuracy'] or 0:.4f} / {fault_free['accuracy'] or 0:.4f}")
        rows.append(f"| {config} | {goodput:.2f} | {faulty['steps']} / {fault_free['steps']} | "
                    f"{faulty['kills']} | {_median(faulty['detect'])} | "
                    f"{_median(faulty['again'])} | {acc} | {len(faulty['crashes'])} |")
    crashed = {c for _, faulty in results.values() for c in faulty["crashes"]}
    return rows + [""] + [f"- crash: `{c}`" for c in sorted(crashed)] + [""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=180.0, help="seconds of training per run")
    ap.add_argument("--kill-every", type=float, default=30.0)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--models", default="cnn,mlp")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")  # ddp: this venv's
    stamp = datetime.datetime.now(datetime.timezone.utc)
    out = args.out or os.path.join(ROOT, "benchmarks", "results",
                                   f"goodput-{stamp:%Y-%m-%d-%H%M%S}.md")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    head = [f"# Goodput under faults, {stamp:%Y-%m-%d %H:%M} UTC", "",
            f"`{' '.join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])}` at {commit}, "
            f"on {platform.node()} ({os.cpu_count()} cores), {args.ranks} ranks, "
            f"{args.duration:.0f} s of training per run, a rank killed every "
            f"{args.kill_every:.0f} s (seed {args.seed}).", ""]
    lines = list(head)
    for model in args.models.split(","):
        results = {}
        for config in args.configs.split(","):
            pair = []
            for faults in (False, True):
                rng = random.Random(args.seed)
                if config == "torchrun-gloo":
                    r = run_torchrun(args, model, faults, rng, env)
                elif config == "ddp-elastic":
                    r = run_elastic(args, model, faults, rng, env)
                else:
                    r = run_torchft(args, model, config.split("-")[1], faults, rng, env)
                print(f"{model} {config} faults={faults}: {r}", flush=True)
                pair.append(r)
            results[config] = pair
        lines += table(model, results)
        with open(out, "w") as f:
            f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
