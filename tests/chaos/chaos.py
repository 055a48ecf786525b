#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The chaos run: a training job of 4 to 8 ranks on 2 to 4 simulated hosts (network namespaces,
benchmarks/netsim), and one fault per trial, chosen at random (seeded) from:

- kill:       SIGKILL of one rank, once every rank trains;
- stop:       SIGSTOP of one rank (it stays stopped: a hung process, not a dead one);
- link-down:  one host's link taken down (`ip link set eth0 down`), as a pulled cable;
- throttle:   one host's link throttled to 10 kbit/s both ways (`tc ... tbf`), as a failing NIC;
- rendezvous: the rendezvous host (node 0 of a job started with one `ddprun --nnodes` per host)
              killed during start-up: its link goes down, then every process on it gets SIGKILL,
              while the ranks arrive (each waits up to ARRIVE_S at random before ddp.init()).

Each trial is judged on five counts, all of which must hold:

- ends:    every launcher still alive exits within the limit: DDP_TIMEOUT_SECONDS (or, for a
           fault before the ranks have met, DDP_START_TIMEOUT_SECONDS) plus MARGIN after the
           fault, and for a throttled link one more DDP_TIMEOUT_SECONDS (what proves the link
           at fault, the heartbeat saying data is on the way, queues behind that data on the
           throttled link: a CI run saw it arrive 10 s after the timeout, 19.7 s after the
           fault); a launcher still running at twice the limit is killed and the trial counts
           as a hang;
- blames:  every error a surviving rank reports names the culprit as its first blamed rank: the
           faulty rank; for a link, a rank across the cut (a survivor on the cut-off host names
           one outside it, one outside names one on it); for the rendezvous host, one of its ranks
           or its address. An error naming nobody, or anyone else, is a wrong blame, except
           one that names a rank for closing its connection, or (shared memory) for exiting,
           after a launcher began stopping its ranks (that rank did die, by the launcher's
           hand): counted as "after teardown";
- launcher: its exit status is non-zero and the first rank its own messages name is the culprit
           (by the same rule, the reporting rank's side of a cut taken from its message);
- shm:     no libddp segment (/dev/shm/ddp-*) is left that was not there before;
- orphans: no process is left in any simulated host once its launcher has exited.

    tests/chaos/chaos.py --trials 100 --out benchmarks/results      # make chaos (~20 min)
    tests/chaos/chaos.py --trials 5                                  # make test (tests/python)

Exit status 0: every trial passed; 1: some did not (each named, with why); 77: no network
namespaces here (not root). Needs root and iproute2, as netsim does.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "worker.py")
FAULTS = ("kill", "stop", "link-down", "throttle", "rendezvous")
THROTTLE = "10kbit"
ARRIVE_S = 3.0  # rendezvous trials: the ranks reach ddp.init() spread over this long

_spec = importlib.util.spec_from_file_location(
    "netsim", os.path.join(ROOT, "benchmarks", "netsim", "netsim.py"))
netsim = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(netsim)


class Output(threading.Thread):
    """Collects one pipe's lines with the time each arrived."""

    def __init__(self, pipe, on_line=None):
        super().__init__(daemon=True)
        self.pipe, self.lines, self.on_line = pipe, [], on_line
        self.start()

    def run(self):
        for line in iter(self.pipe.readline, ""):
            self.lines.append((time.monotonic(), line.rstrip("\n")))
            if self.on_line:
                self.on_line(line)
        self.pipe.close()

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)


class Launcher:
    """One ddprun started in a simulated host, its output followed."""

    def __init__(self, cluster, host: int, argv: list[str], env: dict, progress):
        self.host = host
        self.proc = cluster.popen(host, argv, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.out = Output(self.proc.stdout, progress)
        self.err = Output(self.proc.stderr)
        self.ended: float | None = None


# What a survivor says of a rank that died (here: by its launcher's hand, once it stops the job):
# over TCP its connection closed; over shared memory its process exited.
_DIED_BY_LAUNCHER = ("closed the connection unexpectedly", ") has exited")

def ddp_segments() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith("ddp-")}


