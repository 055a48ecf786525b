#!/usr/bin/env python3
"""One command each for a libddp cluster on EKS (the Makefile's eks-* targets call this):

    python3 k8s/eks.py up                         terraform apply; its outputs to k8s/local/
    python3 k8s/eks.py run JOB=ddp-digits [OVERLAY=gpu-efa]      (or JOB=ddp-ps OVERLAY=ps,
                                                 JOB=ddp-torch-digits OVERLAY=trainjob)
        image built and pushed (docker buildx; without it, or with IMAGE_BUILDER=codebuild,
        terraform's CodeBuild project from a zip of the commit), a local overlay with that job
        alone (resumed), applied; waits for success or failure; prints accuracy, busbw and the
        EFA verification
    python3 k8s/eks.py stage-data                 the training data to s3://BUCKET/data/ (FSx /data)
    python3 k8s/eks.py down                       the job deleted, terraform destroy

Every step says what it does and how long it took. DRY_RUN=1 runs what can run offline (render,
validate, and with REHEARSE=1 the job rehearsed in network namespaces) and prints the commands
it would run. TF_VARS passes terraform its -var flags (e.g. TF_VARS='-var
endpoint_public_cidrs=["203.0.113.7/32"]'). Nothing tracked is written: terraform's outputs,
the local overlays, the logs and the staged data all go under k8s/local/ (git-ignored).
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import time

K8S = pathlib.Path(__file__).resolve().parent
ROOT = K8S.parent
LOCAL = pathlib.Path(os.environ.get("EKS_LOCAL", K8S / "local"))  # git-ignored
DRY_RUN = os.environ.get("DRY_RUN", "0") not in ("", "0")
NAMESPACE = "libddp"
# What a dry run uses for terraform's outputs (no state to read): the tracked placeholders.
PLACEHOLDER_OUTPUTS = {
    "image_repository": {"value": "REGISTRY/libddp"}, "cluster_name": {"value": "libddp"},
    "fsx_id": {"value": "fs-0123456789abcdef0"},
    "fsx_dns_name": {"value": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com"},
    "fsx_mount_name": {"value": "abcdefgh"}, "data_bucket": {"value": "BUCKET"},
    "configure_kubectl": {"value": "aws eks --region us-west-2 update-kubeconfig --name libddp"},
    "codebuild_project": {"value": "libddp-images"}}


@contextlib.contextmanager
def step(what: str):
    print(f"==> {what}", flush=True)
    start = time.monotonic()
    try:
        yield
    finally:
        print(f"<== {what}: {time.monotonic() - start:.1f} s", flush=True)


def sh(command: str, offline: bool = False, capture: bool = False) -> str:
    """Runs a shell command, or in a dry run prints it (unless it is offline: those run)."""
    if DRY_RUN and not offline:
        print(f"    would run: {command}", flush=True)
        return ""
    print(f"    $ {command}", flush=True)
    done = subprocess.run(command, shell=True, cwd=ROOT, text=True,
                          stdout=subprocess.PIPE if capture else None)
    if done.returncode != 0:
        raise SystemExit(f"eks.py: `{command}` failed (exit {done.returncode})")
    return done.stdout or ""


def tf_vars() -> str:
    return os.environ.get("TF_VARS", "")


def outputs() -> dict:
    path = LOCAL / "outputs.json"
    if DRY_RUN and not path.exists():
        return PLACEHOLDER_OUTPUTS
    if not path.exists():
        raise SystemExit("eks.py: no k8s/local/outputs.json: run `make eks-up` first")
    return json.loads(path.read_text())


def outputs_file() -> pathlib.Path:
    """terraform's outputs as a file (the placeholders in a dry run without a state)."""
    path = LOCAL / "outputs-used.json"
    LOCAL.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(outputs()))
    return path


def up() -> None:
    with step("terraform: providers and modules (init)"):
        sh("terraform -chdir=terraform init -input=false")
    with step("terraform: offline checks (fmt, HCL, references, module inputs, cluster fit)"):
        sh(f"{shlex.quote(sys.executable)} tests/deploy/deploycheck.py --terraform", offline=True)
    with step("terraform apply (about 20 minutes)"):
        sh(f"terraform -chdir=terraform apply -input=false -auto-approve {tf_vars()}")
    with step(f"terraform outputs -> {LOCAL / 'outputs.json'}"):
        LOCAL.mkdir(parents=True, exist_ok=True)
        if not DRY_RUN:
            text = sh("terraform -chdir=terraform output -json", capture=True)
            (LOCAL / "outputs.json").write_text(text)
        else:
            sh(f"terraform -chdir=terraform output -json > {LOCAL / 'outputs.json'}")
    with step("kubectl: point at the cluster"):
        sh(outputs()["configure_kubectl"]["value"])
        sh("kubectl get nodes -L libddp/pool")
    if (outputs().get("karpenter_node_role") or {}).get("value") or \
            (DRY_RUN and "karpenter=true" in tf_vars()):
        with step("Karpenter's NodePools and EC2NodeClasses (k8s/karpenter, local names)"):
            sh(f"{shlex.quote(sys.executable)} k8s/local_overlay.py --karpenter "
               f"--terraform-outputs {outputs_file()} --out {LOCAL / 'karpenter'}", offline=True)
            sh(f"kubectl apply -k {LOCAL / 'karpenter'}")


