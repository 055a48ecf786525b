# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The model check after the GPU demo: a suspended Job in the gpu-efa overlay that reads the very
checkpoint ddp-digits writes on FSx, and k8s/image/model_check.py (ddp-model-check), which scores
a checkpoint on the demo's held-out images and fails below the bar. (The rehearsal of the GPU
overlay runs it on a checkpoint the rehearsed demo wrote: test_rehearsal.py.)"""
import shutil
import subprocess

import pytest

import deploycheck as dc
import rehearsal

SCRIPT = dc.ROOT / "k8s" / "image" / "model_check.py"
DEMO = dc.ROOT / "examples" / "pytorch" / "train_digits.py"


@pytest.fixture(scope="module")
def gpu():
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed here")
    return dc.kustomize(dc.OVERLAYS["gpu-efa"])


def test_the_job_checks_what_the_demo_writes(gpu):
    check = next(d for d in gpu if d["kind"] == "Job" and d["metadata"]["name"] ==
                 "ddp-model-check")
    assert check["spec"]["suspend"] is True  # the checkpoint exists only after the demo
    pod = check["spec"]["template"]["spec"]
    command = pod["containers"][0]["command"]
    digits = next(d for d in gpu if d["kind"] == "MPIJob" and d["metadata"]["name"] ==
                  "ddp-digits")
    args = digits["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0][
        "args"]
    written = args[args.index("--checkpoint") + 1]
    assert command[:3] == ["ddp-model-check", "--checkpoint", written], command
    assert float(command[command.index("--min-accuracy") + 1]) == float(
        args[args.index("--target-accuracy") + 1])
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]}
    assert written.startswith("/fsx/") and claims[mounts["/fsx"]] == "fsx"
    assert pod["containers"][0]["image"] == "libddp:gpu-efa"
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    assert "COPY k8s/image/model_check.py /usr/local/bin/ddp-model-check" in \
        dc.DOCKERFILES[1].read_text()
    assert dc.builtin_kind(check) == []


def test_an_untrained_model_fails_the_check(tmp_path):
    python = rehearsal.BUILT / ".venv" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"{python} is missing (make build)")
    checkpoint = tmp_path / "digits.pt"
    subprocess.run([str(python), "-c", (
        "import importlib.util, sys, torch\n"
        f"spec = importlib.util.spec_from_file_location('d', {str(DEMO)!r})\n"
        "d = importlib.util.module_from_spec(spec); spec.loader.exec_module(d)\n"
        "torch.manual_seed(0)\n"
        f"torch.save({{'model': d.Net().state_dict(), 'epochs': 0, 'accuracy': 0.1}}, "
        f"{str(checkpoint)!r})\n")], check=True, timeout=120)
    done = subprocess.run([str(python), str(SCRIPT), "--checkpoint", str(checkpoint), "--demo",
                           str(DEMO), "--min-accuracy", "0.97"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done
    assert "on 359 held-out images" in done.stdout and "FAILED" in done.stdout
    missing = subprocess.run([str(python), str(SCRIPT), "--checkpoint", str(tmp_path / "no.pt"),
                              "--demo", str(DEMO)], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "no checkpoint at" in missing.stderr