def namespace_pids(namespace: str) -> list[int]:
    done = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return [int(p) for p in done.stdout.split()]


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def stacks(pid: int) -> str:
    """Every thread's stack of a stuck process (gdb), for --stacks."""
    done = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt 20"],
                          capture_output=True, text=True, timeout=120)
    return "\n".join(line for line in done.stdout.splitlines()
                     if line.startswith(("#", "Thread")) and "?? ()" not in line)


def shape(cluster, host: int, rate: str) -> None:
    """Throttles HOST's link both ways: what it sends (its end) and receives (the bridge's)."""
    for namespace, dev in ((cluster.namespaces[host], "eth0"), (cluster.bridge, f"p{host}")):
        subprocess.run(["ip", "netns", "exec", namespace, "tc", "qdisc", "replace", "dev", dev,
                        "root", "tbf", "rate", rate, "burst", "1600", "latency", "200ms"],
                       check=True, capture_output=True)


def link_down(cluster, host: int) -> None:
    subprocess.run(["ip", "-n", cluster.namespaces[host], "link", "set", "eth0", "down"],
                   check=True, capture_output=True)


def kill_host(cluster, host: int) -> None:
    """A host that dies: nothing more leaves it (link down first), then its processes go."""
    link_down(cluster, host)
    for pid in namespace_pids(cluster.namespaces[host]):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Trial:
    def __init__(self, index: int, fault: str, rng: random.Random, args):
        self.index, self.fault, self.args = index, fault, args
        self.hosts = rng.choice([2, 3, 4])
        self.per_host = rng.choice({2: [2, 3, 4], 3: [2], 4: [1, 2]}[self.hosts])
        self.size = self.hosts * self.per_host
        self.victim_rank = rng.randrange(self.size)
        # A cut host is not host 0 half of the time: the launcher's own host is cut too.
        self.victim_host = rng.randrange(self.hosts)
        self.delay = rng.uniform(0.0, 1.5)  # after every rank trains (start-up: after launch)
        if fault == "rendezvous":
            self.victim_host = 0
            self.delay = rng.uniform(0.3, ARRIVE_S + 0.5)
        self.during_start = False
        self.fault_at = 0.0
        self.stacks: dict[int, str] = {}
        self.ready: dict[int, tuple[int, str]] = {}
        self.stepped: set[int] = set()
        self.cond = threading.Condition()

    def host_of(self, rank: int) -> int:
        return rank // self.per_host

    def progress(self, line: str) -> None:
        m = re.search(r"CHAOS (READY|STEP) (\d+) (\d+)(?: (\S+))?", line)
        if not m:
            return
        with self.cond:
            if m.group(1) == "READY":
                self.ready[int(m.group(2))] = (int(m.group(3)), m.group(4))
            else:
                self.stepped.add(int(m.group(2)))
            self.cond.notify_all()

    # ---- judging -------------------------------------------------------------------------
    def culprits(self) -> set[int]:
        if self.fault in ("kill", "stop"):
            return {self.victim_rank}
        return {r for r in range(self.size) if self.host_of(r) == self.victim_host}

    def right_blame(self, reporter: int | None, blamed: int | None, message: str = "") -> bool:
        """Whether BLAMED, named first in REPORTER's error MESSAGE, is to blame. Across a cut
        link either side is, as seen from the other: the one that judged (the last rank in the
        message's chain of aborts, "rank J (...): aborted the job: ...", else the reporter)
        must be on the other side of the cut from the rank it named."""
        culprits = self.culprits()
        if self.fault == "rendezvous" and (blamed in culprits or
                                          netsim.SUBNET + ".1:" in message):
            return True
        if blamed is None:
            return False
        if self.fault in ("link-down", "throttle") and reporter is not None:
            aborts = re.findall(r"rank (\d+) \([^)]*\): aborted the job", message)
            judge = int(aborts[-1]) if aborts else reporter
            return (blamed in culprits) != (judge in culprits)
        return blamed in culprits

    def run(self) -> dict:
        args = self.args
        before = ddp_segments()
        env = {**os.environ, "DDP_TIMEOUT_SECONDS": str(args.timeout),
               "DDP_START_TIMEOUT_SECONDS": str(args.start_timeout)}
        worker = [sys.executable, WORKER, str(args.train_seconds)]
        if self.fault == "rendezvous":  # ranks arrive over ARRIVE_S: the host dies among them
            worker.append(str(ARRIVE_S))
        record = {"trial": self.index, "fault": self.fault, "hosts": self.hosts,
                  "ranks": self.size}
        with netsim.Cluster(self.hosts) as cluster:
            if self.fault == "rendezvous":
                env["DDP_JOB_TOKEN"] = os.urandom(16).hex()
                port = 29400 + self.index % 500
                launchers = [Launcher(cluster, h, [
                    sys.executable, "-m", "ddp.run", "--nnodes", str(self.hosts), "--node-rank",
                    str(h), "--rendezvous", f"{cluster.addresses[0]}:{port}", "-np",
                    str(self.size), *worker], env, self.progress) for h in range(self.hosts)]
            else:
                launchers = [Launcher(cluster, 0, [
                    sys.executable, "-m", "ddp.run", "-np", str(self.size), "-H",
                    cluster.hosts_arg(self.per_host), "--rsh", cluster.rsh, *worker], env,
                    self.progress)]
            started = time.monotonic()
            record.update(self._inject(cluster, launchers, started))
            record.update(self._wait(cluster, launchers))
        record.update(self._judge(launchers, before))
        return record

    def _inject(self, cluster, launchers, started) -> dict:
        if self.fault == "rendezvous":
            time.sleep(self.delay)
            self.during_start = len(self.ready) < self.size
            kill_host(cluster, 0)
            self.fault_at = time.monotonic()
            return {"victim": "host0", "during_start": self.during_start,
                    "fault_after_s": round(self.fault_at - started, 2)}
        deadline = started + self.args.start_timeout + 30
        with self.cond:  # every rank trains before the fault
            while len(self.stepped) < self.size and time.monotonic() < deadline:
                if any(lau.proc.poll() is not None for lau in launchers):
                    break
                self.cond.wait(0.2)
            trained = len(self.stepped) == self.size
        if not trained:
            self.fault_at = time.monotonic()
            return {"victim": "-", "setup_failed": True}
        time.sleep(self.delay)
        if self.fault in ("kill", "stop"):
            pid = self.ready[self.victim_rank][0]
            os.kill(pid, signal.SIGKILL if self.fault == "kill" else signal.SIGSTOP)
            victim = f"rank {self.victim_rank}"
        elif self.fault == "link-down":
            link_down(cluster, self.victim_host)
            victim = f"host{self.victim_host}"
        else:
            shape(cluster, self.victim_host, THROTTLE)
            victim = f"host{self.victim_host}"
        self.fault_at = time.monotonic()
        return {"victim": victim, "during_start": False,
                "fault_after_s": round(self.fault_at - started, 2)}

    def limit(self, during_start: bool) -> float:
        base = self.args.start_timeout if during_start else self.args.timeout
        if self.fault == "throttle" and not during_start:
            base += self.args.timeout  # its evidence crosses the throttled link (docstring)
        return base + self.args.margin

    def _wait(self, cluster, launchers) -> dict:
        alive = [lau for lau in launchers if lau.host != 0 or self.fault != "rendezvous"]
        limit = self.limit(self.during_start)
        hang = False
        for lau in alive:
            left = self.fault_at + 2 * limit - time.monotonic()
            try:
                lau.proc.wait(timeout=max(left, 0.1))
            except subprocess.TimeoutExpired:
                hang = True
                os.killpg(lau.proc.pid, signal.SIGKILL)
                lau.proc.wait()
            lau.ended = time.monotonic()
        ended = max(lau.ended for lau in alive)
        # Orphans: anything still in a simulated host once its launcher is gone (a moment for
        # the kernel to reap what was just killed).
        orphans: list[str] = []
        for _ in range(30):
            pids = [p for ns in cluster.namespaces for p in namespace_pids(ns)]
            if not pids:
                break
            time.sleep(0.1)
        else:
            orphans = [f"{p} {cmdline(p)}" for p in pids]
            if hang and self.args.stacks:
                self.stacks = {p: stacks(p) for p in pids if "ddp.run" not in cmdline(p)}
            for p in pids:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for lau in launchers:
            lau.out.join(5)
            lau.err.join(5)
        return {"ended_after_s": round(ended - self.fault_at, 2), "limit_s": limit, "hang": hang,
                "orphans": orphans, "stacks": self.stacks}

    def _judge(self, launchers, before) -> dict:
        errors, wrong, teardown = [], [], []
        # Once a launcher stops its ranks (the job has failed, its culprit named), a survivor
        # elsewhere may see one of them close its connections before its own launcher stops it:
        # such an error names a rank that did just die, by the launcher's hand. It is counted
        # apart (after_teardown), not as a wrong blame.
        stops = [t for lau in launchers for t, line in lau.err.lines
                 if line.startswith("ddprun") and "stopping the other" in line]
        teardown_at = min(stops) if stops else float("inf")
        for lau in launchers:
            for at, line in lau.out.lines:
                m = re.search(r"CHAOS ERROR (-?\d+) (\S+) (.*)", line)
                if not m:
                    continue
                reporter = int(m.group(1))
                blamed = None if m.group(2) == "-" else int(m.group(2).split(",")[0])
                errors.append(line)
                if self.fault in ("kill", "stop") and reporter == self.victim_rank:
                    continue  # the culprit's own error (a stopped rank resumed): not a survivor's
                if not self.right_blame(reporter, blamed, m.group(3)):
                    if at > teardown_at and any(s in line for s in _DIED_BY_LAUNCHER):
                        teardown.append(line)
                    else:
                        wrong.append(line)
        launcher_ok, launcher_says = True, []
        for lau in launchers:
            if self.fault == "rendezvous" and lau.host == 0:
                continue  # killed with its host
            said = [line for _, line in lau.err.lines if line.startswith("ddprun")]
            launcher_says += said
            code = lau.proc.returncode
            named = next((re.search(r"^ddprun[^:]*: rank (\d+)", s) for s in said
                          if re.search(r"^ddprun[^:]*: rank (\d+)", s)), None)
            reporter = next((int(m.group(1)) for s in said
                             for m in [re.search(r"as rank (\d+) reports", s)] if m), None)
            text = "\n".join(said)
            ok = code != 0 and (
                (named is not None and self.right_blame(reporter, int(named.group(1)), text))
                or (self.fault == "rendezvous" and netsim.SUBNET + ".1:" in text))
            launcher_ok &= ok
        leaked = sorted(ddp_segments() - before)
        return {"errors": errors, "wrong_blames": wrong, "after_teardown": teardown,
                "launcher_ok": launcher_ok,
                "launcher_says": launcher_says,
                "exit_codes": [lau.proc.returncode for lau in launchers], "shm_left": leaked}