def builder() -> str:
    """docker (buildx here) or codebuild (terraform's project): IMAGE_BUILDER, else docker
    where buildx answers."""
    chosen = os.environ.get("IMAGE_BUILDER")
    if chosen in ("docker", "codebuild"):
        return chosen
    if chosen:
        raise SystemExit(f"eks.py: IMAGE_BUILDER={chosen}: docker or codebuild")
    found = subprocess.run("docker buildx version", shell=True, capture_output=True)
    return "docker" if found.returncode == 0 else "codebuild"


def image(overlay: str) -> str:
    """Builds and pushes the overlay's image, tagged with the commit (the repository's tags are
    immutable); returns REPOSITORY:TAG. The ps jobs run the CPU image."""
    overlay = "cpu" if overlay == "ps" else overlay
    repository = outputs()["image_repository"]["value"]
    tag = sh("git rev-parse --short HEAD", offline=True, capture=True).strip() or "dev"
    ref = f"{repository}:{overlay}-{tag}"
    how = builder()
    with step(f"image {ref}: build and push ({how})"):
        if how == "codebuild":
            codebuild(overlay, tag)
            return ref
        region = re.search(r"--region (\S+)", outputs()["configure_kubectl"]["value"])
        sh(f"aws ecr get-login-password --region {region.group(1) if region else 'us-west-2'}"
           f" | docker login --username AWS --password-stdin {repository.split('/')[0]}")
        sh(f"docker buildx build --platform linux/amd64 -f k8s/image/Dockerfile.{overlay} "
           f"-t {ref} --push .")
    return ref


def codebuild(flavour: str, tag: str, timeout_s: int = 3 * 3600) -> None:
    """The commit's files (git archive: what is committed, nothing else) to
    s3://BUCKET/build/source.zip, then terraform's CodeBuild project, waited for."""
    source = LOCAL / "source.zip"
    LOCAL.mkdir(parents=True, exist_ok=True)
    sh(f"git archive --format=zip -o {source} HEAD", offline=True)
    bucket = outputs()["data_bucket"]["value"]
    project = (outputs().get("codebuild_project") or {}).get("value", "libddp-images")
    sh(f"aws s3 cp {source} s3://{bucket}/build/source.zip")
    start = (f"aws codebuild start-build --project-name {project} --query build.id --output "
             f"text --environment-variables-override name=FLAVOUR,value={flavour} "
             f"name=TAG,value={tag}")
    build = sh(start, capture=True).strip()
    query = ("aws codebuild batch-get-builds --ids {} --query 'builds[0].buildStatus' "
             "--output text")
    if DRY_RUN:
        sh(query.format("BUILD_ID"))
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = sh(query.format(build), capture=True).strip()
        if status == "SUCCEEDED":
            return
        if status in ("FAILED", "FAULT", "STOPPED", "TIMED_OUT"):
            raise SystemExit(f"eks.py: CodeBuild {build}: {status} (its log: the console, or "
                             f"/codebuild/{project} in CloudWatch Logs)")
        time.sleep(30)
    raise SystemExit(f"eks.py: CodeBuild {build} did not end in {timeout_s} s")


def render_and_check(overlay: str, job: str, ref: str) -> pathlib.Path:
    folder = LOCAL / overlay
    with step(f"local overlay {folder}: {job} alone, resumed"):
        out = outputs_file()
        alone = f" --job {job}" if overlay not in ("ps", "trainjob") else ""  # one job each
        sh(f"{shlex.quote(sys.executable)} k8s/local_overlay.py --overlay {overlay} --image "
           f"{shlex.quote(ref)} --terraform-outputs {out}{alone} --out {folder}", offline=True)
    with step("render and validate (schemas, controller rules, EFA verification, fit)"):
        sh(f"{shlex.quote(sys.executable)} tests/deploy/deploycheck.py --render {folder}",
           offline=True)
    if DRY_RUN and os.environ.get("REHEARSE", "0") == "1":
        with step(f"rehearse {job} in network namespaces (tests/deploy/rehearsal.py)"):
            sh(f"{shlex.quote(sys.executable)} tests/deploy/rehearsal.py --overlay {overlay} "
               f"--job {job}", offline=True)
    return folder


