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


def test_one_job_alone_resumed_fits_the_pool(tmp_path):
    docs = make(tmp_path, "--job", "ddp-bench")
    jobs = [d for d in docs if d["kind"] == "MPIJob"]
    assert [j["metadata"]["name"] for j in jobs] == ["ddp-bench"]
    assert jobs[0]["spec"]["runPolicy"]["suspend"] is False
    assert cf.capacity(dc.ROOT / "terraform", {"gpu-efa": docs}) == []


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
