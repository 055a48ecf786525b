# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""What the jobs need of the cluster terraform/ makes (cluster_fit.py): the ports they use
between nodes let in, and what each overlay starts at once within the node groups it selects.
Each check is also fed a broken copy (of terraform/ or of the rendered jobs)."""
import copy
import shutil

import pytest

import cluster_fit as cf
import deploycheck as dc

TF = dc.ROOT / "terraform"


@pytest.fixture(scope="module")
def overlays():
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed here: the overlays cannot be rendered")
    return {name: dc.kustomize(folder) for name, folder in dc.OVERLAYS.items()}


def test_the_nodes_let_in_what_the_jobs_send_between_them(copy_of, overlays):
    """mpirun's ssh from a launcher pod to its workers on other nodes crosses the nodes'
    security group, which lets in only DNS and 1025-65535 unless told otherwise: the
    check finds the missing rule, and any worker port no rule covers."""
    needed = {(p, lo) for p, lo, _, _ in cf.pod_traffic(overlays)}
    assert ("tcp", 22) in needed and len(needed) >= 2, needed
    assert cf.node_traffic(TF, overlays) == []

    broken = copy_of("terraform")
    main = broken / "main.tf"
    text = main.read_text()
    assert "from_port   = 22" in text
    main.write_text(text.replace("from_port   = 22", "from_port   = 2222")
                    .replace("to_port     = 22", "to_port     = 2222"))
    found = "\n".join(cf.node_traffic(broken, overlays))
    for overlay in ("cpu", "gpu-efa"):
        assert f"{overlay}: MPIJob ddp-digits: its launcher to its workers' ssh (22): tcp 22-22 " \
               "is not let in between nodes" in found, found

    main.write_text(text.replace("node_security_group_additional_rules = {",
                                 "node_security_group_enable_recommended_rules = false\n"
                                 "  node_security_group_additional_rules = {"))
    found = "\n".join(cf.node_traffic(broken, overlays))
    assert "the ranks' listening sockets (libddp, Open MPI): tcp 32768-60999" in found, found



def test_the_node_groups_are_read_from_terraform():
    assert cf.node_pools(TF) == {"system": ("m6i.large", 3), "cpu": ("c6i.4xlarge", 2),
                                 "gpu-efa": ("p5.48xlarge", 2)}


def test_what_each_overlay_starts_at_once_fits_its_node_groups(overlays):
    """Every job goes to a Kueue queue (kueue_check.py checks that it fits the queue's quota
    whole): nothing starts on `kubectl apply` alone, so nothing can hold part of a pool."""
    assert cf.capacity(TF, overlays) == []
    for name, docs in overlays.items():
        jobs = [d for d in docs if d["kind"] == "MPIJob"]
        assert len(jobs) == 3 and all(cf.queued(j) for j in jobs), name
        assert not any(j["spec"]["runPolicy"].get("suspend") for j in jobs), name


def unqueued(docs):
    """The jobs as they were before Kueue: no queue, started on apply."""
    docs = copy.deepcopy(docs)
    for doc in docs:
        if doc["kind"] == "MPIJob":
            doc["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name")
    return docs


def test_jobs_that_could_wait_on_each_other_for_ever_are_caught(overlays):
    """The three GPU jobs without a queue, started at once, ask for 48 GPUs of the pool's 16:
    two could each hold a node and wait for the other's. A worker larger than its node, and a
    pool no node group has, are caught too."""
    broken = {"gpu-efa": unqueued(overlays["gpu-efa"])}
    found = "\n".join(cf.capacity(TF, broken))
    assert "gpu-efa: the jobs that start at once (ddp-bench, ddp-digits, ddp-synthetic) request " \
           "nvidia.com/gpu 48 on pool gpu-efa, which has 2 x p5.48xlarge (16)" in found, found

    broken = copy.deepcopy(overlays)
    job = next(d for d in broken["cpu"] if d["kind"] == "MPIJob")
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["containers"][0]["resources"]["requests"]["cpu"] = "20"
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["nodeSelector"] = {
        "libddp/pool": "arm"}
    found = "\n".join(cf.capacity(TF, broken))
    name = job["metadata"]["name"]
    assert f"cpu: MPIJob {name}: a pod requests cpu 20, more than a c6i.4xlarge has" in found
    assert f"cpu: MPIJob {name}: its pods select pool 'arm', which no node group has" in found


def test_checkpoints_on_fsx_are_exported_to_s3(copy_of, overlays):
    """The GPU demo writes /fsx/checkpoints/digits.pt: the checkpoints association exports that
    folder to S3 (and the data association imports /data); without it the checkpoint would go
    with the file system."""
    assert cf._association_paths(TF) == {"/data": {"import"}, "/checkpoints": {"export"}}
    assert cf.checkpoints_exported(TF, overlays) == []
    broken = copy_of("terraform")
    fsx = broken / "fsx.tf"
    fsx.write_text(fsx.read_text().replace('file_system_path     = "/checkpoints"',
                                           'file_system_path     = "/models"'))
    found = "\n".join(cf.checkpoints_exported(broken, overlays))
    assert "gpu-efa: MPIJob ddp-digits: checkpoint /fsx/checkpoints/digits.pt is in no folder " \
           "exported to S3 (FSx associations export /models)" in found, found
