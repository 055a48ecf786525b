# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""k8s/karpenter/: the NodePools and EC2NodeClasses against Karpenter v1's CRD schemas
(../shared/schemas/, strict), the CEL rules the schemas carry but a JSON Schema validator skips
(the ones these files could break), and what libddp needs of them: a NodePool for every pool the
overlays select, with their taints tolerated; GPU nodes from reservations or Capacity Blocks
only, made for a job and removed when empty, within a limit that holds one job."""
from __future__ import annotations

import pathlib
import re

from cluster_fit import queued
from deploycheck import ROOT, SCHEMA_DIR, _quantity, crd_schema, kustomize

FOLDER = ROOT / "k8s" / "karpenter"
SCHEMAS = {"NodePool": SCHEMA_DIR / "karpenter-nodepool-v1.json",
           "EC2NodeClass": SCHEMA_DIR / "karpenter-ec2nodeclass-v1.json"}
RESTRICTED = ("karpenter.sh/", "karpenter.k8s.aws/")
GPUS_PER_NODE = {"p5.48xlarge": 8, "p5e.48xlarge": 8}


def schema(doc: dict) -> list[str]:
    kind, name = doc.get("kind"), doc.get("metadata", {}).get("name")
    if kind not in SCHEMAS:
        return [f"{kind} {name}: not a Karpenter kind"]
    return crd_schema(SCHEMAS[kind], doc)


def cel_rules(doc: dict) -> list[str]:
    """The CRDs' CEL rules these files could break (the schema files' README lists them)."""
    kind, name, spec = doc["kind"], doc["metadata"]["name"], doc.get("spec", {})
    problems = []
    if kind == "NodePool":
        template = spec.get("template", {})
        for label in template.get("metadata", {}).get("labels", {}):
            if label.startswith(RESTRICTED) or label == "kubernetes.io/hostname":
                problems.append(f"NodePool {name}: label {label}: restricted domain")
        for req in template.get("spec", {}).get("requirements", []):
            if req["key"] in ("karpenter.sh/nodepool", "kubernetes.io/hostname"):
                problems.append(f"NodePool {name}: requirement on {req['key']} is not allowed")
            if req["operator"] == "In" and not req.get("values"):
                problems.append(f"NodePool {name}: requirement {req['key']} In needs values")
        ref = template.get("spec", {}).get("nodeClassRef", {})
        if not all(ref.get(k) for k in ("group", "kind", "name")):
            problems.append(f"NodePool {name}: nodeClassRef needs group, kind and name")
    else:
        if ("role" in spec) == ("instanceProfile" in spec):
            problems.append(f"EC2NodeClass {name}: exactly one of role and instanceProfile")
        aliases = [t for t in spec.get("amiSelectorTerms", []) if "alias" in t]
        if not aliases and "amiFamily" not in spec:
            problems.append(f"EC2NodeClass {name}: amiFamily is required without an alias")
        if aliases and len(spec["amiSelectorTerms"]) > 1:
            problems.append(f"EC2NodeClass {name}: an alias term must be the only AMI term")
        for term in spec.get("subnetSelectorTerms", []) + \
                spec.get("securityGroupSelectorTerms", []):
            if not term:
                problems.append(f"EC2NodeClass {name}: an empty selector term")
    return problems


def _requirement(pool: dict, key: str) -> list[str] | None:
    for req in pool["spec"]["template"]["spec"].get("requirements", []):
        if req["key"] == key and req["operator"] == "In":
            return req["values"]
    return None


# The resources Karpenter gives an instance type (its computed capacity, v1.14): a pod that
# requests another (hugepages-2Mi, say) fits no instance type it knows, and waits for ever ("no
# instance type has enough resources") unless a NodeOverlay, an alpha feature, adds it.
OFFERED = {"cpu", "memory", "ephemeral-storage", "pods", "nvidia.com/gpu",
           "vpc.amazonaws.com/efa", "vpc.amazonaws.com/pod-eni", "aws.amazon.com/neuron",
           "aws.amazon.com/neuroncore", "habana.ai/gaudi"}
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"


def _pods(overlays: dict[str, list[dict]]):
    """(where, pod template, requests) of every pod of every job in the overlays."""
    from kueue_check import pod_sets
    for overlay, rendered in overlays.items():
        runtimes = {d["metadata"]["name"]: d for d in rendered
                    if d["kind"] == "ClusterTrainingRuntime"}
        for job in (d for d in rendered if d["kind"] in ("MPIJob", "Job", "TrainJob")):
            where = f"{overlay}: {job['kind']} {job['metadata']['name']}"
            if job["kind"] == "MPIJob":
                for role, replica in job["spec"]["mpiReplicaSpecs"].items():
                    template = replica["template"]
                    yield f"{where} {role}", template, pod_sets(
                        {"kind": "Job", "spec": {"template": template}}, {})[0][2]
            elif job["kind"] == "Job":
                yield where, job["spec"]["template"], pod_sets(job, runtimes)[0][2]
            else:
                runtime = runtimes.get(job["spec"]["runtimeRef"]["name"], {})
                template = next((j["template"]["spec"]["template"] for j in runtime.get(
                    "spec", {}).get("template", {}).get("spec", {}).get("replicatedJobs", [])),
                    {"spec": {}})
                yield where, template, pod_sets(job, runtimes)[0][2]


def fits_libddp(docs: list[dict], overlays: dict[str, list[dict]]) -> list[str]:
    """What the overlays' pods need of the NodePools: a pool for each, its taints tolerated,
    only resources Karpenter offers, and karpenter.sh/do-not-disrupt on every training pod."""
    pools = {d["spec"]["template"].get("metadata", {}).get("labels", {}).get("libddp/pool"): d
             for d in docs if d["kind"] == "NodePool"}
    classes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "EC2NodeClass"}
    problems = []
    for pool in pools.values():
        ref = pool["spec"]["template"]["spec"]["nodeClassRef"]["name"]
        if ref not in classes:
            problems.append(f"NodePool {pool['metadata']['name']}: no EC2NodeClass {ref}")
    for where, template, requests in _pods(overlays):
        pod = template.get("spec", {})
        want = pod.get("nodeSelector", {}).get("libddp/pool")
        if want not in pools:
            problems.append(f"{where}: no NodePool labels its nodes libddp/pool={want}")
            continue
        for taint in pools[want]["spec"]["template"]["spec"].get("taints", []):
            if not any(t.get("key") == taint["key"] for t in pod.get("tolerations", [])):
                problems.append(f"{where}: does not tolerate NodePool {want}'s taint "
                                f"{taint['key']}")
        for resource in sorted(set(requests) - OFFERED):
            problems.append(f"{where}: requests {resource}, which Karpenter offers on no "
                            "instance type: its pods would never get a node")
        if template.get("metadata", {}).get("annotations", {}).get(DO_NOT_DISRUPT) != "true":
            problems.append(f"{where}: no {DO_NOT_DISRUPT} annotation: Karpenter may move its "
                            "pods (consolidation, drift) in the middle of a job")
    problems += _cpu_pool(pools.get("cpu"))
    problems += _gpu_pool(pools.get("gpu-efa"), classes, overlays.get("gpu-efa", []))
    return problems


def _cpu_pool(pool: dict | None) -> list[str]:
    """Training pods run there too: no Spot (a reclaimed node takes its ranks), and
    disruption bounded."""
    if pool is None:
        return ["no NodePool for libddp/pool=cpu"]
    name, disruption = pool["metadata"]["name"], pool["spec"].get("disruption", {})
    problems = []
    if "spot" in (_requirement(pool, "karpenter.sh/capacity-type") or ["spot"]):
        problems.append(f"NodePool {name}: Spot capacity: a reclaimed node takes the ranks on "
                        "it (karpenter.sh/capacity-type In [on-demand])")
    if not disruption.get("budgets"):
        problems.append(f"NodePool {name}: no disruption budgets: Karpenter may take any number "
                        "of nodes at once")
    after = disruption.get("consolidateAfter", "0s")
    if after != "Never" and _duration_s(after) < 300:
        problems.append(f"NodePool {name}: consolidateAfter {after}: a node is packed away "
                        "between a job's pods (at least 5m)")
    return problems


def _duration_s(text: str) -> float:
    total = 0.0
    for amount, unit in re.findall(r"(\d+(?:\.\d+)?)(h|m|s)", text):
        total += float(amount) * {"h": 3600, "m": 60, "s": 1}[unit]
    return total


def _gpu_pool(pool: dict | None, classes: dict, gpu_jobs: list[dict]) -> list[str]:
    if pool is None:
        return ["no NodePool for libddp/pool=gpu-efa"]
    name, spec = pool["metadata"]["name"], pool["spec"]
    problems = []
    if _requirement(pool, "karpenter.sh/capacity-type") != ["reserved"]:
        problems.append(f"NodePool {name}: GPU nodes must come from reserved capacity "
                        "(karpenter.sh/capacity-type In [reserved])")
    node_class = classes.get(spec["template"]["spec"]["nodeClassRef"]["name"], {})
    if not node_class.get("spec", {}).get("capacityReservationSelectorTerms"):
        problems.append(f"NodePool {name}: its EC2NodeClass selects no capacity reservation")
    disruption = spec.get("disruption", {})
    if disruption.get("consolidateAfter", "Never") == "Never":
        problems.append(f"NodePool {name}: empty GPU nodes are never removed (consolidateAfter)")
    if spec["template"]["spec"].get("expireAfter", "720h") != "Never":
        problems.append(f"NodePool {name}: expireAfter "
                        f"{spec['template']['spec'].get('expireAfter', '720h (default)')} ends a "
                        "node under a running job (empty nodes go by consolidation)")
    if disruption.get("consolidationPolicy") != "WhenEmpty":
        problems.append(f"NodePool {name}: consolidation {disruption.get('consolidationPolicy')} "
                        "moves a running job's workers (WhenEmpty)")
    types = _requirement(pool, "node.kubernetes.io/instance-type") or []
    per_node = min((GPUS_PER_NODE.get(t, 0) for t in types), default=0)
    limit = _quantity(spec.get("limits", {}).get("nvidia.com/gpu", 0))
    at_once, started = 0.0, []
    for job in gpu_jobs:
        if job["kind"] != "MPIJob":
            continue
        worker = job["spec"]["mpiReplicaSpecs"]["Worker"]
        gpus = worker["replicas"] * _quantity(
            worker["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
        if per_node == 0 or gpus > limit:
            problems.append(f"NodePool {name}: limit nvidia.com/gpu {limit:g} cannot hold "
                            f"MPIJob {job['metadata']['name']} ({gpus:g} GPUs)")
        if not job["spec"].get("runPolicy", {}).get("suspend") and not queued(job):
            at_once += gpus
            started.append(job["metadata"]["name"])
    # Karpenter makes nodes up to the limit and no further: jobs that start together beyond it
    # could each hold part of it and wait for the rest for ever, as on a fixed node group.
    if at_once > limit:
        problems.append(f"NodePool {name}: the GPU jobs that start at once "
                        f"({', '.join(sorted(started))}) ask for {at_once:g} GPUs, beyond its "
                        f"limit {limit:g}: send them to a Kueue queue")
    return problems


def render(folder: pathlib.Path = FOLDER) -> list[dict]:
    return kustomize(folder)
