# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""k8s/: every YAML parsed and yamllint-clean, each overlay rendered by kustomize, MPIJobs against
the operator CRD's strict schema and the controller's rules, built-in kinds against Kubernetes'
schemas. Every validator is also fed a broken copy, to show it catches what it is for."""
import copy
import shutil

import pytest
import yaml

import deploycheck as dc
from conftest import needs


@pytest.fixture(scope="module")
def rendered():
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed here: the overlays cannot be rendered")
    return {name: dc.kustomize(folder) for name, folder in dc.OVERLAYS.items()}


def jobs(docs):
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "MPIJob"}


def test_every_yaml_parses_and_is_lint_clean():
    needs("yamllint")
    files = dc.yaml_files()
    assert len([f for f in files if "k8s" in f.parts]) >= 10, files
    assert dc.parse_yaml(files) == []
    assert dc.yamllint(files) == []


def test_a_yaml_error_and_a_lint_error_are_caught(tmp_path):
    needs("yamllint")
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1, 2\nb: 3\n")
    assert "broken.yaml" in dc.parse_yaml([broken])[0]
    ugly = tmp_path / "ugly.yaml"
    ugly.write_text("key:   value\nkey: other\n")  # extra spaces, a duplicated key
    found = "\n".join(dc.yamllint([ugly]))
    assert "colons" in found and "duplication of key" in found, found


def test_the_overlays_render_what_the_docs_promise(rendered):
    assert set(rendered) == {"cpu", "gpu-efa"}
    namespaces = {"cpu": "libddp-cpu", "gpu-efa": "libddp-gpu"}
    for name, docs in rendered.items():
        assert set(jobs(docs)) == {"ddp-digits", "ddp-synthetic", "ddp-bench"}, name
        # Each overlay in its own namespace, with its own queue: deleting one overlay never
        # takes another's jobs (or the FSx claim).
        assert [d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"] == \
            [namespaces[name]]
        queue = next(d for d in docs if d["kind"] == "LocalQueue")
        assert queue["metadata"]["namespace"] == namespaces[name]
        assert queue["spec"]["clusterQueue"] == {"cpu": "libddp-cpu",
                                                 "gpu-efa": "libddp-gpu"}[name]
        for job in jobs(docs).values():
            assert job["metadata"]["namespace"] == namespaces[name]
            assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "libddp"
            worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
            assert worker["containers"][0]["image"] == f"libddp:{name}"
            assert worker["nodeSelector"] == {"libddp/pool": name}
    gpu = {d["kind"]: d for d in rendered["gpu-efa"]}
    # The FSx ids come from fsx.env; the ConfigMap holding them is not applied (local-config).
    assert gpu["PersistentVolume"]["spec"]["csi"]["volumeHandle"].startswith("fs-")
    assert "ConfigMap" not in gpu
    bench = jobs(rendered["gpu-efa"])["ddp-bench"]
    args = bench["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--transport") + 1] == "ofi" and "FI_PROVIDER=efa" in args


def test_every_object_passes_its_schema_and_the_controller_rules(rendered):
    if not dc.MPIJOB_SCHEMA.exists():
        pytest.skip(f"no MPIJob schema at {dc.MPIJOB_SCHEMA} (set DDP_SHARED)")
    for name, docs in rendered.items():
        assert dc.manifests(docs) == [], name


def test_the_schema_catches_an_unknown_field_and_a_wrong_type(rendered):
    if not dc.MPIJOB_SCHEMA.exists():
        pytest.skip(f"no MPIJob schema at {dc.MPIJOB_SCHEMA}")
    job = copy.deepcopy(jobs(rendered["cpu"])["ddp-digits"])
    job["spec"]["slotsPerWorkers"] = 2  # a typo
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = "2"
    found = "\n".join(dc.mpijob_schema(job))
    assert "'slotsPerWorkers' was unexpected" in found
    assert "'2' is not of type 'integer'" in found
    # Nulls are dropped first, as the API server does.
    job = copy.deepcopy(jobs(rendered["cpu"])["ddp-digits"])
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher["command"] = None
    assert dc.mpijob_schema(job) == []


@pytest.mark.parametrize("breakage, message", [
    (lambda s: s["mpiReplicaSpecs"]["Launcher"].update(replicas=2), "Launcher must be present"),
    (lambda s: s["mpiReplicaSpecs"]["Worker"].update(restartPolicy="Always"), "restartPolicy"),
    (lambda s: s["runPolicy"].update(cleanPodPolicy="Finished"), "cleanPodPolicy"),
    (lambda s: s.update(launcherCreationPolicy="Eventually"), "launcherCreationPolicy"),
    (lambda s: s["mpiReplicaSpecs"]["Worker"].update(replicas=3), "-np 4 is not workers"),
    (lambda s: s.update(slotsPerWorker=4), "-N 2 is not slotsPerWorker 4"),
    (lambda s: s["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["env"].pop(),
     "-x OMP_NUM_THREADS passes a variable"),
    (lambda s: s["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"][0]["emptyDir"].update(
        sizeLimit="8Gi"), "must be below the memory limit"),
    (lambda s: s["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"][
        "requests"].update(memory="1Gi"), "memory requests 1Gi != limits 4Gi"),
    (lambda s: s["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0].update(
        command=["mpirun"]), "bypasses the image's entrypoint"),
])
def test_the_rules_catch_what_the_schema_cannot(rendered, breakage, message):
    job = copy.deepcopy(jobs(rendered["cpu"])["ddp-digits"])
    assert dc.mpijob_rules(job) == []
    breakage(job["spec"])
    found = "\n".join(dc.mpijob_rules(job))
    assert message in found, found


def test_no_pod_asks_for_what_no_node_has(rendered):
    """hugepages-2Mi, which the GPU workers requested: Karpenter's instance types have none
    (karpenter.py), and with FI_EFA_FORK_SAFE=1 libfabric's EFA provider never uses them."""
    for name, docs in rendered.items():
        for job in jobs(docs).values():
            for replica in job["spec"]["mpiReplicaSpecs"].values():
                for container in replica["template"]["spec"]["containers"]:
                    resources = container.get("resources", {})
                    asked = set(resources.get("requests", {})) | set(resources.get("limits", {}))
                    assert not any(r.startswith("hugepages-") for r in asked), (name, asked)


