# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""What the rendered jobs need of the cluster terraform/ makes: the ports they use between pods on
different nodes let in by the nodes' security group, and the pods that can run at once fitting
the node groups they select (without gang scheduling, jobs that each hold part of a group that
cannot hold them all wait for each other for ever: WaitForWorkersReady)."""
import pathlib

from deploycheck import _hcl, _quantity

# Every job's ranks listen on ephemeral ports (libddp's transports and store, Open MPI's daemons):
# Linux draws them from 32768-60999 (net.ipv4.ip_local_port_range).
EPHEMERAL_PORTS = ("tcp", 32768, 60999)


def eks_module(folder: pathlib.Path) -> dict:
    for blocks in _hcl(folder).values():
        for block in blocks.get("module", []):
            for body in block.values():
                if _one(body.get("source")) == "terraform-aws-modules/eks/aws":  # not submodules
                    return body
    raise LookupError(f"{folder}: no terraform-aws-modules/eks/aws module")


def node_self_ingress(folder: pathlib.Path) -> list[tuple[str, int, int]]:
    """(protocol, first port, last port) that a node accepts from the cluster's other nodes: the
    EKS module's own rules (module_inputs.py) and terraform's additional self rules."""
    from module_inputs import EKS_V21_NODE_SELF_INGRESS, EKS_V21_NODE_SELF_INGRESS_RECOMMENDED
    eks = eks_module(folder)
    allowed = list(EKS_V21_NODE_SELF_INGRESS)
    if _one(eks.get("node_security_group_enable_recommended_rules", True)) not in (False, "false"):
        allowed += EKS_V21_NODE_SELF_INGRESS_RECOMMENDED
    rules = eks.get("node_security_group_additional_rules", {})
    for block in rules if isinstance(rules, list) else [rules]:
        for rule in block.values():
            if rule.get("type") != "ingress" or rule.get("self") not in (True, "true"):
                continue
            protocol = str(rule.get("protocol")).lower()
            if protocol in ("-1", "all"):
                allowed += [("tcp", 0, 65535), ("udp", 0, 65535)]
            else:
                allowed.append((protocol, int(rule["from_port"]), int(rule["to_port"])))
    return allowed


def pod_traffic(overlays: dict[str, list[dict]]) -> list[tuple[str, int, int, str]]:
    """What the rendered jobs need to reach across nodes: each launcher every port its workers'
    containers declare (sshd for mpirun), and every rank the others' ephemeral ports."""
    needs = [(*EPHEMERAL_PORTS, "the ranks' listening sockets (libddp, Open MPI)")]
    for overlay, docs in overlays.items():
        for doc in docs:
            if doc.get("kind") not in ("MPIJob", "Job"):
                continue
            worker = doc["spec"]["template"]["spec"] if doc["kind"] == "Job" else \
                doc["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
            for container in worker["containers"]:
                for port in container.get("ports", []):
                    number = int(port["containerPort"])
                    who = "its launcher to its workers'" if doc["kind"] == "MPIJob" else \
                        "the other pods to its"
                    needs.append((port.get("protocol", "TCP").lower(), number, number,
                                  f"{overlay}: {doc['kind']} {doc['metadata']['name']}: {who} "
                                  f"{port.get('name', 'port')} ({number})"))
    return needs


def node_traffic(folder: pathlib.Path, overlays: dict[str, list[dict]]) -> list[str]:
    """Every port the jobs use between pods on different nodes is one the nodes' security group
    lets in from the other nodes (a launcher and its workers, and the workers among themselves,
    sit on different nodes)."""
    allowed = node_self_ingress(folder)
    return [f"{why}: {protocol} {first}-{last} is not let in between nodes (terraform/main.tf: "
            "node_security_group_additional_rules)"
            for protocol, first, last, why in pod_traffic(overlays)
            if not any(p == protocol and lo <= first and last <= hi for p, lo, hi in allowed)]


# What one node of each instance type the node groups may take offers, as AWS lists it (vCPUs,
# memory, GPUs, EFA interfaces). Capacity, not allocatable: what the kubelet and the daemons
# keep makes the real room smaller, so a job this check passes may still not fit; one it fails
# never does. Hugepages depend on the node's configuration and are not counted.
INSTANCES = {
    "m6i.large": {"cpu": 2, "memory": 8 * 2**30},
    "c6i.4xlarge": {"cpu": 16, "memory": 32 * 2**30},
    "p5.48xlarge": {"cpu": 192, "memory": 2048 * 2**30, "nvidia.com/gpu": 8,
                    "vpc.amazonaws.com/efa": 32},
    "p5e.48xlarge": {"cpu": 192, "memory": 2048 * 2**30, "nvidia.com/gpu": 8,
                     "vpc.amazonaws.com/efa": 32},
}


def _one(value):
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def _resolve(value, defaults: dict):
    """A node group's setting: a literal, `var.x` (its default), or `max(var.x, n)`."""
    text = str(_one(value)).removeprefix("${").removesuffix("}").strip()
    if text.startswith("max(") and text.endswith(")"):
        return max(int(_resolve(part, defaults)) for part in text[4:-1].split(","))
    if text.startswith("var."):
        return _one(defaults[text[4:]])
    return int(text) if text.isdigit() else text


def node_pools(folder: pathlib.Path) -> dict[str, tuple[str, int]]:
    """{libddp/pool label: (instance type, most nodes)} of the EKS module's node groups, with the
    variables at their defaults."""
    defaults = {}
    for blocks in _hcl(folder).values():
        for block in blocks.get("variable", []):
            for name, body in block.items():
                if "default" in body:
                    defaults[name] = body["default"]
    groups = _one(eks_module(folder).get("eks_managed_node_groups", {}))
    pools = {}
    for settings in groups.values():
        pool = _one(settings.get("labels", {})).get("libddp/pool")
        if pool is not None:
            types = settings["instance_types"]
            while isinstance(types, list) and types and isinstance(types[0], list):
                types = types[0]
            instance = _resolve(types[0], defaults)
            pools[pool] = (instance, int(_resolve(settings["max_size"], defaults)))
    return pools


def _pods(job: dict):
    """(replicas, pod spec) of each of a job's replica groups (an MPIJob's launcher and
    workers; a batch Job's parallel pods)."""
    if job["kind"] == "Job":
        yield int(job["spec"].get("parallelism", 1)), job["spec"]["template"]["spec"]
        return
    for spec in job["spec"]["mpiReplicaSpecs"].values():
        yield int(spec.get("replicas", 1)), spec["template"]["spec"]


def _suspended(job: dict) -> bool:
    spec = job["spec"]
    return bool(spec.get("suspend") or spec.get("runPolicy", {}).get("suspend"))


def queued(job: dict) -> bool:
    """Sent to a Kueue LocalQueue: Kueue starts it only when its ClusterQueue holds all of its
    pods (kueue_check.py checks that), so it starts with nothing else on `kubectl apply`."""
    return "kueue.x-k8s.io/queue-name" in job["metadata"].get("labels", {})


def capacity(folder: pathlib.Path, overlays: dict[str, list[dict]]) -> list[str]:
    """Per overlay and node pool, what the jobs that start on `kubectl apply -k` request together
    (a suspended job starts nothing until resumed, a queued one until Kueue admits it whole)
    within what the pool's nodes have. Each pod must also fit one node."""
    pools = node_pools(folder)
    problems = []
    for overlay, docs in overlays.items():
        wanted: dict[str, dict[str, float]] = {}
        running: dict[str, list[str]] = {}
        for job in (d for d in docs if d.get("kind") in ("MPIJob", "Job")):
            name = job["metadata"]["name"]
            starts = not (_suspended(job) or queued(job))
            for replicas, pod in _pods(job):
                pool = pod.get("nodeSelector", {}).get("libddp/pool")
                if pool not in pools:
                    problems.append(f"{overlay}: {job['kind']} {name}: its pods select pool "
                                    f"{pool!r}, which no node group has "
                                    f"({', '.join(sorted(pools))})")
                    continue
                instance = pools[pool][0]
                for key, amount in _pod_requests(pod).items():
                    if key not in INSTANCES[instance]:
                        continue
                    if amount > INSTANCES[instance][key]:
                        problems.append(f"{overlay}: {job['kind']} {name}: a pod requests "
                                        f"{key} {amount:g}, more than a {instance} has")
                    if starts:
                        total = wanted.setdefault(pool, {})
                        total[key] = total.get(key, 0) + replicas * amount
                        running.setdefault(pool, []).append(name)
        for pool, total in wanted.items():
            instance, nodes = pools[pool]
            for key, amount in total.items():
                if amount > nodes * INSTANCES[instance][key]:
                    jobs = ", ".join(sorted(set(running[pool])))
                    problems.append(
                        f"{overlay}: the jobs that start at once ({jobs}) request {key} "
                        f"{amount:g} on pool {pool}, which has {nodes} x {instance} "
                        f"({nodes * INSTANCES[instance][key]:g}): each could hold part of the "
                        "pool and wait for the rest for ever; send them to a Kueue queue "
                        "(k8s/kueue) or add nodes")
    return problems


def _pod_requests(pod: dict) -> dict[str, float]:
    total: dict[str, float] = {}
    for container in pod["containers"]:
        for key, quantity in container.get("resources", {}).get("requests", {}).items():
            total[key] = total.get(key, 0) + _quantity(quantity)
    return total


def _association_paths(folder: pathlib.Path) -> dict[str, set[str]]:
    """{file system path: {"import", "export"}} of terraform's FSx data repository associations."""
    paths = {}
    for blocks in _hcl(folder).values():
        for block in blocks.get("resource", []):
            for body in block.get("aws_fsx_data_repository_association", {}).values():
                s3 = _one(body.get("s3", [{}])) or {}
                kinds = {k.split("_")[1] for k in ("auto_import_policy", "auto_export_policy")
                         if s3.get(k)}
                paths[_one(body["file_system_path"]).rstrip("/")] = kinds
    return paths


def checkpoints_exported(folder: pathlib.Path, overlays: dict[str, list[dict]],
                         mount: str = "/fsx") -> list[str]:
    """Every checkpoint a job writes on FSx (--checkpoint under the mount) lands in a folder that
    a data repository association exports to S3, or it is lost with the file system."""
    exported = [p for p, kinds in _association_paths(folder).items() if "export" in kinds]
    problems = []
    for overlay, docs in overlays.items():
        for job in (d for d in docs if d.get("kind") == "MPIJob"):
            args = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"][
                "containers"][0].get("args", [])
            for i, word in enumerate(args[:-1]):
                path = args[i + 1]
                if word != "--checkpoint" or not path.startswith(mount + "/"):
                    continue
                inside = path[len(mount):]
                if not any(inside.startswith(p + "/") for p in exported):
                    problems.append(f"{overlay}: MPIJob {job['metadata']['name']}: checkpoint "
                                    f"{path} is in no folder exported to S3 (FSx associations "
                                    f"export {', '.join(sorted(exported)) or 'nothing'})")
    return problems
