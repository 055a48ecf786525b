# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""k8s/local_overlay.py: terraform's outputs and the pushed image go into a git-ignored overlay
on top of a tracked one, never into tracked files; and the walk-throughs in the docs write no
tracked file (walkthrough.py), as the old one did (fsx.env, kustomization.yaml)."""
import importlib.util
import json
import shutil
import subprocess

import pytest

import cluster_fit as cf
import deploycheck as dc
import walkthrough

spec = importlib.util.spec_from_file_location("local_overlay", dc.ROOT / "k8s" / "local_overlay.py")
lo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lo)

OUTPUTS = {"fsx_id": {"value": "fs-0aaaabbbbccccdddd"},
           "fsx_dns_name": {"value": "fs-0aaaabbbbccccdddd.fsx.us-west-2.amazonaws.com"},
           "fsx_mount_name": {"value": "xyzw1234"}, "cluster_name": {"value": "libddp"}}


@pytest.fixture(scope="module", autouse=True)
def kubectl():
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed here: the overlays cannot be rendered")


def make(tmp_path, *extra, overlay="gpu-efa"):
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(OUTPUTS))
    out = tmp_path / "local" / overlay
    assert lo.main(["--overlay", overlay, "--image", "REGISTRY/libddp:gpu-efa-abc123",
                    "--terraform-outputs", str(outputs), "--out", str(out), *extra]) == 0
    return dc.kustomize(out)


def test_the_local_overlay_carries_terraform_outputs_and_the_image(tmp_path):
    before = subprocess.run(["git", "-C", str(dc.ROOT), "status", "--porcelain"],
                            capture_output=True, text=True).stdout
    docs = make(tmp_path)
    pv = next(d for d in docs if d["kind"] == "PersistentVolume")
    assert pv["spec"]["csi"]["volumeHandle"] == "fs-0aaaabbbbccccdddd"
    assert pv["spec"]["csi"]["volumeAttributes"] == {
        "dnsname": "fs-0aaaabbbbccccdddd.fsx.us-west-2.amazonaws.com", "mountname": "xyzw1234"}
    jobs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "MPIJob"}
    assert set(jobs) == {"ddp-digits", "ddp-synthetic", "ddp-bench"}
    for job in jobs.values():
        for replica in job["spec"]["mpiReplicaSpecs"].values():
            assert replica["template"]["spec"]["containers"][0]["image"] == \
                "REGISTRY/libddp:gpu-efa-abc123"
        assert dc.mpijob_schema(job) == [] if dc.MPIJOB_SCHEMA.exists() else True
    assert "fs-0123456789abcdef0" not in json.dumps(docs)  # the tracked placeholder is gone
    after = subprocess.run(["git", "-C", str(dc.ROOT), "status", "--porcelain"],
                           capture_output=True, text=True).stdout
    assert after == before


def test_one_job_alone_fits_the_pool_and_leaves_the_model_check_out(tmp_path):
    """ddp-bench alone: the model check, whose pod template (the image) cannot change once the
    Job exists, goes only with ddp-digits."""
    docs = make(tmp_path, "--job", "ddp-bench")
    jobs = [d for d in docs if d["kind"] in ("MPIJob", "Job")]
    assert [j["metadata"]["name"] for j in jobs] == ["ddp-bench"]
    assert cf.queued(jobs[0]) and "suspend" not in jobs[0]["spec"]["runPolicy"]
    assert cf.capacity(dc.ROOT / "terraform", {"gpu-efa": docs}) == []
    docs = make(tmp_path, "--job", "ddp-digits")
    assert sorted(d["metadata"]["name"] for d in docs if d["kind"] in ("MPIJob", "Job")) == \
        ["ddp-digits", "ddp-model-check"]


def test_kueue_and_karpenter_are_sized_from_the_stack(tmp_path):
    """k8s/kueue's quotas and the GPU NodePool's limit follow terraform's pool sizes; the GPU
    nodes go into the stack's placement group, or none."""
    import kueue_check
    outputs = dict(OUTPUTS, kueue_quotas={"value": {
        "cpu": {"cpu": 56, "memory": "107478Mi"},
        "gpu": {"cpu": 760, "memory": "7600Gi", "nvidia.com/gpu": 32,
                "vpc.amazonaws.com/efa": 128}}}, gpu_placement_group={"value": None})
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs))
    for flag in ("--kueue", "--karpenter"):
        assert lo.main([flag, "--terraform-outputs", str(path), "--out",
                        str(tmp_path / "local" / flag[2:])]) == 0
    queues = {d["metadata"]["name"]: d for d in dc.kustomize(tmp_path / "local" / "kueue")}
    gpu = queues["libddp-gpu"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert {r["name"]: r["nominalQuota"] for r in gpu} == {
        "cpu": "760", "memory": "7600Gi", "nvidia.com/gpu": "32", "vpc.amazonaws.com/efa": "128"}
    assert [p for d in queues.values() for p in kueue_check.objects(d)] == []
    nodes = {(d["kind"], d["metadata"]["name"]): d for d in
             dc.kustomize(tmp_path / "local" / "karpenter")}
    assert nodes[("NodePool", "gpu-efa")]["spec"]["limits"] == {"nvidia.com/gpu": "32"}
    assert "placementGroupSelector" not in nodes[("EC2NodeClass", "gpu-efa")]["spec"]
    with pytest.raises(KeyError, match="kueue_quotas"):
        lo.kueue_kustomization(OUTPUTS)


def test_bad_inputs_are_refused(tmp_path):
    with pytest.raises(KeyError, match="fsx_mount_name"):
        lo.fsx_values({"fsx_id": {"value": "fs-1"}, "fsx_dns_name": {"value": "x"}})
    with pytest.raises(ValueError, match="REPOSITORY:TAG"):
        lo.kustomization("cpu", "no-tag", None)
    with pytest.raises(SystemExit):
        lo.main(["--overlay", "gpu-efa", "--image", "r/libddp:t"])  # no terraform outputs


def test_the_walkthroughs_write_no_tracked_file():
    for doc in walkthrough.DOCS:
        assert walkthrough.tracked_writes(doc) == [], doc
    old = ("```sh\nterraform -chdir=terraform output -raw fsx_env > "
           "k8s/mpijob/overlays/gpu-efa/fsx.env\n(cd k8s/mpijob/overlays/gpu-efa && kustomize "
           "edit set image \"libddp=$REPO:gpu-efa-$TAG\")\n```\n")
    found = "\n".join(walkthrough.tracked_writes(walkthrough.DOCS[0], old))
    assert "writes k8s/mpijob/overlays/gpu-efa/fsx.env, a tracked file" in found, found
    assert "kustomize edit rewrites k8s/mpijob/overlays/gpu-efa/kustomization.yaml" in found
    cd = "```sh\ncd terraform\nterraform output -raw fsx_env > ../k8s/x.env\necho > main.tf\n```"
    found = "\n".join(walkthrough.tracked_writes(walkthrough.DOCS[1], cd))
    assert "writes terraform/main.tf" in found, found
