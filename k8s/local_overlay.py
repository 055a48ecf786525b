#!/usr/bin/env python3
"""Writes a local kustomize overlay, k8s/local/<name>/ (git-ignored), on top of a tracked one:
the image you pushed, the FSx file system terraform made (from `terraform output -json`), and
optionally one job alone, resumed. The tracked overlays and their placeholder fsx.env are never
edited, so a walk-through leaves `git status` clean.

    terraform -chdir=terraform output -json > /tmp/outputs.json
    python3 k8s/local_overlay.py --overlay gpu-efa --image "$REPO:gpu-efa-$TAG" \\
        --terraform-outputs /tmp/outputs.json [--job ddp-digits]
    kubectl apply -k k8s/local/gpu-efa
    python3 k8s/local_overlay.py --karpenter --terraform-outputs /tmp/outputs.json
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

import yaml

K8S = pathlib.Path(__file__).resolve().parent
JOBS = ("ddp-digits", "ddp-synthetic", "ddp-bench")
FSX_FIELDS = {"fsx_id": "/spec/csi/volumeHandle",
              "fsx_dns_name": "/spec/csi/volumeAttributes/dnsname",
              "fsx_mount_name": "/spec/csi/volumeAttributes/mountname"}


def fsx_values(outputs: dict) -> dict[str, str]:
    """The three FSx values from `terraform output -json` ({name: {"value": ...}})."""
    missing = [name for name in FSX_FIELDS if name not in outputs]
    if missing:
        raise KeyError(f"terraform outputs lack {', '.join(missing)}")
    return {name: str(outputs[name]["value"]) for name in FSX_FIELDS}


def kustomization(overlay: str, image: str, fsx: dict[str, str] | None,
                  job: str | None = None, relative_root: str = "../..") -> dict:
    """The local overlay's kustomization.yaml, as a dict."""
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        raise ValueError(f"--image {image!r}: give REPOSITORY:TAG")
    base = overlay if overlay in ("ps", "trainjob") else f"mpijob/overlays/{overlay}"
    doc = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
           "resources": [f"{relative_root}/{base}"],
           "images": [{"name": "libddp", "newName": name, "newTag": tag}], "patches": []}
    if overlay == "trainjob":  # the TrainJob names its image in spec.trainer.image, resumed
        doc["configurations"] = ["kustomizeconfig.yaml"]
        doc["patches"].append({"target": {"kind": "TrainJob"}, "patch": yaml.safe_dump(
            [{"op": "replace", "path": "/spec/suspend", "value": False}])})
    if fsx is not None:
        ops = [{"op": "replace", "path": path, "value": fsx[key]}
               for key, path in FSX_FIELDS.items()]
        doc["patches"].append({"target": {"kind": "PersistentVolume", "name": "fsx"},
                               "patch": yaml.safe_dump(ops, sort_keys=False)})
    if job is not None and overlay not in ("ps", "trainjob"):  # those hold one job each
        if job not in JOBS:
            raise ValueError(f"--job {job}: one of {', '.join(JOBS)}")
        for other in JOBS:
            if other != job:  # left out: only the chosen job is applied
                doc["patches"].append({"patch": yaml.safe_dump({
                    "$patch": "delete", "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                    "metadata": {"name": other, "namespace": "libddp"}}, sort_keys=False)})
        doc["patches"].append({"target": {"kind": "MPIJob", "name": job}, "patch": yaml.safe_dump(
            [{"op": "add", "path": "/spec/runPolicy/suspend", "value": False}])})
    if not doc["patches"]:
        del doc["patches"]
    return doc


class _Dumper(yaml.SafeDumper):
    """Patches as block text (`patch: |`), as one writes them by hand."""


_Dumper.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))


def karpenter_kustomization(cluster: str, relative_root: str = "../..") -> dict:
    """k8s/karpenter/ for a cluster_name other than libddp: terraform's names follow it."""
    ops = [{"op": "replace", "path": "/spec/role", "value": f"{cluster}-karpenter-node"},
           {"op": "replace", "path": "/spec/subnetSelectorTerms/0/tags",
            "value": {"karpenter.sh/discovery": cluster}},
           {"op": "replace", "path": "/spec/securityGroupSelectorTerms/0/tags",
            "value": {"karpenter.sh/discovery": cluster}}]
    gpu = ops + [{"op": "replace", "path": "/spec/securityGroupSelectorTerms/1/tags",
                  "value": {"libddp/efa": cluster}},
                 {"op": "replace", "path": "/spec/placementGroupSelector/name",
                  "value": f"{cluster}-gpu-efa"}]
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [f"{relative_root}/karpenter"],
            "patches": [{"target": {"kind": "EC2NodeClass", "name": name},
                         "patch": yaml.safe_dump(patch, sort_keys=False)}
                        for name, patch in (("gpu-efa", gpu), ("cpu", ops))]}


def write(out: pathlib.Path, doc: dict) -> pathlib.Path:
    out.mkdir(parents=True, exist_ok=True)
    if "kustomizeconfig.yaml" in doc.get("configurations", []):  # kustomize reads it from here
        (out / "kustomizeconfig.yaml").write_text(
            (K8S / "trainjob" / "kustomizeconfig.yaml").read_text())
    path = out / "kustomization.yaml"
    path.write_text("# Made by k8s/local_overlay.py (terraform's outputs, the pushed image): "
                    "not tracked.\n" + yaml.dump(doc, Dumper=_Dumper, sort_keys=False))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--overlay", choices=["cpu", "gpu-efa", "ps", "trainjob"])
    parser.add_argument("--image", help="REPOSITORY:TAG you pushed")
    parser.add_argument("--karpenter", action="store_true",
                        help="k8s/karpenter/ for terraform's cluster_name (k8s/local/karpenter)")
    parser.add_argument("--terraform-outputs", help="`terraform output -json` (gpu-efa: FSx)")
    parser.add_argument("--job", choices=JOBS, help="only this job, resumed")
    parser.add_argument("--out", type=pathlib.Path, help="default: k8s/local/OVERLAY")
    args = parser.parse_args(argv)
    if args.karpenter:
        if not args.terraform_outputs:
            parser.error("--karpenter needs --terraform-outputs (the cluster's name)")
        outputs = json.loads(pathlib.Path(args.terraform_outputs).read_text())
        out = args.out or K8S / "local" / "karpenter"
        doc = karpenter_kustomization(outputs["cluster_name"]["value"],
                                      os.path.relpath(K8S, out.resolve()))
        print(f"wrote {write(out, doc)}: kubectl apply -k {out}")
        return 0
    if not (args.overlay and args.image):
        parser.error("--overlay and --image (or --karpenter)")
    fsx = None
    if args.overlay == "gpu-efa":
        if not args.terraform_outputs:
            parser.error("--overlay gpu-efa needs --terraform-outputs (the FSx file system)")
        fsx = fsx_values(json.loads(pathlib.Path(args.terraform_outputs).read_text()))
    out = args.out or K8S / "local" / args.overlay
    # kustomize takes the tracked overlay only by a relative path (from k8s/local/NAME: ../..).
    root = os.path.relpath(K8S, out.resolve())
    path = write(out, kustomization(args.overlay, args.image, fsx, args.job, root))
    print(f"wrote {path}: kubectl apply -k {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
