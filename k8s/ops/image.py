# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The image a job runs: built and pushed once per content, never again. ECR's repository is
IMMUTABLE (terraform/main.tf), so a tag that exists cannot be pushed a second time: the tag
names what was built (the commit, and for Docker a digest of uncommitted changes to what the
Dockerfile copies), and an existing one is used as it is. Docker's buildx builds where it runs;
elsewhere terraform's CodeBuild project builds the commit (git archive)."""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import time

from ops.outputs import Outputs
from ops.shell import DRY_RUN, LOCAL, ROOT, Failure, last_line, probe, quote, sh, step


def builder(outputs: Outputs) -> str:
    """docker (buildx here) or codebuild (terraform's project): IMAGE_BUILDER, else docker
    where buildx answers, else CodeBuild where the stack has its project."""
    chosen = os.environ.get("IMAGE_BUILDER")
    if chosen and chosen not in ("docker", "codebuild"):
        raise Failure(f"IMAGE_BUILDER={chosen}: docker or codebuild")
    has_buildx = probe("docker buildx version").returncode == 0
    has_codebuild = bool(outputs.get("codebuild_project"))
    if chosen == "docker" and not has_buildx:
        raise Failure("IMAGE_BUILDER=docker, but `docker buildx version` fails here: install "
                      "Docker with buildx, or IMAGE_BUILDER=codebuild")
    if chosen == "codebuild" and not has_codebuild:
        raise Failure("IMAGE_BUILDER=codebuild, but the stack has no CodeBuild project (its "
                      "outputs lack codebuild_project): run `make eks-up` again")
    if chosen:
        return chosen
    if has_buildx:
        return "docker"
    if has_codebuild:
        return "codebuild"
    raise Failure("no way to build the image: Docker with buildx is not here and the stack has "
                  "no CodeBuild project; install Docker (with buildx), or run `make eks-up`, "
                  "which makes the project")


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise Failure(f"git {' '.join(args)}: {last_line(done.stderr)} (run from a git clone "
                      "of libddp)")
    return done.stdout


def build_inputs(flavour: str) -> list[str]:
    """What the flavour's Dockerfile copies from the repository (and the Dockerfile)."""
    dockerfile = ROOT / "k8s" / "image" / f"Dockerfile.{flavour}"
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    sources = {f"k8s/image/Dockerfile.{flavour}"}
    for line in re.findall(r"^COPY\s+(.*)$", text, re.M):
        words = line.split()
        if not any(w.startswith("--from") for w in words):
            sources.update(w for w in words[:-1] if not w.startswith("--"))
    return sorted(sources)


def tag(flavour: str, how: str) -> str:
    """FLAVOUR-COMMIT, and for a Docker build of a tree whose build inputs differ from the
    commit, -dirty-DIGEST of those differences (CodeBuild builds the commit itself)."""
    commit = _git("rev-parse", "--short=12", "HEAD").strip()
    if how == "codebuild":
        return f"{flavour}-{commit}"
    inputs = build_inputs(flavour)
    diff = _git("diff", "HEAD", "--binary", "--", *inputs)
    untracked = _git("ls-files", "--others", "--exclude-standard", "--", *inputs).split()
    if not diff and not untracked:
        return f"{flavour}-{commit}"
    digest = hashlib.sha256(diff.encode())
    for path in sorted(untracked):
        digest.update(path.encode() + b"\0" + (ROOT / path).read_bytes())
    return f"{flavour}-{commit}-dirty-{digest.hexdigest()[:10]}"


def exists(outputs: Outputs, repository: str, image_tag: str) -> bool:
    """Whether the repository holds the tag already (ECR's describe-images)."""
    name = repository.split("/", 1)[1] if "/" in repository else repository
    command = quote("aws", "ecr", "describe-images", "--region", outputs.region,
                    "--repository-name", name, "--image-ids", f"imageTag={image_tag}",
                    "--query", "imageDetails[0].imageTags", "--output", "text")
    if DRY_RUN:
        sh(command)
        return False
    print(f"    $ {command}", flush=True)
    done = probe(command)
    if done.returncode == 0:
        return True
    if "ImageNotFoundException" in done.stderr:
        return False
    raise Failure(f"ECR: cannot tell whether {repository}:{image_tag} exists: "
                  f"{last_line(done.stderr)}")


def image(outputs: Outputs, overlay: str, how: str) -> str:
    """Builds and pushes the overlay's image (HOW: builder's answer) unless its tag is there
    already; returns REPOSITORY:TAG. The ps jobs run the CPU image, the TrainJob the GPU one."""
    flavour = {"ps": "cpu", "trainjob": "gpu-efa"}.get(overlay, overlay)
    repository = outputs["image_repository"]
    ref = f"{repository}:{tag(flavour, how)}"
    with step(f"image {ref}"):
        if exists(outputs, repository, ref.rpartition(":")[2]):
            print(f"    {ref} is in the repository already: used as it is (tags are "
                  "immutable, and this one names what is built)", flush=True)
            return ref
        if how == "codebuild":
            if _git("status", "--porcelain", "--untracked-files=no"):
                print("    note: CodeBuild builds the commit; uncommitted changes are not in "
                      "the image", flush=True)
            codebuild(outputs, flavour, ref.rpartition(":")[2])
            return ref
        sh(f"aws ecr get-login-password --region {outputs.region} | docker login --username AWS "
           f"--password-stdin {repository.split('/')[0]}")
        sh(f"docker buildx build --platform linux/amd64 -f k8s/image/Dockerfile.{flavour} "
           f"-t {ref} --push .")
    return ref


def codebuild(outputs: Outputs, flavour: str, image_tag: str, timeout_s: int = 3 * 3600) -> None:
    """The commit's files (git archive: what is committed, nothing else) to
    s3://BUCKET/build/source.zip, then terraform's CodeBuild project, waited for."""
    source = LOCAL / "source.zip"
    LOCAL.mkdir(parents=True, exist_ok=True)
    sh(f"git archive --format=zip -o {source} HEAD", offline=True)
    bucket, project, region = outputs["data_bucket"], outputs["codebuild_project"], outputs.region
    sh(f"aws s3 cp --region {region} {source} s3://{bucket}/build/source.zip")
    start = (f"aws codebuild start-build --region {region} --project-name {project} --query "
             "build.id --output text --environment-variables-override "
             f"name=FLAVOUR,value={flavour} name=TAG,value={image_tag}")
    build = sh(start, capture=True).strip()
    query = (f"aws codebuild batch-get-builds --region {region} --ids {{}} --query "
             "'builds[0].buildStatus' --output text")
    if DRY_RUN:
        sh(query.format("BUILD_ID"))
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = sh(query.format(build), capture=True).strip()
        if status == "SUCCEEDED":
            return
        if status in ("FAILED", "FAULT", "STOPPED", "TIMED_OUT"):
            raise Failure(f"CodeBuild {build}: {status} (its log: the console, or "
                          f"/codebuild/{project} in CloudWatch Logs)")
        time.sleep(int(os.environ.get("EKS_POLL_SECONDS", "30")))
    raise Failure(f"CodeBuild {build} did not end in {timeout_s} s")
