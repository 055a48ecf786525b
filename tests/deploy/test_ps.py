# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""k8s/ps/: the parameter-server demo as one Indexed Job and a headless Service, checked by
Kubernetes' schemas and ps_check.py (ranks, sizes, names, token), within the CPU pool and the
nodes' security group; each rule fed a broken copy. (Rehearsed in test_rehearsal.py.)"""
import copy
import shutil

import pytest

import cluster_fit as cf
import deploycheck as dc
import ps_check

TF = dc.ROOT / "terraform"


@pytest.fixture(scope="module")
def docs():
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed here")
    return dc.kustomize(ps_check.FOLDER)


def job(docs):
    return next(d for d in docs if d["kind"] == "Job")


def env_of(doc, name):
    return next(e for e in doc["spec"]["template"]["spec"]["containers"][0]["env"]
                if e["name"] == name)


def test_all_ranks_are_one_job_that_fits(docs):
    """One Indexed Job of 6 pods (rank = index; the last 2 serve): Kueue admits it whole. As
    two Jobs (workers, servers) it was two workloads, one of which could run alone."""
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Job"] == ["ddp-ps"]
    assert dc.check_rendered(ps_check.FOLDER) == []  # schemas, traffic, capacity, ps rules
    needed = {(p, lo) for p, lo, _, _ in cf.pod_traffic({"ps": docs})}
    assert ("tcp", 29400) in needed  # the rendezvous store, within what the nodes let in
    assert cf.capacity(TF, {"ps": docs}) == []
    assert job(docs)["metadata"]["namespace"] == "libddp-ps"
    assert env_of(job(docs), "DDP_RENDEZVOUS_ADDR")["value"] == "ddp-ps-0.ddp-ps.libddp-ps.svc"


@pytest.mark.parametrize("breakage, message", [
    (lambda d: env_of(job(d), "DDP_SIZE").update(value="4"), "DDP_SIZE 4 is not the 6 ranks"),
    (lambda d: env_of(job(d), "DDP_PS_SERVERS").update(value="6"),
     "DDP_PS_SERVERS 6 must leave workers among the 6 ranks"),
    (lambda d: job(d)["spec"].update(parallelism=2),
     "parallelism 2 != completions 6: every rank must run at once"),
    (lambda d: env_of(job(d), "DDP_RENDEZVOUS_ADDR").update(
        value="ddp-ps-4.ddp-ps.libddp-ps.svc"), "is not rank 0's name"),
    (lambda d: env_of(job(d), "DDP_JOB_TOKEN").update(value="0123", valueFrom=None),
     "DDP_JOB_TOKEN must come from a Secret"),
    (lambda d: job(d)["spec"]["template"]["spec"].update(subdomain="ps"),
     "subdomain ps names no Service"),
    (lambda d: job(d)["spec"]["template"]["spec"]["containers"][0]["args"].__setitem__(
        2, 'DDP_RANK=$((JOB_COMPLETION_INDEX + 1)) exec "$@"'), "DDP_RANK is not the pod's index"),
    (lambda d: d.append(copy.deepcopy(job(d))), "the ranks of one job must be one Job"),
])
def test_the_rules_catch_a_broken_job(docs, breakage, message):
    broken = copy.deepcopy(docs)
    breakage(broken)
    for d in broken:
        if d["kind"] == "Job":
            container = d["spec"]["template"]["spec"]["containers"][0]
            container["env"] = [{k: v for k, v in e.items() if v is not None}
                                for e in container["env"]]
    found = "\n".join(ps_check.ps_rules(broken))
    assert message in found, found
