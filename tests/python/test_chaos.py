# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The chaos run in short (tests/chaos/chaos.py; `make chaos` runs 100 trials): 5 trials, one of
each fault (a rank killed, a rank stopped, a host's link down, a host's link throttled, the
rendezvous host killed during start-up), each on a fresh cluster of network namespaces. Every
trial must end within its limit, with every survivor's error and the launcher naming the
culprit, nothing left in /dev/shm and no process left. Skipped where namespaces cannot be made.
A second run of throttled links alone: the fault whose blame rests on the network rules
(heartbeats' kSendingFlag, TCP_INFO), on one rank per host as well as several; its limit is one
timeout longer (the heartbeats that prove the link at fault cross it: docs/reliability.md).
And in-job recovery across hosts: an elastic torch.distributed job on 4 simulated hosts, one of
which loses its link; the others re-form without it and finish."""
import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHAOS = ROOT / "tests" / "chaos" / "chaos.py"
_spec = importlib.util.spec_from_file_location("netsim",
                                               ROOT / "benchmarks" / "netsim" / "netsim.py")
netsim = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(netsim)


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


def namespace_pids(namespace):
    done = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return [int(p) for p in done.stdout.split()]


@pytest.mark.once
@pytest.mark.torch
def test_an_elastic_job_goes_on_without_a_host_that_lost_its_link(ddp_env):
    """One ddprun in host a drives workers on a..d through the remote shell; the worker on d takes
    d's link down mid-epoch and trains on. Its process lives (its agent is reachable here), so
    only the peers' reports can tell the driver: each names rank 3 after DDP_TIMEOUT_SECONDS of
    silence, the driver stops d's worker, and a, b and c finish as 3 with every sample seen."""
    pytest.importorskip("torch")
    from test_elastic_c10d import check_trained_alike, finished  # it needs torch

    why = netsim.available()
    if why:
        pytest.skip(f"network namespaces: {why}")
    worker = ROOT / "tests" / "python" / "workers" / "elastic_c10d.py"
    with netsim.Cluster(4) as cluster:
        hosts = cluster.addresses
        listing = "".join(f"{h}:1\\n" for h in hosts)
        done = cluster.run(0, [sys.executable, "-m", "ddp.run", "-np", "4", "--min-np", "3",
                               "--host-discovery-script", f"printf '{listing}'", "--rsh",
                               cluster.rsh, sys.executable, str(worker), f"{hosts[3]}:0/cut"],
                           env={**ddp_env, "DDP_TIMEOUT_SECONDS": "8"}, capture_output=True,
                           text=True, timeout=240)
        left = namespace_pids(cluster.namespaces[3])
    assert done.returncode == 0, done.stdout + done.stderr
    survivors = finished(done.stdout)
    assert set(survivors) == {f"{h}:0" for h in hosts[:3]}, done.stdout + done.stderr
    for _, size, generation, sizes, worlds, _, _ in survivors.values():
        assert (size, generation, sizes, worlds) == (3, 1, "4,3", "4,3"), done.stdout
    check_trained_alike(survivors, done.stdout)
    cut = f"worker {hosts[3]}:0 (rank 3, host {hosts[3]})"
    assert f"{cut} was named by its peers as the cause of generation 0's failure; host " \
        f"{hosts[3]} gets no new workers" in done.stderr, done.stderr
    assert f"generation 1: 3 workers ({cut} stopped)" in done.stderr, done.stderr
    assert not left, f"processes left on the cut-off host: {left}"
