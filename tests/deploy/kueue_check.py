# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Kueue's objects (k8s/kueue/, each overlay's LocalQueue) and what libddp needs of them. No CRD
schema of Kueue is kept beside the project, so the fields are checked here by name (v1beta2,
Kueue v0.19), with the rules its webhooks apply that these files could break. Then the point of
it: every job names its namespace's LocalQueue, which names a ClusterQueue that admits that
namespace, covers every resource the job's pods request, from the flavor of the pool they
select, with a quota that holds the whole job (or it would never be admitted), within what the
pool's nodes hold (or admitted pods could wait for room that never comes)."""
from __future__ import annotations

from deploycheck import ROOT, _quantity, kustomize

FOLDER = ROOT / "k8s" / "kueue"
API = "kueue.x-k8s.io/v1beta2"
KINDS = ("LocalQueue", "ClusterQueue", "ResourceFlavor")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
SPEC_FIELDS = {
    "LocalQueue": {"clusterQueue", "stopPolicy", "fairSharing"},
    "ClusterQueue": {"resourceGroups", "cohortName", "queueingStrategy", "namespaceSelector",
                     "flavorFungibility", "preemption", "admissionChecksStrategy", "stopPolicy",
                     "fairSharing", "admissionScope", "concurrentAdmissionPolicy"},
    "ResourceFlavor": {"nodeLabels", "nodeTaints", "tolerations", "topologyName"},
}


def objects(doc: dict) -> list[str]:
    """One Kueue object by the API's fields and its webhooks' rules."""
    kind, name, spec = doc["kind"], doc["metadata"]["name"], doc.get("spec", {})
    problems = []
    if doc.get("apiVersion") != API:
        problems.append(f"{kind} {name}: apiVersion {doc.get('apiVersion')} (Kueue v0.19 "
                        f"stores {API})")
    problems += [f"{kind} {name}: spec.{field} is not a field of {kind}"
                 for field in spec if field not in SPEC_FIELDS[kind]]
    if kind == "LocalQueue" and not spec.get("clusterQueue"):
        problems.append(f"LocalQueue {name}: no clusterQueue")
    if kind == "ClusterQueue":
        if spec.get("queueingStrategy", "BestEffortFIFO") not in ("StrictFIFO", "BestEffortFIFO"):
            problems.append(f"ClusterQueue {name}: queueingStrategy "
                            f"{spec['queueingStrategy']} (StrictFIFO or BestEffortFIFO)")
        for group in spec.get("resourceGroups", []):
            covered = group.get("coveredResources", [])
            for flavor in group.get("flavors", []):
                listed = [r["name"] for r in flavor.get("resources", [])]
                if listed != covered:  # the webhook: the same resources, in the same order
                    problems.append(f"ClusterQueue {name}: flavor {flavor['name']} lists "
                                    f"{listed}, not the group's coveredResources {covered}")
                for resource in flavor.get("resources", []):
                    try:
                        _quantity(resource.get("nominalQuota", "x"))
                    except ValueError:
                        problems.append(f"ClusterQueue {name}: {resource['name']} nominalQuota "
                                        f"{resource.get('nominalQuota')!r} is not a quantity")
    return problems


def render(folder=FOLDER) -> list[dict]:
    return kustomize(folder)


def pod_sets(job: dict, runtimes: dict) -> list[tuple[int, dict, dict]]:
    """(count, pod spec, requests) of each group of a job's pods, as Kueue counts them."""
    kind, spec = job["kind"], job["spec"]
    if kind == "MPIJob":
        return [(int(r.get("replicas", 1)), r["template"]["spec"],
                 _requests(r["template"]["spec"])) for r in spec["mpiReplicaSpecs"].values()]
    if kind == "Job":
        pod = spec["template"]["spec"]
        return [(int(spec.get("parallelism", 1)), pod, _requests(pod))]
    runtime = runtimes.get(spec["runtimeRef"]["name"], {})
    pod = next((j["template"]["spec"]["template"]["spec"] for j in runtime.get("spec", {}).get(
        "template", {}).get("spec", {}).get("replicatedJobs", [])), {})
    trainer = spec.get("trainer", {})
    requests = {k: _quantity(v) for k, v in trainer.get("resourcesPerNode", {}).get(
        "requests", {}).items()}
    return [(int(trainer.get("numNodes", 1)), pod, requests)]


def _requests(pod: dict) -> dict[str, float]:
    total: dict[str, float] = {}
    for container in pod.get("containers", []):
        resources = container.get("resources", {})
        for key, value in (resources.get("requests") or resources.get("limits") or {}).items():
            total[key] = total.get(key, 0) + _quantity(value)
    return total


def _selected(namespace: str, queue: dict) -> bool:
    selector = queue["spec"].get("namespaceSelector")
    if selector is None:
        return False  # Kueue: no selector admits no namespace
    for expression in selector.get("matchExpressions", []):
        if expression["key"] != "kubernetes.io/metadata.name":
            continue
        inside = namespace in expression.get("values", [])
        if (expression["operator"] == "In") != inside:
            return False
    return selector.get("matchLabels", {}) in ({}, {"kubernetes.io/metadata.name": namespace})