def passed(r: dict) -> list[str]:
    """Why trial R failed; empty when it passed."""
    why = []
    if r.get("setup_failed"):
        why.append("the job never trained (before any fault)")
    if r["hang"]:
        why.append("hang")
    elif r["ended_after_s"] > r["limit_s"]:
        why.append(f"ended {r['ended_after_s']} s after the fault (limit {r['limit_s']} s)")
    if r["wrong_blames"]:
        why.append(f"{len(r['wrong_blames'])} wrong blame(s)")
    # No survivor's error at all is fine: the launcher stopped the others before they noticed
    # (a killed rank's exit is seen at once), and named the culprit itself.
    if not r["launcher_ok"]:
        why.append("the launcher did not fail naming the culprit")
    if r["shm_left"]:
        why.append(f"{len(r['shm_left'])} segment(s) left in /dev/shm")
    if r["orphans"]:
        why.append(f"{len(r['orphans'])} orphan process(es)")
    return why


def table(records: list[dict], args) -> str:
    rows = ["| fault | trials | passed | ended (median / max s after the fault) | limit s | "
            "wrong blames | after teardown | launcher named the culprit | /dev/shm left | "
            "orphans |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for fault in (*FAULTS, "all"):
        rs = [r for r in records if fault in ("all", r["fault"])]
        if not rs:
            continue
        ends = [r["ended_after_s"] for r in rs]
        limits = sorted({r["limit_s"] for r in rs})
        rows.append(
            f"| {fault} | {len(rs)} | {sum(not passed(r) for r in rs)} | "
            f"{statistics.median(ends):.1f} / {max(ends):.1f} | "
            f"{' or '.join(f'{x:g}' for x in limits)} | "
            f"{sum(len(r['wrong_blames']) for r in rs)} of {sum(len(r['errors']) for r in rs)} "
            f"| {sum(len(r.get('after_teardown', [])) for r in rs)} "
            f"| {sum(r['launcher_ok'] for r in rs)} of {len(rs)} | "
            f"{sum(len(r['shm_left']) for r in rs)} | {sum(len(r['orphans']) for r in rs)} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--seed", type=int, default=None, help="default: the time")
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help=f"a comma-separated subset of {','.join(FAULTS)}")
    parser.add_argument("--timeout", type=float, default=8.0, help="DDP_TIMEOUT_SECONDS")
    parser.add_argument("--start-timeout", type=float, default=15.0,
                        help="DDP_START_TIMEOUT_SECONDS")
    parser.add_argument("--margin", type=float, default=10.0,
                        help="seconds past the timeout within which a trial must end")
    parser.add_argument("--train-seconds", type=float, default=120.0,
                        help="how long the job would train without a fault")
    parser.add_argument("--out", help="write chaos-<date>.{json,md} to this folder")
    parser.add_argument("--stacks", action="store_true",
                        help="on a hang, print the stuck ranks' stacks (gdb) before killing them")
    args = parser.parse_args(argv)
    faults = args.faults.split(",")
    if any(f not in FAULTS for f in faults):
        parser.error(f"--faults: choose from {','.join(FAULTS)}")
    why = netsim.available()
    if why:
        print(f"chaos: {why}", file=sys.stderr)
        return 77
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    # Every fault as often as the others, in a random order.
    order = [faults[i % len(faults)] for i in range(args.trials)]
    rng.shuffle(order)
    print(f"chaos: {args.trials} trials, seed {seed}, DDP_TIMEOUT_SECONDS={args.timeout:g}, "
          f"DDP_START_TIMEOUT_SECONDS={args.start_timeout:g}, margin {args.margin:g} s",
          flush=True)
    records = []
    began = time.monotonic()
    for i, fault in enumerate(order):
        trial = Trial(i, fault, rng, args)
        record = trial.run()
        record["failed"] = passed(record)
        records.append(record)
        print(f"trial {i:3d} {fault:10s} {record['ranks']} ranks on {record['hosts']} hosts, "
              f"{record['victim']:7s}: ended in {record['ended_after_s']:5.1f} s; "
              f"{'ok' if not record['failed'] else 'FAILED: ' + '; '.join(record['failed'])}",
              flush=True)
        if record["failed"]:
            for line in record["launcher_says"] + record["errors"] + record["orphans"]:
                print(f"    {line}", flush=True)
            for pid, text in record["stacks"].items():
                print(f"    stacks of {pid}:\n{text}", flush=True)
    text = table(records, args)
    print(text)
    failed = [r for r in records if r["failed"]]
    print(f"chaos: {len(records) - len(failed)} of {len(records)} trials passed in "
          f"{(time.monotonic() - began) / 60:.1f} min (seed {seed})")
    if args.out:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S")
        base = os.path.join(args.out, f"chaos-{stamp}")
        meta = {**vars(args), "date": stamp, "seed": seed, "command": " ".join(sys.argv),
                "machine": f"{platform.node()} ({os.cpu_count()} cores)"}
        with open(base + ".json", "w", encoding="utf-8") as f:
            json.dump({"meta": meta, "trials": records}, f, indent=1)
        with open(base + ".md", "w", encoding="utf-8") as f:
            f.write(f"# Chaos run {stamp}\n\n{len(records)} trials, seed {seed}, on "
                    f"{meta['machine']}: `{meta['command']}`\n\n{text}\n")
        print(f"chaos: wrote {base}.json and .md")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
