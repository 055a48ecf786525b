#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Writes a local kustomize overlay, k8s/local/<name>/ (git-ignored), on top of a tracked one:
the image you pushed, the FSx file system terraform made (from `terraform output -json`), and
optionally one job alone; or k8s/karpenter/ and k8s/kueue/ named and sized for terraform's
stack. The tracked overlays and their placeholder fsx.env are never edited, so a walk-through
leaves `git status` clean.

    terraform -chdir=terraform output -json > /tmp/outputs.json
    python3 k8s/local_overlay.py --overlay gpu-efa --image "$REPO:gpu-efa-$TAG" \\
        --terraform-outputs /tmp/outputs.json [--job ddp-digits]
    kubectl apply -k k8s/local/gpu-efa
    python3 k8s/local_overlay.py --karpenter --terraform-outputs /tmp/outputs.json
    python3 k8s/local_overlay.py --kueue --terraform-outputs /tmp/outputs.json
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
# Each overlay's own namespace (its kustomization.yaml's): deleting one never takes another's.
NAMESPACES = {"cpu": "libddp-cpu", "gpu-efa": "libddp-gpu", "ps": "libddp-ps",
              "trainjob": "libddp-trainjob"}
# The Job that scores ddp-digits' checkpoint (gpu-efa): it goes with that job alone. Applied
# with another job's newer image it would change a Job's pod template, which is immutable.
MODEL_CHECK = "ddp-model-check"
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
    patches: list[dict] = []
    doc: dict[str, object] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [f"{relative_root}/{base}"],
        "images": [{"name": "libddp", "newName": name, "newTag": tag}], "patches": patches}
    if overlay == "trainjob":  # the TrainJob names its image in spec.trainer.image
        doc["configurations"] = ["kustomizeconfig.yaml"]
    if fsx is not None:
        ops = [{"op": "replace", "path": path, "value": fsx[key]}
               for key, path in FSX_FIELDS.items()]
        patches.append({"target": {"kind": "PersistentVolume", "name": "fsx"},
                               "patch": yaml.safe_dump(ops, sort_keys=False)})
    if job is not None and overlay not in ("ps", "trainjob"):  # those hold one job each
        if job not in JOBS:
            raise ValueError(f"--job {job}: one of {', '.join(JOBS)}")
        left_out = [("kubeflow.org/v2beta1", "MPIJob", other) for other in JOBS if other != job]
        if overlay == "gpu-efa" and job != "ddp-digits":
            left_out.append(("batch/v1", "Job", MODEL_CHECK))
        for api, kind, other in left_out:  # only the chosen job (and its check) is applied
            patches.append({"patch": yaml.safe_dump({
                "$patch": "delete", "apiVersion": api, "kind": kind,
                "metadata": {"name": other, "namespace": NAMESPACES[overlay]}},
                sort_keys=False)})
    if not doc["patches"]:
        del doc["patches"]
    return doc


class _Dumper(yaml.SafeDumper):
    """Patches as block text (`patch: |`), as one writes them by hand."""


_Dumper.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))


def karpenter_kustomization(outputs: dict, relative_root: str = "../..") -> dict:
    """k8s/karpenter/ for terraform's stack: its names follow cluster_name, the GPU nodes go into
    its placement group (none where gpu_placement_group is null), and the GPU NodePool holds as
    many GPUs as Kueue's quota (gpu_nodes x 8)."""
    cluster = outputs["cluster_name"]["value"]
    ops = [{"op": "replace", "path": "/spec/role", "value": f"{cluster}-karpenter-node"},
           {"op": "replace", "path": "/spec/subnetSelectorTerms/0/tags",
            "value": {"karpenter.sh/discovery": cluster}},
           {"op": "replace", "path": "/spec/securityGroupSelectorTerms/0/tags",
            "value": {"karpenter.sh/discovery": cluster}}]
    placement = (outputs.get("gpu_placement_group") or {"value": f"{cluster}-gpu-efa"})["value"]
    gpu = ops + [{"op": "replace", "path": "/spec/securityGroupSelectorTerms/1/tags",
                  "value": {"libddp/efa": cluster}},
                 {"op": "replace", "path": "/spec/placementGroupSelector/name", "value": placement}
                 if placement else {"op": "remove", "path": "/spec/placementGroupSelector"}]
    patches = [("EC2NodeClass", "gpu-efa", gpu), ("EC2NodeClass", "cpu", ops)]
    gpus = _quotas(outputs).get("gpu", {}).get("nvidia.com/gpu")
    if gpus is not None:
        patches.append(("NodePool", "gpu-efa", [{"op": "replace", "path": "/spec/limits",
                                                 "value": {"nvidia.com/gpu": str(gpus)}}]))
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [f"{relative_root}/karpenter"],
            "patches": [{"target": {"kind": kind, "name": name},
                         "patch": yaml.safe_dump(patch, sort_keys=False)}
                        for kind, name, patch in patches]}


def _quotas(outputs: dict) -> dict:
    return (outputs.get("kueue_quotas") or {}).get("value") or {}


# Which ClusterQueue (k8s/kueue/cluster-queues.yaml) holds which pool's quota (kueue_quotas).
QUEUES = {"cpu": ("libddp-cpu", "cpu"), "gpu": ("libddp-gpu", "gpu-efa")}


def kueue_kustomization(outputs: dict, relative_root: str = "../..") -> dict:
    """k8s/kueue/ with each ClusterQueue's quota what terraform's pool holds (kueue_quotas)."""
    quotas = _quotas(outputs)
    missing = [pool for pool in QUEUES if pool not in quotas]
    if missing:
        raise KeyError(f"terraform outputs lack kueue_quotas for {', '.join(missing)}")
    patches = []
    for pool, (queue, flavor) in QUEUES.items():
        resources = [{"name": name, "nominalQuota": str(amount)}
                     for name, amount in quotas[pool].items()]
        patches.append({"target": {"kind": "ClusterQueue", "name": queue},
                        "patch": yaml.safe_dump([{
                            "op": "replace", "path": "/spec/resourceGroups/0/flavors",
                            "value": [{"name": flavor, "resources": resources}]}],
                            sort_keys=False)})
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [f"{relative_root}/kueue"], "patches": patches}


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
                        help="k8s/karpenter/ for terraform's stack (k8s/local/karpenter)")
    parser.add_argument("--kueue", action="store_true",
                        help="k8s/kueue/ with terraform's pool sizes (k8s/local/kueue)")
    parser.add_argument("--terraform-outputs", help="`terraform output -json` (gpu-efa: FSx)")
    parser.add_argument("--job", choices=JOBS, help="only this job (and, for ddp-digits on "
                        "gpu-efa, its model check)")
    parser.add_argument("--out", type=pathlib.Path, help="default: k8s/local/OVERLAY")
    args = parser.parse_args(argv)
    for flag, name, make in (("--karpenter", "karpenter", karpenter_kustomization),
                             ("--kueue", "kueue", kueue_kustomization)):
        if getattr(args, name):
            if not args.terraform_outputs:
                parser.error(f"{flag} needs --terraform-outputs (the stack's names and sizes)")
            outputs = json.loads(pathlib.Path(args.terraform_outputs).read_text())
            out = args.out or K8S / "local" / name
            doc = make(outputs, os.path.relpath(K8S, out.resolve()))
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