def test_gpu_workers_ask_for_as_many_gpus_as_slots(rendered):
    job = copy.deepcopy(jobs(rendered["gpu-efa"])["ddp-digits"])
    assert dc.mpijob_rules(job) == []
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"] = []
    limits = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "resources"]["limits"]
    limits["nvidia.com/gpu"] = 4
    found = "\n".join(dc.mpijob_rules(job))
    assert "not the 4 GPUs" in found and "nvidia.com/gpu requests 8 != limits 4" in found
    assert "do not tolerate" in found


def test_builtin_kinds_are_checked_strictly(rendered):
    pv = copy.deepcopy(next(d for d in rendered["gpu-efa"] if d["kind"] == "PersistentVolume"))
    assert dc.builtin_kind(pv) == []
    pv["spec"]["accessMode"] = ["ReadWriteMany"]  # accessModes, misspelt
    assert "'accessMode' was unexpected" in "\n".join(dc.builtin_kind(pv))
    claim = copy.deepcopy(next(d for d in rendered["gpu-efa"]
                               if d["kind"] == "PersistentVolumeClaim"))
    claim["spec"]["resources"]["requests"]["storage"] = ["1200Gi"]
    assert dc.builtin_kind(claim) != []


def test_a_broken_overlay_fails_to_render_or_its_result_is_caught(copy_of, rendered):
    if not dc.MPIJOB_SCHEMA.exists():
        pytest.skip(f"no MPIJob schema at {dc.MPIJOB_SCHEMA}")
    k8s = copy_of("k8s")
    overlay = k8s / "mpijob" / "overlays" / "gpu-efa"
    kustomization = overlay / "kustomization.yaml"
    good = kustomization.read_text()
    kustomization.write_text(good.replace("path: gpu-efa-nodes.yaml", "path: gpu-nodes.yaml"))
    with pytest.raises(RuntimeError, match="gpu-nodes.yaml"):
        dc.kustomize(overlay)
    kustomization.write_text(good)
    # A patch path misspelt renders (JSON patch's replace adds the field): the schema sees it.
    patch = overlay / "gpu-efa-nodes.yaml"
    ops = yaml.safe_load(patch.read_text())
    patch.write_text(yaml.safe_dump([dict(ops[0], path="/spec/slotsPerWorkr")] + ops[1:]))
    assert any("'slotsPerWorkr' was unexpected" in p for p in dc.manifests(dc.kustomize(overlay)))
    # And one that renders a valid but inconsistent job is caught by the rules.
    patch.write_text(yaml.safe_dump([dict(ops[0], value=4)] + ops[1:]))
    assert any("-N 8 is not slotsPerWorker 4" in p for p in dc.manifests(dc.kustomize(overlay)))


def test_mpirun_passes_only_variables_the_image_sets(rendered):
    job = copy.deepcopy(jobs(rendered["cpu"])["ddp-digits"])
    args = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["args"]
    args[1:1] = ["-x", "LD_LIBRARY_PATH"]  # the CPU image does not set it (the GPU one does)
    assert any("-x LD_LIBRARY_PATH passes a variable" in p for p in dc.mpijob_rules(job))


def launcher_of(job):
    return job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]


def test_gpu_jobs_verify_that_they_used_efa(rendered):
    """Each GPU job's mpirun runs under ddp-efa-check with the logs it reads turned on: NCCL's
    network (INFO, INIT and NET) for CUDA tensors, libddp's transport report (info) for
    ddp-bench over ofi. NCCL_DEBUG=WARN, as the overlay had it, hid a fall back to sockets."""
    gpu = jobs(rendered["gpu-efa"])
    assert all(dc.efa_verification(job) == [] for job in gpu.values())
    flags = {name: dc.launch_command(launcher_of(job)["args"])[0] for name, job in gpu.items()}
    assert flags == {"ddp-digits": ["--nccl"], "ddp-synthetic": ["--nccl"],
                     "ddp-bench": ["--ddp-ofi"]}, flags
    assert all(dc.efa_verification(job) == [] for job in jobs(rendered["cpu"]).values())

    digits = copy.deepcopy(gpu["ddp-digits"])
    args = launcher_of(digits)["args"]
    args[args.index("NCCL_DEBUG=INFO")] = "NCCL_DEBUG=WARN"
    assert "NCCL_DEBUG=WARN NCCL_DEBUG_SUBSYS=INIT,NET hides NCCL's choice of network" in \
        "\n".join(dc.efa_verification(digits))
    args[:3] = ["ddp-efa-check", "--ddp-ofi", "--"]
    assert "CUDA tensors go through NCCL: ddp-efa-check needs --nccl" in \
        "\n".join(dc.efa_verification(digits))
    del args[:3]
    assert "does not run `ddp-efa-check ... -- mpirun ...`" in dc.efa_verification(digits)[0]
    assert dc.mpijob_rules(digits) == []  # the rules still read the mpirun line

    bench = copy.deepcopy(gpu["ddp-bench"])
    next(e for e in launcher_of(bench)["env"] if e["name"] == "DDP_LOG_LEVEL")["value"] = "warning"
    assert "libddp reports its transport at DDP_LOG_LEVEL=info, and the ranks get warning" in \
        "\n".join(dc.efa_verification(bench))
