"""What the side-by-side benchmark scripts share (compare_training, compare_horovod): finding
the python and launcher that run libddp's ranks, running one launch with a timeout that stops
every process it started, reading its `RESULT key=value ...` line, and describing the machine."""

import importlib.util
import os
import platform
import re
import signal
import socket
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def run_one(cmd, env, timeout, pattern=r"RESULT (.*)"):
    """(values from the last line matching `pattern`, None) or (None, why it failed with the
    output's tail). The launch runs in a session of its own, so that a timeout stops the
    launcher and every rank it started."""
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
    return [parse_result(m) for m in matches], None


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
