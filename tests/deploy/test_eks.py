"""k8s/eks.py (make eks-up / eks-run / eks-stage-data / eks-down) in DRY_RUN=1: the offline steps
run (the local overlay rendered and validated, terraform checked, the data exported), every
cloud command is printed and none is run (aws, docker, terraform apply/destroy and kubectl
against a cluster are stand-ins that fail the test if called), every step says how long it took,
and nothing lands outside the git-ignored local folder."""
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

import deploycheck as dc

EKS = dc.ROOT / "k8s" / "eks.py"
LOGS = dc.ROOT / "tests" / "deploy" / "logs"


@pytest.fixture(scope="module")
def fake_bin(tmp_path_factory):
    """aws and docker that record a call; terraform and kubectl that pass only `fmt` and
    `kustomize` (offline) through to the real ones."""
    for tool in ("kubectl", "terraform"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed here")
    folder = tmp_path_factory.mktemp("bin")
    called = folder / "called"
    for name, offline in (("aws", None), ("docker", None), ("terraform", "fmt"),
                          ("kubectl", "kustomize")):
        real = shutil.which(name)
        passthrough = f'for a in "$@"; do [ "$a" = {offline} ] && exec {real} "$@"; done\n' \
            if offline else ""
        (folder / name).write_text(f"#!/bin/sh\n{passthrough}echo \"{name} $*\" >> {called}\n"
                                   "exit 99\n")
        (folder / name).chmod(0o755)
    return folder, called


def dry_run(fake_bin, local, *args, **env):
    folder, _ = fake_bin
    environ = {**os.environ, "DRY_RUN": "1", "EKS_LOCAL": str(local),
               "PATH": f"{folder}:{os.environ['PATH']}", **env}
    done = subprocess.run([sys.executable, str(EKS), *args], env=environ, capture_output=True,
                          text=True, timeout=300, cwd=dc.ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_run_renders_and_validates_and_prints_the_cloud_commands(fake_bin, tmp_path):
    if not dc.MPIJOB_SCHEMA.exists():  # the render step validates the MPIJobs against it
        pytest.skip(f"no MPIJob schema at {dc.MPIJOB_SCHEMA} (set DDP_SHARED)")
    before = subprocess.run(["git", "-C", str(dc.ROOT), "status", "--porcelain"],
                            capture_output=True, text=True).stdout
    out = dry_run(fake_bin, tmp_path, "run", "JOB=ddp-bench", "OVERLAY=gpu-efa",
                  IMAGE_BUILDER="docker")
    assert "would run: docker buildx build --platform linux/amd64 -f " \
           "k8s/image/Dockerfile.gpu-efa -t REGISTRY/libddp:gpu-efa-" in out, out
    assert f"would run: kubectl apply -k {tmp_path}/gpu-efa" in out
    assert "would run: kubectl -n libddp logs job/ddp-bench-launcher" in out
    assert "\nno problems\n" in out  # deploycheck --render ran on the local overlay
    assert len([line for line in out.splitlines() if line.startswith("<== ")]) == \
        len([line for line in out.splitlines() if line.startswith("==> ")]) >= 5
    assert all(line.rstrip().endswith(" s") for line in out.splitlines()
               if line.startswith("<== "))
    rendered = dc.kustomize(tmp_path / "gpu-efa")
    assert [d["metadata"]["name"] for d in rendered if d["kind"] == "MPIJob"] == ["ddp-bench"]
    # Without Docker: terraform's CodeBuild project, from a zip of the commit (made offline).
    out = dry_run(fake_bin, tmp_path, "run", "JOB=ddp-digits", "OVERLAY=cpu",
                  IMAGE_BUILDER="codebuild")
    assert f"would run: aws s3 cp {tmp_path}/source.zip s3://BUCKET/build/source.zip" in out
    assert "would run: aws codebuild start-build --project-name libddp-images" in out
    assert "name=FLAVOUR,value=cpu name=TAG,value=" in out and "\nno problems\n" in out
    assert (tmp_path / "source.zip").stat().st_size > 0
    # Kubeflow Trainer's TrainJob: the GPU image in spec.trainer.image, resumed, validated.
    out = dry_run(fake_bin, tmp_path, "run", "JOB=ddp-torch-digits", "OVERLAY=trainjob",
                  IMAGE_BUILDER="docker")
    assert "would run: kubectl -n libddp get trainjob ddp-torch-digits" in out
    assert "\nno problems\n" in out, out
    trainjob = next(d for d in dc.kustomize(tmp_path / "trainjob") if d["kind"] == "TrainJob")
    assert trainjob["spec"]["suspend"] is False
    assert trainjob["spec"]["trainer"]["image"].startswith("REGISTRY/libddp:gpu-efa-")
    assert not fake_bin[1].exists(), fake_bin[1].read_text()  # no cloud command ran
    after = subprocess.run(["git", "-C", str(dc.ROOT), "status", "--porcelain"],
                           capture_output=True, text=True).stdout
    assert after == before


def test_up_stage_data_and_down_print_what_they_would_do(fake_bin, tmp_path):
    out = dry_run(fake_bin, tmp_path, "up", TF_VARS="-var karpenter=true")
    assert "would run: terraform -chdir=terraform apply -input=false -auto-approve -var " \
           "karpenter=true" in out, out
    assert "\nno problems\n" in out  # deploycheck --terraform ran
    assert f"would run: kubectl apply -k {tmp_path}/karpenter" in out
    out = dry_run(fake_bin, tmp_path, "stage-data", PYTHON=sys.executable)
    assert f"would run: aws s3 sync {tmp_path}/data/digits s3://BUCKET/data/digits/" in out
    out = dry_run(fake_bin, tmp_path, "down")
    assert "would run: terraform -chdir=terraform destroy" in out
    assert not fake_bin[1].exists(), fake_bin[1].read_text()


def test_what_a_finished_job_reports():
    spec = importlib.util.spec_from_file_location("eks", EKS)
    eks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(eks)
    log = (LOGS / "nccl-efa.log").read_text() + "ddp-efa-check: OK: NCCL used EFA on all 16 " \
        "ranks\n"
    assert eks.report(log) == ["final test accuracy 97.78% after 20 epochs in 41.0 s; "
                               "throughput 701 images/s over 16 ranks (44 per rank)",
                               "ddp-efa-check: OK: NCCL used EFA on all 16 ranks"]
    bench = ("[1,0]<stdout>:        1024           256     f32      sum      55.1     0.02"
             "     0.03       0\n[1,0]<stdout>:  1073741824     268435456     f32      sum"
             "   25000.0    42.95    80.53       0\n")
    assert eks.report(bench) == ["busbw 80.53 GB/s at 1073741824 bytes (peak 80.53 GB/s)"]
