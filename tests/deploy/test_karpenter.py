# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""k8s/karpenter/ (karpenter.py): Karpenter v1's schemas and CEL rules, and what the overlays'
jobs need of the NodePools; each check also fed a broken copy."""
import copy
import shutil

import pytest

import deploycheck as dc
import karpenter as kp


@pytest.fixture(scope="module")
def rendered():
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed here: the manifests cannot be rendered")
    overlays = {name: dc.kustomize(folder) for name, folder in dc.OVERLAYS.items()}
    overlays.update({name: dc.kustomize(dc.ROOT / "k8s" / name) for name in ("ps", "trainjob")})
    return kp.render(), overlays


def by_name(docs, kind, name):
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def test_every_object_passes_karpenter_v1_schemas_and_cel_rules(rendered):
    docs, _ = rendered
    if not all(p.exists() for p in kp.SCHEMAS.values()):
        pytest.skip(f"no Karpenter schemas in {dc.SHARED / 'schemas'} (set DDP_SHARED)")
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == [
        ("EC2NodeClass", "cpu"), ("EC2NodeClass", "gpu-efa"), ("NodePool", "cpu"),
        ("NodePool", "gpu-efa")]
    assert [p for d in docs for p in kp.schema(d) + kp.cel_rules(d)] == []


def test_the_schema_and_the_cel_rules_catch_mistakes(rendered):
    docs, _ = rendered
    if not all(p.exists() for p in kp.SCHEMAS.values()):
        pytest.skip("no Karpenter schemas")
    pool = copy.deepcopy(by_name(docs, "NodePool", "gpu-efa"))
    pool["spec"]["disruption"]["consolidationPolicy"] = "WhenIdle"
    pool["spec"]["template"]["spec"]["nodeClassRef"]["group"] = "karpenter.k8s.aws/v1"
    pool["spec"]["template"]["metadata"]["labels"]["karpenter.sh/pool"] = "x"
    found = "\n".join(kp.schema(pool) + kp.cel_rules(pool))
    assert "'WhenIdle' is not one of" in found and "does not match '^[^/]*$'" in found, found
    assert "label karpenter.sh/pool: restricted domain" in found
    node_class = copy.deepcopy(by_name(docs, "EC2NodeClass", "gpu-efa"))
    node_class["spec"]["instanceProfile"] = "x"
    node_class["spec"]["capacityReservationSelectorTerms"] = [{"id": "r-123"}]
    found = "\n".join(kp.schema(node_class) + kp.cel_rules(node_class))
    assert "exactly one of role and instanceProfile" in found
    assert "does not match '^cr-[0-9a-z]+$'" in found, found


def test_the_node_pools_hold_what_the_overlays_run(rendered):
    docs, overlays = rendered
    assert kp.fits_libddp(docs, overlays) == []


@pytest.mark.parametrize("breakage, message", [
    (lambda p, c: p["spec"]["template"]["spec"]["requirements"][1].update(
        values=["on-demand", "reserved"]), "must come from reserved capacity"),
    (lambda p, c: c["spec"].pop("capacityReservationSelectorTerms"),
     "its EC2NodeClass selects no capacity reservation"),
    (lambda p, c: p["spec"]["disruption"].update(consolidateAfter="Never"),
     "empty GPU nodes are never removed"),
    (lambda p, c: p["spec"]["template"]["spec"].update(expireAfter="720h"),
     "expireAfter 720h ends a node under a running job"),
    (lambda p, c: p["spec"]["disruption"].update(consolidationPolicy="WhenEmptyOrUnderutilized"),
     "moves a running job's workers"),
    (lambda p, c: p["spec"]["limits"].update({"nvidia.com/gpu": "8"}),
     "limit nvidia.com/gpu 8 cannot hold MPIJob ddp-digits (16 GPUs)"),
    (lambda p, c: p["spec"]["template"]["metadata"]["labels"].update({"libddp/pool": "gpu"}),
     "no NodePool labels its nodes libddp/pool=gpu-efa"),
    (lambda p, c: p["spec"]["template"]["spec"]["taints"].append(
        {"key": "libddp/dedicated", "value": "true", "effect": "NoSchedule"}),
     "does not tolerate NodePool gpu-efa's taint libddp/dedicated"),
])
def test_what_libddp_needs_is_checked(rendered, breakage, message):
    docs, overlays = rendered
    docs = copy.deepcopy(docs)
    breakage(by_name(docs, "NodePool", "gpu-efa"), by_name(docs, "EC2NodeClass", "gpu-efa"))
    found = "\n".join(kp.fits_libddp(docs, overlays))
    assert message in found, found


def test_another_cluster_name_gets_its_own_names(tmp_path, rendered):
    """k8s/karpenter/ names terraform's resources for cluster_name = libddp; the local overlay
    (k8s/local_overlay.py --karpenter) renames them all for another, and they still validate."""
    import importlib.util
    import json
    spec = importlib.util.spec_from_file_location("local_overlay",
                                                  dc.ROOT / "k8s" / "local_overlay.py")
    lo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lo)
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"cluster_name": {"value": "team-a"}}))
    out = tmp_path / "local" / "karpenter"
    assert lo.main(["--karpenter", "--terraform-outputs", str(outputs), "--out", str(out)]) == 0
    docs = kp.render(out)
    text = json.dumps(docs)
    assert "libddp-karpenter-node" not in text and '"karpenter.sh/discovery": "libddp"' not in text
    gpu = by_name(docs, "EC2NodeClass", "gpu-efa")["spec"]
    assert gpu["role"] == "team-a-karpenter-node"
    assert gpu["placementGroupSelector"] == {"name": "team-a-gpu-efa"}
    assert {"libddp/efa": "team-a"} in [t["tags"] for t in gpu["securityGroupSelectorTerms"]]
    if all(p.exists() for p in kp.SCHEMAS.values()):
        assert [p for d in docs for p in kp.schema(d) + kp.cel_rules(d)] == []


def test_jobs_started_together_beyond_the_limit_are_caught(rendered):
    """Under Karpenter the GPU pool is its NodePool's limit (16 GPUs, two p5): the overlay's
    three GPU jobs started without Kueue's queue would ask for 48 and could wait on each other
    for ever. Sent to the queue, they are admitted one at a time (kueue_check.py)."""
    docs, overlays = rendered
    assert kp.fits_libddp(docs, overlays) == []
    overlays = copy.deepcopy(overlays)
    for doc in overlays["gpu-efa"]:
        if doc["kind"] == "MPIJob":
            doc["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name")
    found = "\n".join(kp.fits_libddp(docs, overlays))
    assert "NodePool gpu-efa: the GPU jobs that start at once (ddp-bench, ddp-digits, " \
           "ddp-synthetic) ask for 48 GPUs, beyond its limit 16" in found, found


def test_karpenter_makes_nodes_for_every_pod_and_leaves_them_alone(rendered):
    """What stopped Karpenter or let it end a job: a request for hugepages-2Mi (it knows no
    instance type with any: "no instance type has enough resources", for ever), a training pod
    without karpenter.sh/do-not-disrupt (consolidation or drift could move it mid-job), a CPU
    pool with Spot, no budgets and a 1-minute consolidation."""
    docs, overlays = rendered
    overlays = copy.deepcopy(overlays)
    digits = next(d for d in overlays["gpu-efa"] if d["metadata"]["name"] == "ddp-digits")
    worker = digits["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    for key in ("requests", "limits"):
        worker["spec"]["containers"][0]["resources"][key]["hugepages-2Mi"] = "5120Mi"
    ps = next(d for d in overlays["ps"] if d["kind"] == "Job")
    del ps["spec"]["template"]["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"]
    runtime = next(d for d in overlays["trainjob"] if d["kind"] == "ClusterTrainingRuntime")
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "metadata"]["annotations"].clear()
    docs = copy.deepcopy(docs)
    cpu = by_name(docs, "NodePool", "cpu")
    cpu["spec"]["template"]["spec"]["requirements"][3]["values"] = ["on-demand", "spot"]
    cpu["spec"]["disruption"] = {"consolidationPolicy": "WhenEmptyOrUnderutilized",
                                 "consolidateAfter": "1m"}
    found = "\n".join(kp.fits_libddp(docs, overlays))
    for message in (
            "gpu-efa: MPIJob ddp-digits Worker: requests hugepages-2Mi, which Karpenter offers "
            "on no instance type",
            "ps: Job ddp-ps: no karpenter.sh/do-not-disrupt annotation",
            "trainjob: TrainJob ddp-torch-digits: no karpenter.sh/do-not-disrupt annotation",
            "NodePool cpu: Spot capacity", "NodePool cpu: no disruption budgets",
            "NodePool cpu: consolidateAfter 1m"):
        assert message in found, found
