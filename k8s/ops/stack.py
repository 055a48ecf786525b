# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""`make eks-up`, `eks-stage-data` and `eks-down`: terraform's stack made and its outputs kept;
Karpenter's NodePools and Kueue's queues applied for it; the training data staged; and the
teardown in the order AWS needs (the jobs, then Karpenter's nodes, waited for, then terraform
destroy), refusing to delete exported checkpoints unless told to."""
from __future__ import annotations

import json
import sys

import yaml

from ops.kube import Kube
from ops.outputs import Outputs
from ops.settings import Settings
from ops.shell import DRY_RUN, LOCAL, ROOT, Failure, last_line, need, probe, quote, sh, step

K8S = ROOT / "k8s"
# Every overlay a run may have applied (k8s/local/NAME), in the order they are deleted.
OVERLAYS = ("gpu-efa", "cpu", "ps", "trainjob")


# Where the questions about the account and its regions go: a region every account has.
HOME_REGION = "us-east-1"


def check_aws(region: str) -> None:
    """The AWS CLI, credentials it can use, and a region this account has: asked before
    anything is made (of us-east-1, which every commercial account reaches: a region that does
    not exist has no endpoint to ask)."""
    need("aws", "every step talks to AWS through it (the AWS CLI v2)")
    with step(f"AWS: credentials, and the region {region}"):
        who = quote("aws", "sts", "get-caller-identity", "--region", HOME_REGION, "--query",
                    "Arn", "--output", "text")
        regions = quote("aws", "ec2", "describe-regions", "--region", HOME_REGION,
                        "--all-regions", "--region-names", region, "--query",
                        "Regions[0].OptInStatus", "--output", "text")
        if DRY_RUN:
            sh(who)
            sh(regions)
            return
        done = probe(who)
        if done.returncode != 0:
            why = last_line(done.stderr)
            if "Could not connect" in why or "Connect timeout" in why:
                raise Failure(f"AWS cannot be reached from here ({why})")
            raise Failure(f"AWS refused these credentials ({why}): aws configure, or aws sso "
                          "login, and run again")
        print(f"    as {done.stdout.strip()}", flush=True)
        done = probe(regions)
        status = done.stdout.strip()
        if done.returncode != 0 or status not in ("opt-in-not-required", "opted-in"):
            why = last_line(done.stderr) or f"its opt-in status: {status}"
            raise Failure(f"region {region}: not one this account can use ({why}); `aws ec2 "
                          "describe-regions` lists them")


def tf_vars(settings: Settings, region: str | None = None) -> str:
    """terraform's -var arguments: TF_VARS's, and the region (REGION=, or the stack's)."""
    args = list(settings.tf_args)
    region = settings.region or region
    if region and not any("region=" in a for a in args):
        args += ["-var", f"region={region}"]
    return quote(*args)


def up(settings: Settings) -> None:
    need("terraform", "`make eks-up` applies terraform/ (terraform >= 1.9)")
    need("kubectl", "the stack's add-ons and queues are applied with it")
    tfvars = list((ROOT / "terraform").glob("*.tfvars")) + \
        list((ROOT / "terraform").glob("*.auto.tfvars.json"))
    if not any("endpoint_public_cidrs=" in a for a in settings.tf_args) and not tfvars:
        raise Failure("say who may reach the cluster's API: TF_VARS='-var "
                      'endpoint_public_cidrs=["YOUR.ADDRESS/32"]\' (or a terraform.tfvars)')
    check_aws(settings.region or "us-west-2")
    with step("terraform: providers and modules (init)"):
        sh("terraform -chdir=terraform init -input=false")
    with step("terraform: offline checks (fmt, HCL, references, module inputs, cluster fit)"):
        sh(f"{quote(sys.executable)} tests/deploy/deploycheck.py --terraform",
           offline=True)
    with step("terraform apply (about 25 minutes: EKS, the nodes, FSx, the add-ons)"):
        sh(f"terraform -chdir=terraform apply -input=false -auto-approve {tf_vars(settings)}")
    with step(f"terraform outputs -> {LOCAL / 'outputs.json'}"):
        LOCAL.mkdir(parents=True, exist_ok=True)
        text = sh("terraform -chdir=terraform output -json", capture=True)
        if not DRY_RUN:
            json.loads(text)
            (LOCAL / "outputs.json").write_text(text)
    outputs = Outputs.load()
    kube = Kube(outputs)
    kube.connect()
    sh(kube.cmd("get nodes -L libddp/pool"))
    python = quote(sys.executable)
    if outputs.karpenter or (DRY_RUN and "karpenter=true" in settings.tf_args):
        with step("Karpenter's NodePools and EC2NodeClasses (k8s/karpenter, the stack's names)"):
            kube.require(["NodePool", "EC2NodeClass"], "k8s/karpenter")
            sh(f"{python} k8s/local_overlay.py --karpenter --terraform-outputs "
               f"{outputs.write()} --out {LOCAL / 'karpenter'}", offline=True)
            kube.apply(LOCAL / "karpenter")
    with step("Kueue's flavors and ClusterQueues (k8s/kueue, sized from the outputs)"):
        kube.require(["ResourceFlavor", "ClusterQueue", "LocalQueue"], "k8s/kueue")
        sh(f"{python} k8s/local_overlay.py --kueue --terraform-outputs {outputs.write()} "
           f"--out {LOCAL / 'kueue'}", offline=True)
        kube.apply(LOCAL / "kueue")


def stage_data() -> None:
    """The digits (scikit-learn's, made here with this Python: k8s/requirements.txt) to
    s3://BUCKET/data/digits/, which FSx imports at /fsx/data/digits."""
    outputs = Outputs.load()
    data = LOCAL / "data" / "digits"
    with step(f"training data -> {data}/digits.npz"):
        try:
            import numpy
            from sklearn.datasets import load_digits
        except ImportError as e:
            raise Failure(f"this Python ({sys.executable}) lacks {e.name}: run "
                          "`make eks-stage-data`, whose environment has it (k8s/requirements.txt)")
        data.mkdir(parents=True, exist_ok=True)
        digits = load_digits()
        numpy.savez_compressed(data / "digits.npz", images=digits.images, target=digits.target)
        print(f"    wrote {data / 'digits.npz'} ({len(digits.target)} images)", flush=True)
    if not DRY_RUN:
        check_aws(outputs.region)
    bucket = outputs["data_bucket"]
    with step(f"upload to s3://{bucket}/data/digits/ (FSx imports it at /fsx/data/digits)"):
        sh(f"aws s3 sync --region {outputs.region} {data} s3://{bucket}/data/digits/")


def checkpoints(outputs: Outputs, settings: Settings) -> None:
    """terraform destroy deletes the bucket, and with it the checkpoints FSx exported there:
    refused while it holds any, unless SAVE_CHECKPOINTS=DIR (copied there first) or
    DELETE_CHECKPOINTS=1."""
    bucket, region = outputs["data_bucket"], outputs.region
    listing = quote("aws", "s3", "ls", "--region", region, "--recursive", "--summarize",
                    f"s3://{bucket}/checkpoints/")
    with step(f"exported checkpoints in s3://{bucket}/checkpoints/"):
        if DRY_RUN:
            sh(listing)
            count = 0
        else:
            done = probe(listing)
            if done.returncode not in (0, 1):  # 1: nothing under the prefix
                raise Failure(f"cannot list s3://{bucket}/checkpoints/: {last_line(done.stderr)}")
            found = [line for line in done.stdout.splitlines() if "Total Objects:" in line]
            count = int(found[0].split(":")[1]) if found else 0
        print(f"    {count} object(s)", flush=True)
        if settings.save_checkpoints:
            sh(f"aws s3 sync --region {region} s3://{bucket}/checkpoints/ "
               f"{quote(settings.save_checkpoints)}")
        elif count and not settings.delete_checkpoints:
            raise Failure(f"s3://{bucket}/checkpoints/ holds {count} object(s), which terraform "
                          "destroy deletes with the bucket: SAVE_CHECKPOINTS=DIR copies them "
                          "there first, DELETE_CHECKPOINTS=1 lets them go. Nothing was deleted")


def delete_overlay(kube: Kube, folder) -> None:
    """An overlay's objects deleted, kind by kind, leaving out kinds the cluster does not have
    (a TrainJob where Trainer was never installed: nothing of it can exist)."""
    rendered = LOCAL / f"{folder.name}.delete.yaml"
    sh(f"kubectl kustomize {quote(folder)} > {quote(rendered)}", offline=True)
    docs = [d for d in yaml.safe_load_all(rendered.read_text()) if d]
    missing = kube.missing(d["kind"] for d in docs)
    for kind, by in missing.items():
        print(f"    {kind}: not a kind of this cluster ({by} is not installed): none to delete",
              flush=True)
    keep = [d for d in docs if d["kind"] not in missing]
    rendered.write_text(yaml.safe_dump_all(keep, sort_keys=False))
    if keep:
        sh(kube.cmd(f"delete -f {quote(rendered)} --ignore-not-found --wait --timeout=15m"))


def karpenter_nodes(kube: Kube) -> None:
    """Karpenter's NodePools deleted and their nodes waited for (Karpenter drains and
    terminates them), then its EC2NodeClasses: instances Karpenter made are not terraform's, and
    while they run the VPC cannot go (DependencyViolation) and they bill."""
    with step("Karpenter: its NodePools deleted, its nodes waited for, its EC2NodeClasses"):
        if kube.missing(["NodePool"]):
            print("    Karpenter is not installed: no nodes of its own", flush=True)
            return
        sh(kube.cmd("delete nodepools.karpenter.sh --all --wait --timeout=30m"))
        if kube.names("nodeclaims.karpenter.sh") or DRY_RUN:
            sh(kube.cmd("wait --for=delete nodeclaims.karpenter.sh --all --timeout=30m"))
        sh(kube.cmd("delete ec2nodeclasses.karpenter.k8s.aws --all --wait --timeout=15m"))
        left = kube.names("nodeclaims.karpenter.sh")
        if left:
            raise Failure(f"Karpenter's nodes are still there ({', '.join(left)}): terraform "
                          "destroy would fail on them; see `kubectl get nodeclaims` and run "
                          "`make eks-down` again")


def down(settings: Settings) -> None:
    need("terraform", "`make eks-down` destroys terraform/'s stack")
    need("kubectl", "the jobs and Karpenter's nodes go first, through it")
    outputs = Outputs.load()
    check_aws(outputs.region)
    checkpoints(outputs, settings)
    kube = Kube(outputs)
    kube.connect()
    for overlay in OVERLAYS:
        folder = LOCAL / overlay
        if folder.exists():
            with step(f"delete what k8s/local/{overlay} applied (its namespace with it)"):
                delete_overlay(kube, folder)
    if outputs.karpenter or DRY_RUN:
        karpenter_nodes(kube)
    with step("terraform destroy (the file system, its S3 bucket and the images go too)"):
        sh("terraform -chdir=terraform destroy -input=false -auto-approve "
           f"{tf_vars(settings, outputs.region)}")
