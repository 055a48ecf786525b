# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""What the side-by-side benchmark scripts share (compare_training, compare_horovod): finding
the python and launcher that run libddp's ranks, running one launch with a timeout that stops
every process it started, reading its `RESULT key=value ...` line, and describing the machine."""

import importlib.util
import os
import platform
import re
import shlex
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def worker_python(who):
    """The python that runs libddp's ranks: this one if it can import ddp, else the repo's
    venv."""
    if importlib.util.find_spec("ddp") is not None:
        return sys.executable
    venv = os.path.join(ROOT, ".venv", "bin", "python")
    if os.access(venv, os.X_OK):
        return venv
    sys.exit(f"{who}: this python cannot import ddp and there is no .venv (make build)")


def launcher(python):
    """ddprun next to the workers' python, else `python -m ddp.run`."""
    ddprun = os.path.join(os.path.dirname(python), "ddprun")
    if os.access(ddprun, os.X_OK):
        return [ddprun]
    return [python, "-m", "ddp.run"]


def free_loopback_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_times():
    """(busy, total) jiffies of all CPUs together, from /proc/stat (None where there is none)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user time
    return total - idle, total


def cpu_busy(seconds=0.5):
    """The fraction of the machine's CPU time that was busy over the next `seconds`."""
    before = cpu_times()
    time.sleep(seconds)
    after = cpu_times()
    if before is None or after is None or after[1] <= before[1]:
        return 0.0
    return (after[0] - before[0]) / (after[1] - before[1])


# Before each launch the machine must be quiet: a launch that shares 2 cores with another job
# measures the other job (a CI run beside a benchmark once made a 2-rank step 2-3x slower for
# whole launches). QUIET_LIMIT of all CPUs busy at most; waiting QUIET_MAX_WAIT s at most, then
# the launch goes on and its values say how busy the machine was ("busy_before").
QUIET_LIMIT = 0.25
QUIET_MAX_WAIT = 120.0
QUIET_SAMPLE = 0.5  # seconds of each sample


def wait_until_quiet(limit=QUIET_LIMIT, max_wait=QUIET_MAX_WAIT, sample=QUIET_SAMPLE):
    """Samples the machine's CPU use until it is at most `limit`, or `max_wait` s have passed.
    Returns (the last sample's busy fraction, seconds waited)."""
    start = time.monotonic()
    busy = cpu_busy(sample)
    while busy > limit and time.monotonic() - start < max_wait:
        busy = cpu_busy(sample)
    return busy, time.monotonic() - start


def run_one(cmd, env, timeout, pattern=r"RESULT (.*)", quiet=True):
    """(values from the last line matching `pattern`, None) or (None, why it failed with the
    output's tail). The launch runs in a session of its own, so that a timeout stops the
    launcher and every rank it started. With `quiet`, it starts once the machine is quiet
    (wait_until_quiet); every value set then has "busy_before" (the CPUs' busy fraction just
    before the launch) and "quiet_wait_s"."""
    busy, waited = wait_until_quiet() if quiet else (None, 0.0)
    if busy is not None and busy > QUIET_LIMIT:
        print(f"runner: the machine is still busy ({busy:.0%} of its CPUs) after {waited:.0f} s; "
              f"launching anyway: {shlex.join(cmd)[:120]}", file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out = ""
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                out, _ = proc.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        tail = "\n".join((out or "").splitlines()[-10:])
        return None, f"timed out after {timeout:.0f} s\n{tail}"
    matches = re.findall(pattern, out)
    if proc.returncode != 0 or not matches:
        tail = "\n".join(out.splitlines()[-15:])
        return None, f"exit status {proc.returncode}\n{tail}"
    values = [parse_result(m) for m in matches]
    if busy is not None:
        for v in values:
            v["busy_before"] = f"{busy:.3f}"
            v["quiet_wait_s"] = f"{waited:.1f}"
    return values, None


def busy_note(values):
    """A note for a value set that started on a busy machine (how busy), else nothing."""
    busy = float(values.get("busy_before", 0))
    return f" (CPUs {busy:.0%} busy before it)" if busy > QUIET_LIMIT else ""


def quiet_line(values):
    """The report's line on how quiet the machine was, over the value sets run_one returned."""
    busy = [float(v["busy_before"]) for v in values if "busy_before" in v]
    noisy = sum(1 for b in busy if b > QUIET_LIMIT)
    rule = (f"each launch waited (up to {QUIET_MAX_WAIT:.0f} s) for the CPUs to be at most "
            f"{QUIET_LIMIT:.0%} busy over {QUIET_SAMPLE:g} s")
    if not busy:
        return "- quiet machine: not checked"
    if noisy == 0:
        return f"- quiet machine: {rule}; all {len(busy)} measurements started so"
    return (f"- quiet machine: {rule}; **{noisy} of {len(busy)} measurements started on a busy "
            f"machine** (up to {max(busy):.0%}): their numbers are suspect")


def parse_result(text):
    values = dict(item.split("=", 1) for item in text.split())
    values["line"] = "RESULT " + text.strip()
    return values


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def load_average():
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def machine():
    return (f"{platform.machine()}, {os.cpu_count()} cores, {cpu_name()}, {platform.system()} "
            f"{platform.release()}")


# The training comparisons' allocator variants (ddp/memory.h): libddp with freed memory returned
# to the kernel as glibc does by default, and a run without libddp with glibc told what libddp's
# KeepFreedMemory tells it (no mmap for large blocks, no trimming), through its tunables.
MEMORY_VARIANT_ENV = {
    "ddp-returned": {"DDP_KEEP_FREED_MEMORY": "0"},
    "floor-kept": {"GLIBC_TUNABLES":
                   "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4611686018427387904"}}
