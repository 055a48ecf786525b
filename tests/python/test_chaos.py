"""The chaos run in short (tests/chaos/chaos.py; `make chaos` runs 100 trials): 5 trials, one of
each fault (a rank killed, a rank stopped, a host's link down, a host's link throttled, the
rendezvous host killed during start-up), each on a fresh cluster of network namespaces. Every
trial must end within its limit, with every survivor's error and the launcher naming the
culprit, nothing left in /dev/shm and no process left. Skipped where namespaces cannot be made.

Known open (docs/reliability.md, Chaos): under a throttled link, or a rendezvous host that dies
just as the ranks meet, a survivor can blame the wrong rank, and a throttled link can take
3 x DDP_TIMEOUT_SECONDS to be named (1 trial in 20 of each in the 100-trial run). Those two
failures are tolerated here for those two faults only; a hang, an orphan, a leftover segment, or
any failure of the other three faults fails the test."""
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHAOS = ROOT / "tests" / "chaos" / "chaos.py"


def test_five_faults_end_well(ddp_env):
    done = subprocess.run([sys.executable, str(CHAOS), "--trials", "5", "--seed", "2026"],
                          env=ddp_env, capture_output=True, text=True, timeout=600)
    if done.returncode == 77:
        pytest.skip(done.stderr.strip())
    assert done.returncode in (0, 1), done.stdout + done.stderr
    tolerated = ("wrong blame", "the launcher did not fail naming the culprit", "s after the fault")
    for fault, reasons in re.findall(r"^trial +\d+ (\S+) .*FAILED: (.*)$", done.stdout, re.M):
        assert fault in ("throttle", "rendezvous"), done.stdout
        for reason in reasons.split("; "):
            assert any(t in reason for t in tolerated), done.stdout
    for fault in ("kill", "stop", "link-down", "throttle", "rendezvous"):
        assert re.search(rf"^\| {fault} \| 1 \| \d \|", done.stdout, re.M), done.stdout
