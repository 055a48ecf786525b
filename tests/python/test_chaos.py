# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The chaos run in short (tests/chaos/chaos.py; `make chaos` runs 100 trials): 5 trials, one of
each fault (a rank killed, a rank stopped, a host's link down, a host's link throttled, the
rendezvous host killed during start-up), each on a fresh cluster of network namespaces. Every
trial must end within its limit, with every survivor's error and the launcher naming the
culprit, nothing left in /dev/shm and no process left. Skipped where namespaces cannot be made.
A second run of throttled links alone: the fault whose blame rests on the network rules
(heartbeats' kSendingFlag, TCP_INFO), on one rank per host as well as several; its limit is one
timeout longer (the heartbeats that prove the link at fault cross it: docs/reliability.md)."""
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
    assert done.returncode == 0, done.stdout + done.stderr
    for fault in ("kill", "stop", "link-down", "throttle", "rendezvous"):
        assert re.search(rf"^\| {fault} \| 1 \| 1 \|", done.stdout, re.M), done.stdout


def test_throttled_links_are_named_within_the_timeout(ddp_env):
    done = subprocess.run([sys.executable, str(CHAOS), "--trials", "3", "--seed", "11",
                           "--faults", "throttle"],
                          env=ddp_env, capture_output=True, text=True, timeout=600)
    if done.returncode == 77:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^\| throttle \| 3 \| 3 \| [\d.]+ / [\d.]+ \| 26 \| 0 of \d+ \|",
                     done.stdout, re.M), done.stdout
