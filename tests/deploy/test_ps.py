"""k8s/ps/: the parameter-server demo as two Indexed Jobs and a headless Service, checked by
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


def job(docs, name):
    return next(d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == name)


def env_of(doc, name):
    return next(e for e in doc["spec"]["template"]["spec"]["containers"][0]["env"]
                if e["name"] == name)


def test_workers_and_servers_are_separate_groups_that_fit(docs):
    assert sorted(d["metadata"]["name"] for d in docs if d["kind"] == "Job") == [
        "ddp-ps-server", "ddp-ps-worker"]
    assert dc.check_rendered(ps_check.FOLDER) == []  # schemas, traffic, capacity, ps rules
    needed = {(p, lo) for p, lo, _, _ in cf.pod_traffic({"ps": docs})}
    assert ("tcp", 29400) in needed  # the rendezvous store, within what the nodes let in
    assert cf.capacity(TF, {"ps": docs}) == []


@pytest.mark.parametrize("breakage, message", [
    (lambda d: env_of(job(d, "ddp-ps-server"), "RANK_OFFSET").update(value="3"),
     "the Jobs' ranks are [0, 1, 2, 3, 3, 4], not 0..5 once each"),
    (lambda d: env_of(job(d, "ddp-ps-worker"), "DDP_SIZE").update(value="4"),
     "DDP_SIZE ['4', '6'] is not the 6 ranks"),
    (lambda d: job(d, "ddp-ps-server")["spec"].update(completions=3, parallelism=3),
     "DDP_PS_SERVERS 2 is not the 3 server pods"),
    (lambda d: job(d, "ddp-ps-worker")["spec"].update(parallelism=2),
     "parallelism 2 != completions 4: every rank must run at once"),
    (lambda d: env_of(job(d, "ddp-ps-server"), "DDP_RENDEZVOUS_ADDR").update(
        value="ddp-ps-server-0.ddp-ps.libddp.svc"), "is not rank 0's name"),
    (lambda d: env_of(job(d, "ddp-ps-worker"), "DDP_JOB_TOKEN").update(
        value="0123", valueFrom=None), "DDP_JOB_TOKEN must come from a Secret"),
    (lambda d: job(d, "ddp-ps-worker")["spec"]["template"]["spec"].update(subdomain="ps"),
     "subdomain ps names no Service"),
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
