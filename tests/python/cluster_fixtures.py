# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Real local clusters for tests/python/test_ray.py and test_spark.py, started and stopped by the
tests: processes marked with an environment variable of their own, so that stopping them kills
exactly what the test started (and whatever those processes started), nothing else of the
machine's."""
import importlib.util
import os
import pathlib
import signal
import sys
import time
import uuid

WORKERS = pathlib.Path(__file__).resolve().parent / "workers"


def marker():
    """(name, value) of an environment variable to start a cluster's processes with."""
    return "DDP_TEST_CLUSTER", uuid.uuid4().hex


def marked(name, value):
    """The pids of the processes whose environment holds name=value."""
    needle = f"{name}={value}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def stop_marked(name, value, grace=5.0, first=signal.SIGTERM):
    """FIRST (SIGTERM) to every marked process, then SIGKILL to those left after GRACE
    seconds."""
    for sig, wait in ((first, grace), (signal.SIGKILL, 2.0)):
        pids = marked(name, value)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if os.path.exists(f"/proc/{p}")
                    and _state(p) not in ("Z", None)]
            time.sleep(0.1)
    return marked(name, value)


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def probe_module():
    """tests/python/workers/cluster_probe.py as a module (the clusters' workers get it by
    value: they do not have the tests on their path)."""
    if "cluster_probe" not in sys.modules:
        spec = importlib.util.spec_from_file_location("cluster_probe",
                                                      WORKERS / "cluster_probe.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["cluster_probe"] = module
        spec.loader.exec_module(module)
    return sys.modules["cluster_probe"]
