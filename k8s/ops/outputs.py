# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""terraform's outputs as k8s/eks.py reads them: k8s/local/outputs.json, written by `make
eks-up`; in a dry run without one, the tracked placeholders."""
from __future__ import annotations

import json
import pathlib
import re

from ops.shell import DRY_RUN, LOCAL, Failure

# What a dry run uses for terraform's outputs (no state to read).
PLACEHOLDERS = {
    "image_repository": {"value": "REGISTRY/libddp"}, "cluster_name": {"value": "libddp"},
    "region": {"value": "us-west-2"},
    "fsx_id": {"value": "fs-0123456789abcdef0"},
    "fsx_dns_name": {"value": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com"},
    "fsx_mount_name": {"value": "abcdefgh"}, "data_bucket": {"value": "BUCKET"},
    "configure_kubectl": {"value": "aws eks --region us-west-2 update-kubeconfig --name libddp"},
    "codebuild_project": {"value": "libddp-images"},
    "gpu_placement_group": {"value": "libddp-gpu-efa"},
    "kueue_quotas": {"value": {"cpu": {"cpu": 28, "memory": "53739Mi"}, "gpu": {
        "cpu": 380, "memory": "3800Gi", "nvidia.com/gpu": 16, "vpc.amazonaws.com/efa": 64}}}}


class Outputs:
    """The stack's outputs; `placeholder` when a dry run has none."""

    def __init__(self, values: dict, placeholder: bool = False):
        self.values, self.placeholder = values, placeholder

    @classmethod
    def load(cls) -> "Outputs":
        path = LOCAL / "outputs.json"
        if path.exists():
            try:
                return cls(json.loads(path.read_text()))
            except json.JSONDecodeError as e:
                raise Failure(f"{path}: not terraform's outputs ({e}): run `make eks-up` again")
        if DRY_RUN:
            return cls(PLACEHOLDERS, placeholder=True)
        raise Failure(f"no {path}: the stack is not up here (run `make eks-up` first)")

    def get(self, name: str, default=None):
        return (self.values.get(name) or {}).get("value", default)

    def __getitem__(self, name: str):
        value = self.get(name)
        if value is None:
            raise Failure(f"terraform's outputs have no {name}: run `make eks-up` again (the "
                          "stack predates this checkout)")
        return value

    @property
    def region(self) -> str:
        """The stack's region (older outputs: the one in configure_kubectl)."""
        found = re.search(r"--region (\S+)", self.get("configure_kubectl", ""))
        return self.get("region") or (found.group(1) if found else "us-west-2")

    @property
    def karpenter(self) -> bool:
        return bool(self.get("karpenter_node_role"))

    def write(self) -> pathlib.Path:
        """The outputs as a file (local_overlay.py and the checks read them)."""
        path = LOCAL / "outputs-used.json"
        LOCAL.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.values))
        return path