def wait(job: str, timeout_s: int, kind: str = "mpijob") -> str:
    """Polls the job's conditions until Succeeded or Failed (a batch Job's Complete counts as
    Succeeded); returns which."""
    query = (f"kubectl -n {NAMESPACE} get {kind} {job} -o jsonpath="
             "'{range .status.conditions[?(@.status==\"True\")]}{.type} {end}'")
    if DRY_RUN:
        sh(query)
        return "Succeeded (dry run)"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = ["Succeeded" if s == "Complete" else s for s in sh(query, capture=True).split()]
        for final in ("Succeeded", "Failed"):
            if final in states:
                return final
        time.sleep(15)
    raise SystemExit(f"eks.py: {job} neither succeeded nor failed in {timeout_s} s")


def report(log: str) -> list[str]:
    """The lines worth printing from a launcher's log: accuracy, busbw, the EFA verification."""
    lines = [m.group(0) for m in re.finditer(r"final test accuracy [^\n]*", log)]
    rows = re.findall(r"^(?:\[\d+,\d+\]<stdout>:)?\s*(\d+)\s+\d+\s+\w+\s+\w+\s+[\d.]+\s+"
                      r"([\d.]+)\s+([\d.]+)\s+\d+\s*$", log, re.M)
    if rows:
        size, _, busbw = max(rows, key=lambda r: int(r[0]))
        lines.append(f"busbw {busbw} GB/s at {int(size)} bytes "
                     f"(peak {max(float(r[2]) for r in rows):g} GB/s)")
    lines += [m.group(0) for m in re.finditer(r"ddp-efa-check: [^\n]*", log)]
    lines += [m.group(0) for m in re.finditer(r"[^\n]*img/sec[^\n]*", log)][-1:]
    return lines or ["(nothing to report: see the log)"]


def run_ps(timeout_s: int) -> int:
    """k8s/ps/: the token Secret made fresh, the two Indexed Jobs applied, the workers waited
    for, worker 0's log (rank 0) read."""
    folder = render_and_check("ps", "ddp-ps", image("ps"))
    with step("apply ddp-ps (a fresh token Secret, workers and servers)"):
        sh(f"kubectl -n {NAMESPACE} delete job ddp-ps-worker ddp-ps-server --ignore-not-found")
        sh(f"kubectl apply -k {folder}")  # the namespace first
        sh(f"kubectl -n {NAMESPACE} create secret generic ddp-ps-token --from-literal=token="
           '"$(openssl rand -hex 16)" --dry-run=client -o yaml | kubectl apply -f -')
    with step(f"wait for the workers to succeed or fail (at most {timeout_s} s)"):
        state = wait("ddp-ps-worker", timeout_s, kind="job")
        print(f"    ddp-ps: {state}")
    with step("worker 0's log"):
        log = sh(f"kubectl -n {NAMESPACE} logs -l job-name=ddp-ps-worker,"
                 "batch.kubernetes.io/job-completion-index=0", capture=True)
        for line in report(log) if not DRY_RUN else []:
            print(f"    {line}")
    return 0 if state.startswith("Succeeded") else 1


def run_trainjob(job: str, timeout_s: int) -> int:
    """k8s/trainjob/ (Kubeflow Trainer v2 installed): the GPU image, the TrainJob resumed, its
    conditions waited for, every node's log read (JobSet labels its pods by the TrainJob)."""
    folder = render_and_check("trainjob", job, image("gpu-efa"))
    with step(f"apply TrainJob {job} and its runtime"):
        sh(f"kubectl -n {NAMESPACE} delete trainjob {job} --ignore-not-found")
        sh(f"kubectl apply -k {folder}")
    with step(f"wait for {job} to succeed or fail (at most {timeout_s} s)"):
        state = wait(job, timeout_s, kind="trainjob")
        print(f"    {job}: {state}")
    with step("the nodes' logs"):
        log = sh(f"kubectl -n {NAMESPACE} logs -l jobset.sigs.k8s.io/jobset-name={job} "
                 "--tail=-1 --prefix", capture=True)
        for line in report(log) if not DRY_RUN else []:
            print(f"    {line}")
    return 0 if state.startswith("Succeeded") else 1