def admitted(overlays: dict[str, list[dict]], kueue: list[dict]) -> list[str]:
    """Every job of every overlay goes through a LocalQueue to a ClusterQueue that can admit it
    whole."""
    cluster_queues = {d["metadata"]["name"]: d for d in kueue if d["kind"] == "ClusterQueue"}
    flavors = {d["metadata"]["name"]: d for d in kueue if d["kind"] == "ResourceFlavor"}
    problems = []
    for overlay, docs in overlays.items():
        local = {(d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs
                 if d["kind"] == "LocalQueue"}
        runtimes = {d["metadata"]["name"]: d for d in docs
                    if d["kind"] == "ClusterTrainingRuntime"}
        for job in (d for d in docs if d["kind"] in ("MPIJob", "TrainJob", "Job")):
            name, namespace = job["metadata"]["name"], job["metadata"].get("namespace")
            where = f"{overlay}: {job['kind']} {name}"
            queue = job["metadata"].get("labels", {}).get(QUEUE_LABEL)
            if queue is None:
                if job["kind"] == "Job" and job["spec"].get("suspend") and \
                        int(job["spec"].get("parallelism", 1)) == 1:
                    continue  # one pod, started by hand (the model check): nothing to gang
                problems.append(f"{where}: no {QUEUE_LABEL} label: it starts whether or not its "
                                "pool has room for all of its pods, and can hold part of it")
                continue
            if (namespace, queue) not in local:
                problems.append(f"{where}: LocalQueue {queue} is not in its namespace "
                                f"{namespace}")
                continue
            target = local[(namespace, queue)]["spec"].get("clusterQueue")
            cq = cluster_queues.get(target)
            if cq is None:
                problems.append(f"{where}: its LocalQueue names ClusterQueue {target}, which "
                                "k8s/kueue does not make")
                continue
            if not _selected(namespace, cq):
                problems.append(f"{where}: ClusterQueue {target}'s namespaceSelector leaves out "
                                f"{namespace}")
            problems += _fits_quota(where, pod_sets(job, runtimes), cq, flavors)
    return problems


def _fits_quota(where: str, sets, cq: dict, flavors: dict) -> list[str]:
    problems, need, covered = [], {}, {}
    for group in cq["spec"].get("resourceGroups", []):
        for flavor in group.get("flavors", []):
            covered[flavor["name"]] = {r["name"]: _quantity(r["nominalQuota"])
                                       for r in flavor.get("resources", [])}
    for count, pod, requests in sets:
        pool = pod.get("nodeSelector", {}).get("libddp/pool")
        flavor = next((f for f in covered if flavors.get(f, {}).get("spec", {}).get(
            "nodeLabels", {}).get("libddp/pool") == pool), None)
        if flavor is None:
            problems.append(f"{where}: its pods select pool {pool}, for which ClusterQueue "
                            f"{cq['metadata']['name']} has no flavor")
            continue
        for taint in flavors[flavor]["spec"].get("nodeTaints", []):
            if not any(t.get("key") == taint["key"] for t in pod.get("tolerations", [])):
                problems.append(f"{where}: its pods do not tolerate flavor {flavor}'s taint "
                                f"{taint['key']}: Kueue would not give them that flavor")
        for key, amount in requests.items():
            total = need.setdefault(flavor, {})
            total[key] = total.get(key, 0) + count * amount
    for flavor, total in need.items():
        for key, amount in total.items():
            quota = covered[flavor].get(key)
            if quota is None:
                problems.append(f"{where}: requests {key}, which ClusterQueue "
                                f"{cq['metadata']['name']} does not cover: never admitted")
            elif amount > quota:
                problems.append(f"{where}: needs {key} {amount:g} at once, more than ClusterQueue "
                                f"{cq['metadata']['name']}'s quota {quota:g}: never admitted")
    return problems


def quotas_fit_pools(kueue: list[dict], pools: dict, instances: dict) -> list[str]:
    """Each flavor's quota within what its pool's nodes have (pools: cluster_fit.node_pools): a
    quota beyond it admits jobs whose pods then wait for nodes."""
    flavors = {d["metadata"]["name"]: d for d in kueue if d["kind"] == "ResourceFlavor"}
    problems = []
    for cq in (d for d in kueue if d["kind"] == "ClusterQueue"):
        for group in cq["spec"].get("resourceGroups", []):
            for flavor in group.get("flavors", []):
                pool = flavors.get(flavor["name"], {}).get("spec", {}).get(
                    "nodeLabels", {}).get("libddp/pool")
                if pool not in pools:
                    problems.append(f"ClusterQueue {cq['metadata']['name']}: flavor "
                                    f"{flavor['name']} is for pool {pool}, which no node group "
                                    "has")
                    continue
                instance, nodes = pools[pool]
                for resource in flavor.get("resources", []):
                    have = instances[instance].get(resource["name"])
                    quota = _quantity(resource["nominalQuota"])
                    if have is not None and quota > nodes * have:
                        problems.append(f"ClusterQueue {cq['metadata']['name']}: "
                                        f"{resource['name']} quota {quota:g} is more than pool "
                                        f"{pool}'s {nodes} x {instance} have "
                                        f"({nodes * have:g})")
    return problems
