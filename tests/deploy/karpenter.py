"""k8s/karpenter/: the NodePools and EC2NodeClasses against Karpenter v1's CRD schemas
(../shared/schemas/, strict), the CEL rules the schemas carry but a JSON Schema validator skips
(the ones these files could break), and what libddp needs of them: a NodePool for every pool the
overlays select, with their taints tolerated; GPU nodes from reservations or Capacity Blocks
only, made for a job and removed when empty, within a limit that holds one job."""
from __future__ import annotations

import functools
import json
import pathlib

from deploycheck import ROOT, SHARED, _quantity, kustomize, prune_nulls

FOLDER = ROOT / "k8s" / "karpenter"
SCHEMAS = {"NodePool": SHARED / "schemas" / "karpenter-nodepool-v1.json",
           "EC2NodeClass": SHARED / "schemas" / "karpenter-ec2nodeclass-v1.json"}
RESTRICTED = ("karpenter.sh/", "karpenter.k8s.aws/")
GPUS_PER_NODE = {"p5.48xlarge": 8, "p5e.48xlarge": 8}


@functools.lru_cache(maxsize=None)
def _validator(kind: str):
    import jsonschema
    return jsonschema.Draft7Validator(json.loads(SCHEMAS[kind].read_text()))


def schema(doc: dict) -> list[str]:
    kind, name = doc.get("kind"), doc.get("metadata", {}).get("name")
    if kind not in SCHEMAS:
        return [f"{kind} {name}: not a Karpenter kind"]
    return [f"{kind} {name}: {'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
            for e in _validator(kind).iter_errors(prune_nulls(doc))]


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


def fits_libddp(docs: list[dict], overlays: dict[str, list[dict]]) -> list[str]:
    """What the overlays' pods need of the NodePools."""
    pools = {d["spec"]["template"].get("metadata", {}).get("labels", {}).get("libddp/pool"): d
             for d in docs if d["kind"] == "NodePool"}
    classes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "EC2NodeClass"}
    problems = []
    for pool in pools.values():
        ref = pool["spec"]["template"]["spec"]["nodeClassRef"]["name"]
        if ref not in classes:
            problems.append(f"NodePool {pool['metadata']['name']}: no EC2NodeClass {ref}")
    for overlay, rendered in overlays.items():
        for job in (d for d in rendered if d["kind"] == "MPIJob"):
            for role, replica in job["spec"]["mpiReplicaSpecs"].items():
                pod = replica["template"]["spec"]
                want = pod.get("nodeSelector", {}).get("libddp/pool")
                where = f"{overlay}: MPIJob {job['metadata']['name']} {role}"
                if want not in pools:
                    problems.append(f"{where}: no NodePool labels its nodes libddp/pool={want}")
                    continue
                for taint in pools[want]["spec"]["template"]["spec"].get("taints", []):
                    if not any(t.get("key") == taint["key"] for t in pod.get("tolerations", [])):
                        problems.append(f"{where}: does not tolerate NodePool {want}'s taint "
                                        f"{taint['key']}")
    problems += _gpu_pool(pools.get("gpu-efa"), classes, overlays.get("gpu-efa", []))
    return problems


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
        if not job["spec"].get("runPolicy", {}).get("suspend"):
            at_once += gpus
            started.append(job["metadata"]["name"])
    # Karpenter makes nodes up to the limit and no further: jobs that start together beyond it
    # could each hold part of it and wait for the rest for ever, as on a fixed node group.
    if at_once > limit:
        problems.append(f"NodePool {name}: the GPU jobs that start at once "
                        f"({', '.join(sorted(started))}) ask for {at_once:g} GPUs, beyond its "
                        f"limit {limit:g}: suspend all but one")
    return problems


def render(folder: pathlib.Path = FOLDER) -> list[dict]:
    return kustomize(folder)