def run(job: str, overlay: str, timeout_s: int) -> int:
    if overlay == "ps" or job == "ddp-ps":
        return run_ps(timeout_s)
    if overlay == "trainjob":
        return run_trainjob(job, timeout_s)
    ref = image(overlay)
    folder = render_and_check(overlay, job, ref)
    with step(f"apply {job}"):
        sh(f"kubectl -n {NAMESPACE} delete mpijob {job} --ignore-not-found")
        if job == "ddp-digits":  # its model check starts again suspended
            sh(f"kubectl -n {NAMESPACE} delete job ddp-model-check --ignore-not-found")
        sh(f"kubectl apply -k {folder}")
    with step(f"wait for {job} to succeed or fail (at most {timeout_s} s)"):
        state = wait(job, timeout_s)
        print(f"    {job}: {state}")
    with step(f"{job}'s launcher log -> {LOCAL / 'logs' / (job + '.log')}"):
        command = f"kubectl -n {NAMESPACE} logs job/{job}-launcher"
        log = sh(command, capture=True)
        if not DRY_RUN:
            (LOCAL / "logs").mkdir(parents=True, exist_ok=True)
            (LOCAL / "logs" / f"{job}.log").write_text(log)
        for line in report(log) if not DRY_RUN else []:
            print(f"    {line}")
    if state.startswith("Succeeded") and job == "ddp-digits" and overlay == "gpu-efa":
        return model_check(timeout_s)
    return 0 if state.startswith("Succeeded") else 1


def model_check(timeout_s: int) -> int:
    """Resumes the suspended ddp-model-check Job (the demo's checkpoint on FSx) and reports."""
    job = "ddp-model-check"
    with step(f"{job}: the checkpoint's accuracy on the held-out images"):
        sh(f"kubectl -n {NAMESPACE} patch job {job} --type merge "
           "-p '{\"spec\":{\"suspend\":false}}'")
        ok = not DRY_RUN and subprocess.run(
            f"kubectl -n {NAMESPACE} wait --for=condition=complete job/{job} "
            f"--timeout={timeout_s}s", shell=True, cwd=ROOT).returncode == 0
        if DRY_RUN:
            sh(f"kubectl -n {NAMESPACE} wait --for=condition=complete job/{job}")
        log = sh(f"kubectl -n {NAMESPACE} logs job/{job}", capture=True)
        for line in re.findall(r"model check: [^\n]*", log):
            print(f"    {line}")
    return 0 if ok or DRY_RUN else 1


def stage_data() -> None:
    data = LOCAL / "data" / "digits"
    with step(f"training data -> {data}/digits.npz"):
        data.mkdir(parents=True, exist_ok=True)
        code = ("import numpy, sys; from sklearn.datasets import load_digits; d = load_digits(); "
                "numpy.savez_compressed(sys.argv[1], images=d.images, target=d.target)")
        python = os.environ.get("PYTHON", sys.executable)
        # Offline, so a dry run makes the file too, where this Python has scikit-learn.
        has_sklearn = subprocess.run([python, "-c", "import sklearn"],
                                     capture_output=True).returncode == 0
        if not has_sklearn and not DRY_RUN:
            raise SystemExit(f"eks.py: {python} has no scikit-learn (PYTHON=.venv/bin/python)")
        sh(f"{shlex.quote(python)} -c {shlex.quote(code)} {data / 'digits.npz'}",
           offline=has_sklearn)
    bucket = outputs()["data_bucket"]["value"]
    with step(f"upload to s3://{bucket}/data/digits/ (FSx imports it at /fsx/data/digits)"):
        sh(f"aws s3 sync {data} s3://{bucket}/data/digits/")


def down() -> None:
    for overlay in ("gpu-efa", "cpu", "ps", "trainjob"):
        if (LOCAL / overlay).exists() or DRY_RUN:
            with step(f"delete the jobs of k8s/local/{overlay}"):
                sh(f"kubectl delete -k {LOCAL / overlay} --ignore-not-found")
    with step("terraform destroy (the file system, its S3 bucket and the images go too)"):
        sh(f"terraform -chdir=terraform destroy -input=false -auto-approve {tf_vars()}")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("up", "run", "down", "stage-data"):
        print(__doc__, file=sys.stderr)
        return 2
    settings = dict(a.split("=", 1) for a in argv[1:] if "=" in a)
    if DRY_RUN:
        print("DRY_RUN=1: offline steps run, the others are printed", flush=True)
    start = time.monotonic()
    status = 0
    if argv[0] == "up":
        up()
    elif argv[0] == "run":
        job = settings.get("JOB") or os.environ.get("JOB")
        if not job:
            raise SystemExit("eks.py run: JOB=ddp-digits|ddp-synthetic|ddp-bench")
        overlay = settings.get("OVERLAY") or os.environ.get("OVERLAY") or "gpu-efa"
        status = run(job, overlay, int(settings.get("TIMEOUT", os.environ.get("TIMEOUT", 3600))))
    elif argv[0] == "stage-data":
        stage_data()
    else:
        down()
    print(f"eks.py {argv[0]}: {'done' if status == 0 else 'FAILED'} in "
          f"{time.monotonic() - start:.1f} s", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
