# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""k8s/ps/: the parameter-server demo as one Indexed Job and a headless Service. What the API
server cannot see and libddp needs: one Job for all the ranks (Kueue admits each Job on its own:
two would be two workloads, one of which could start and wait for the other), each pod's rank
its index, DDP_SIZE the Job's pods and DDP_PS_SERVERS fewer, every pod running at once, the
rendezvous address rank 0's DNS name under the Service the pods' subdomain names, that Service
selecting the pods, and the token from a Secret, never a literal."""
from __future__ import annotations

import re

from deploycheck import ROOT

FOLDER = ROOT / "k8s" / "ps"
RANK = "DDP_RANK=$JOB_COMPLETION_INDEX"


def _env(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def ps_rules(docs: list[dict]) -> list[str]:
    jobs = [d for d in docs if d["kind"] == "Job"]
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    if len(jobs) != 1:
        return [f"{len(jobs)} Jobs ({', '.join(j['metadata']['name'] for j in jobs)}): the "
                "ranks of one job must be one Job, which Kueue admits whole"]
    job = jobs[0]
    name, spec, pod = job["metadata"]["name"], job["spec"], job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = _env(container)
    problems = []
    if spec.get("completionMode") != "Indexed":
        return [f"Job {name}: not Indexed: its pods have no rank to take"]
    count = int(spec.get("completions", 1))
    if int(spec.get("parallelism", 1)) != count:
        problems.append(f"Job {name}: parallelism {spec.get('parallelism')} != completions "
                        f"{count}: every rank must run at once")
    if RANK not in " ".join(container.get("args", [])):
        problems.append(f"Job {name}: DDP_RANK is not the pod's index ({RANK})")
    if env.get("DDP_SIZE") != str(count):
        problems.append(f"Job {name}: DDP_SIZE {env.get('DDP_SIZE')} is not the {count} ranks")
    servers = env.get("DDP_PS_SERVERS")
    if servers is None or not servers.isdigit() or not 0 < int(servers) < count:
        problems.append(f"Job {name}: DDP_PS_SERVERS {servers} must leave workers among the "
                        f"{count} ranks (1 to {count - 1})")
    token = env.get("DDP_JOB_TOKEN")
    if not isinstance(token, dict) or "secretKeyRef" not in token:
        problems.append(f"Job {name}: DDP_JOB_TOKEN must come from a Secret")
    service = services.get(pod.get("subdomain"))
    if service is None:
        problems.append(f"Job {name}: subdomain {pod.get('subdomain')} names no Service")
    elif not all(pod_labels_match(job, service)):
        problems.append(f"Job {name}: Service {service['metadata']['name']} does not select its "
                        "pods")
    address = env.get("DDP_RENDEZVOUS_ADDR", "")
    if not re.fullmatch(rf"{name}-0\.{pod.get('subdomain')}(\.\S+)?", address):
        problems.append(f"Job {name}: DDP_RENDEZVOUS_ADDR {address} is not rank 0's name "
                        f"({name}-0.{pod.get('subdomain')})")
    return problems


def pod_labels_match(job: dict, service: dict):
    labels = job["spec"]["template"].get("metadata", {}).get("labels", {})
    for key, value in service["spec"].get("selector", {}).items():
        yield labels.get(key) == value
