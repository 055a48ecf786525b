# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""k8s/trainjob/ (trainjob_check.py): Kubeflow Trainer v2's TrainJob and its torch runtime for
the torch.distributed backend `ddp`, against Trainer v2.3's CRD schemas, the webhook's rules and
libddp's needs; each fed a broken copy."""
import copy
import shutil

import pytest

import cluster_fit as cf
import deploycheck as dc
import trainjob_check as tj


@pytest.fixture(scope="module")
def docs():
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed here")
    return dc.kustomize(tj.FOLDER)


def trainjob(docs):
    return next(d for d in docs if d["kind"] == "TrainJob")


def test_the_trainjob_and_its_runtime_pass(docs):
    if not all(p.exists() for p in tj.SCHEMAS.values()):
        pytest.skip(f"no Trainer schemas in {dc.SHARED / 'schemas'}")
    assert [p for d in docs if d["kind"] in tj.SCHEMAS for p in tj.schema(d)] == []
    assert tj.rules(docs) == []
    assert tj.fits(docs, cf.node_pools(dc.ROOT / "terraform"), cf.INSTANCES) == []
    job = trainjob(docs)
    assert job["spec"]["trainer"]["image"] == "libddp:gpu-efa"
    # In its own namespace, which the folder makes, admitted by Kueue (no suspend by hand).
    assert job["metadata"]["namespace"] == "libddp-trainjob" and "suspend" not in job["spec"]
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"] == \
        ["libddp-trainjob"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "libddp"
    command = job["spec"]["trainer"]["command"]
    script = command[command.index("torchrun") + 1]
    assert f"COPY k8s/trainjob/train_digits_c10d.py {script}" in dc.DOCKERFILES[1].read_text()
    assert "dist.init_process_group(\"ddp\")" in (tj.FOLDER / "train_digits_c10d.py").read_text()


def test_the_schemas_catch_a_typo_and_a_wrong_type(docs):
    if not all(p.exists() for p in tj.SCHEMAS.values()):
        pytest.skip("no Trainer schemas")
    job = copy.deepcopy(trainjob(docs))
    job["spec"]["trainer"]["numProcsPerNode"] = 8
    job["spec"]["trainer"]["numNodes"] = "2"
    found = "\n".join(tj.schema(job))
    assert "'numProcsPerNode' was unexpected" in found and "'2' is not of type" in found, found


@pytest.mark.parametrize("breakage, message", [
    (lambda j, r: j["spec"]["runtimeRef"].update(name="torch-distributed"),
     "runtime torch-distributed is not defined here"),
    (lambda j, r: j["spec"]["trainer"]["env"].append({"name": "PET_NNODES", "value": "4"}),
     "env PET_NNODES is reserved for Trainer"),
    (lambda j, r: j["spec"]["trainer"].update(numProcPerNode=4),
     "numProcPerNode 4 is not the 8 GPUs"),
    (lambda j, r: j["spec"]["trainer"].update(command=j["spec"]["trainer"]["command"][3:]),
     "uses EFA but does not run under `ddp-efa-check --nccl -- ...`"),
    (lambda j, r: j["spec"]["trainer"]["env"][0].update(value="WARN"),
     "NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS INIT,NET"),
    (lambda j, r: r["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"]["spec"].pop("tolerations"), "do not tolerate nvidia.com/gpu"),
    (lambda j, r: r["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"]["spec"]["containers"][0].update(name="trainer"),
     "no trainer job with a container named node"),
    (lambda j, r: r["spec"]["template"]["spec"].pop("failurePolicy"),
     "no failurePolicy.maxRestarts: a lost node fails the TrainJob"),
    (lambda j, r: r["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"].pop(
        "backoffLimit"), "a restarted node would wait at a rendezvous the others have left"),
])
def test_the_rules_catch_a_broken_job(docs, breakage, message):
    broken = copy.deepcopy(docs)
    runtime = next(d for d in broken if d["kind"] == "ClusterTrainingRuntime")
    breakage(trainjob(broken), runtime)
    found = "\n".join(tj.rules(broken))
    assert message in found, found


def test_more_nodes_than_the_pool_has_are_caught(docs):
    broken = copy.deepcopy(docs)
    trainjob(broken)["spec"]["trainer"]["numNodes"] = 3
    found = tj.fits(broken, cf.node_pools(dc.ROOT / "terraform"), cf.INSTANCES)
    assert found == ["TrainJob ddp-torch-digits: 3 nodes, pool gpu-efa has 2"], found
