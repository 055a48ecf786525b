# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""k8s/trainjob/: Kubeflow Trainer v2's TrainJob and the ClusterTrainingRuntime it runs on,
against their CRD schemas (../shared/schemas/, strict), the webhook's rules the schemas cannot
say, and what libddp needs: GPUs per node = processes per node, requests = limits, the NCCL
log and ddp-efa-check on an EFA job, the pool's taint tolerated, the nodes within the pool."""
from __future__ import annotations


from deploycheck import EFA_CHECK, ROOT, SCHEMA_DIR, _quantity, crd_schema

FOLDER = ROOT / "k8s" / "trainjob"
SCHEMAS = {"TrainJob": SCHEMA_DIR / "trainjob-kubeflow-v1alpha1.json",
           "ClusterTrainingRuntime": SCHEMA_DIR / "clustertrainingruntime-kubeflow-v1alpha1.json"}
RESERVED_ENV = {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR",
                "PET_MASTER_PORT"}


def schema(doc: dict) -> list[str]:
    return crd_schema(SCHEMAS[doc["kind"]], doc)


def _trainer_pod(runtime: dict) -> dict | None:
    for job in runtime["spec"]["template"]["spec"].get("replicatedJobs", []):
        labels = job["template"].get("metadata", {}).get("labels", {})
        if labels.get("trainer.kubeflow.org/trainjob-ancestor-step") == "trainer":
            return job["template"]["spec"]["template"]["spec"]
    return None


def rules(docs: list[dict]) -> list[str]:
    runtimes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterTrainingRuntime"}
    problems = []
    for runtime in runtimes.values():
        policies = [k for k in ("torch", "mpi", "jax", "xgboost", "flux")
                    if k in runtime["spec"].get("mlPolicy", {})]
        pod = _trainer_pod(runtime)
        problems += _restarts_together(runtime)
        if len(policies) > 1:
            problems.append(f"runtime {runtime['metadata']['name']}: more than one mlPolicy")
        if pod is None or not any(c["name"] == "node" for c in pod["containers"]):
            problems.append(f"runtime {runtime['metadata']['name']}: no trainer job with a "
                            "container named node")
    for job in (d for d in docs if d["kind"] == "TrainJob"):
        problems += _trainjob(job, runtimes)
    return problems


def _restarts_together(runtime: dict) -> list[str]:
    """A lost node restarts every node (JobSet's failurePolicy), never one alone: a node Job's
    own retries (backoffLimit > 0) would start one node into a torchrun rendezvous that the
    others have left, and it would wait there until its timeout."""
    name, spec = runtime["metadata"]["name"], runtime["spec"]["template"]["spec"]
    problems = []
    if int(spec.get("failurePolicy", {}).get("maxRestarts", 0)) < 1:
        problems.append(f"runtime {name}: no failurePolicy.maxRestarts: a lost node fails the "
                        "TrainJob (JobSet restarts every node only when told to)")
    for job in spec.get("replicatedJobs", []):
        if int(job["template"].get("spec", {}).get("backoffLimit", 6)) != 0:
            problems.append(f"runtime {name}: job {job['name']} retries its own pods "
                            "(backoffLimit): a restarted node would wait at a rendezvous the "
                            "others have left; backoffLimit 0 lets JobSet restart them all")
    return problems


def _trainjob(job: dict, runtimes: dict) -> list[str]:
    name, spec = job["metadata"]["name"], job["spec"]
    trainer = spec.get("trainer", {})
    ref = spec["runtimeRef"]
    runtime = runtimes.get(ref["name"]) if ref.get("kind", "ClusterTrainingRuntime") == \
        "ClusterTrainingRuntime" else None
    if runtime is None:
        return [f"TrainJob {name}: runtime {ref['name']} is not defined here"]
    problems = [f"TrainJob {name}: env {e['name']} is reserved for Trainer"
                for e in trainer.get("env", []) if e["name"] in RESERVED_ENV]
    resources = trainer.get("resourcesPerNode", {})
    requests, limits = resources.get("requests", {}), resources.get("limits", {})
    problems += [f"TrainJob {name}: {k} requests {requests.get(k)} != limits {limits.get(k)}"
                 for k in set(requests) | set(limits) if requests.get(k) != limits.get(k)]
    gpus = limits.get("nvidia.com/gpu")
    if gpus is not None and int(gpus) != int(trainer.get("numProcPerNode", 0)):
        problems.append(f"TrainJob {name}: numProcPerNode {trainer.get('numProcPerNode')} is "
                        f"not the {gpus} GPUs a node asks for")
    pod = _trainer_pod(runtime) or {}
    if gpus is not None and not any(t.get("key") == "nvidia.com/gpu"
                                    for t in pod.get("tolerations", [])):
        problems.append(f"TrainJob {name}: its runtime's pods do not tolerate nvidia.com/gpu")
    if "vpc.amazonaws.com/efa" in limits:
        env = {e["name"]: e.get("value", "") for e in trainer.get("env", [])}
        if trainer.get("command", [])[:2] != [EFA_CHECK, "--nccl"]:
            problems.append(f"TrainJob {name}: uses EFA but does not run under "
                            f"`{EFA_CHECK} --nccl -- ...`")
        if env.get("NCCL_DEBUG") != "INFO" or not {"INIT", "NET"} <= set(
                env.get("NCCL_DEBUG_SUBSYS", "").split(",")):
            problems.append(f"TrainJob {name}: NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS INIT,NET "
                            "is what shows NCCL's network")
    return problems


def fits(docs: list[dict], pools: dict, instances: dict) -> list[str]:
    """A TrainJob's nodes within the pool its runtime selects (pools: cluster_fit.node_pools)."""
    runtimes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterTrainingRuntime"}
    problems = []
    for job in (d for d in docs if d["kind"] == "TrainJob"):
        pod = _trainer_pod(runtimes[job["spec"]["runtimeRef"]["name"]]) or {}
        pool = pod.get("nodeSelector", {}).get("libddp/pool")
        if pool not in pools:
            problems.append(f"TrainJob {job['metadata']['name']}: pool {pool} has no nodes")
            continue
        instance, nodes = pools[pool]
        trainer = job["spec"]["trainer"]
        for key, amount in trainer.get("resourcesPerNode", {}).get("requests", {}).items():
            if key in instances[instance] and _quantity(amount) > instances[instance][key]:
                problems.append(f"TrainJob {job['metadata']['name']}: {key} {amount} per node "
                                f"is more than a {instance} has")
        if int(trainer.get("numNodes", 1)) > nodes:
            problems.append(f"TrainJob {job['metadata']['name']}: {trainer['numNodes']} nodes, "
                            f"pool {pool} has {nodes}")
    return problems
