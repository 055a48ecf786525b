# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Gang admission, simulated (gang_sim.py) with the rendered jobs, terraform's GPU pool and
k8s/kueue's queue and configuration: two GPU jobs that each need both nodes deadlock without
Kueue (each holding one node and waiting for the other, for ever: the MPI operator's
WaitForWorkersReady), and with it run one after another; a quota beyond the nodes there are
cannot deadlock either (blockAdmission); a node lost mid-job and repaired later leaves every job
finished. No cluster here: what a scheduler and Kueue do is modelled, not run."""
import copy
import shutil

import pytest
import yaml

import cluster_fit as cf
import deploycheck as dc
import gang_sim as gs
import kueue_check

TF = dc.ROOT / "terraform"


@pytest.fixture(scope="module")
def setup():
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed here")
    docs = dc.kustomize(dc.OVERLAYS["gpu-efa"])
    kueue = kueue_check.render()
    queue = next(d for d in kueue if d["metadata"]["name"] == "libddp-gpu")
    config_map = yaml.safe_load((kueue_check.FOLDER / "manager-config.yaml").read_text())
    config = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    instance, count = cf.node_pools(TF)["gpu-efa"]
    nodes = [dict(cf.INSTANCES[instance], memory=cf.INSTANCES[instance]["memory"])
             for _ in range(count)]
    return docs, gs.Kueue.from_manifests(queue, config), nodes


def two_jobs(docs):
    return [j for j in gs.jobs_of(docs) if j.name in ("ddp-digits", "ddp-bench")]


def test_without_kueue_two_jobs_deadlock_on_two_nodes(setup):
    docs, _, nodes = setup
    jobs, deadlocked, log = gs.simulate(two_jobs(docs), nodes, kueue=None)
    assert deadlocked, log
    assert all(len(j.placed) == 2 for j in jobs), [j.placed for j in jobs]  # launcher + 1 worker


def test_with_kueue_they_run_one_after_the_other(setup):
    docs, kueue, nodes = setup
    assert kueue.quota["nvidia.com/gpu"] == 16 and kueue.block_admission
    jobs, deadlocked, log = gs.simulate(two_jobs(docs), nodes, kueue)
    assert not deadlocked and [j.state for j in jobs] == ["succeeded", "succeeded"], log
    runs = [line for line in log if " runs on nodes " in line]
    assert len(runs) == 2 and all("[0, 1]" in line for line in runs), log
    # The whole overlay at once: three jobs, each in turn.
    jobs, deadlocked, log = gs.simulate(gs.jobs_of(docs), nodes, kueue)
    assert not deadlocked and {j.state for j in jobs} == {"succeeded"}, log


def test_a_quota_beyond_the_nodes_cannot_deadlock(setup):
    """A quota for 4 nodes with 2 there (a capacity reservation half filled, a node being
    repaired): Kueue admits both jobs, which would each hold a node. With blockAdmission (k8s/
    kueue/manager-config.yaml) the second waits until the first runs; without it both are
    evicted at the timeout, again and again, until Kueue gives up on them."""
    docs, kueue, nodes = setup
    wide = copy.deepcopy(kueue)
    wide.quota = {k: 2 * v for k, v in kueue.quota.items()}
    jobs, deadlocked, log = gs.simulate(two_jobs(docs), nodes, wide)
    assert not deadlocked and [j.state for j in jobs] == ["succeeded", "succeeded"], log
    wide.block_admission = False
    jobs, deadlocked, log = gs.simulate(two_jobs(docs), nodes, wide, until_s=12 * 3600)
    assert "succeeded" not in [j.state for j in jobs], log
    assert any("evicted (pods not ready)" in line for line in log), log


def test_a_lost_node_is_waited_for_then_the_job_runs_again(setup):
    """A node lost while the first job runs (at 300 s) and repaired at 1800 s: the job waits for
    its lost worker, is evicted whole after recoveryTimeout, queued again, and runs once the node
    is back; the other job runs too. Nothing holds the pool for ever."""
    docs, kueue, nodes = setup
    assert kueue.recovery_s == 600
    jobs, deadlocked, log = gs.simulate(two_jobs(docs), nodes, kueue, lost=(1, 300, 1800))
    assert not deadlocked and [j.state for j in jobs] == ["succeeded", "succeeded"], log
    first = next(line for line in log if " runs on nodes " in line).split()[2]
    lost = next(j for j in jobs if j.name == first)
    assert lost.evictions == 1 and any(f"{first} lost 1 pods" in line for line in log), log
    assert [j.evictions for j in jobs if j is not lost] == [0], log
