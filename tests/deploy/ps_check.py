"""k8s/ps/: the parameter-server demo as two Indexed Jobs (workers, servers) and a headless
Service. What the API server cannot see and libddp needs: the ranks the two Jobs hand out are
0..N+K-1 once each (workers first), DDP_SIZE and DDP_PS_SERVERS agree with the Jobs' sizes, the
rendezvous address is worker 0's DNS name under the Service the pods' subdomain names, that
Service selects both Jobs' pods, and the token comes from a Secret, never a literal."""
from __future__ import annotations

import re

from deploycheck import ROOT

FOLDER = ROOT / "k8s" / "ps"


def _env(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def ps_rules(docs: list[dict]) -> list[str]:
    jobs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Job"}
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    problems, ranks, sizes, servers = [], [], set(), 0
    for name, job in sorted(jobs.items()):
        spec, pod = job["spec"], job["spec"]["template"]["spec"]
        container = pod["containers"][0]
        env = _env(container)
        if spec.get("completionMode") != "Indexed":
            problems.append(f"Job {name}: not Indexed: its pods have no rank to take")
            continue
        offset = int(env.get("RANK_OFFSET", 0))
        count = int(spec.get("completions", 1))
        if int(spec.get("parallelism", 1)) != count:
            problems.append(f"Job {name}: parallelism {spec.get('parallelism')} != completions "
                            f"{count}: every rank must run at once")
        ranks += range(offset, offset + count)
        sizes.add(env.get("DDP_SIZE"))
        if "server" in name:
            servers += count
        if "DDP_RANK=$((JOB_COMPLETION_INDEX + RANK_OFFSET))" not in " ".join(
                container.get("args", [])):
            problems.append(f"Job {name}: DDP_RANK is not the pod's index plus RANK_OFFSET")
        token = env.get("DDP_JOB_TOKEN")
        if not isinstance(token, dict) or "secretKeyRef" not in token:
            problems.append(f"Job {name}: DDP_JOB_TOKEN must come from a Secret")
        service = services.get(pod.get("subdomain"))
        if service is None:
            problems.append(f"Job {name}: subdomain {pod.get('subdomain')} names no Service")
        elif not all(pod_labels_match(job, service)):
            problems.append(f"Job {name}: Service {service['metadata']['name']} does not "
                            "select its pods")
        address = env.get("DDP_RENDEZVOUS_ADDR", "")
        worker0 = next((n for n, j in jobs.items() if int(_env(
            j["spec"]["template"]["spec"]["containers"][0]).get("RANK_OFFSET", 0)) == 0), None)
        if not re.fullmatch(rf"{worker0}-0\.{pod.get('subdomain')}(\.\S+)?", address):
            problems.append(f"Job {name}: DDP_RENDEZVOUS_ADDR {address} is not rank 0's name "
                            f"({worker0}-0.{pod.get('subdomain')})")
        if env.get("DDP_PS_SERVERS") is None:
            problems.append(f"Job {name}: no DDP_PS_SERVERS")
    if sorted(ranks) != list(range(len(ranks))):
        problems.append(f"the Jobs' ranks are {sorted(ranks)}, not 0..{len(ranks) - 1} once each")
    if sizes != {str(len(ranks))}:
        problems.append(f"DDP_SIZE {sorted(map(str, sizes))} is not the {len(ranks)} ranks")
    for job in jobs.values():
        env = _env(job["spec"]["template"]["spec"]["containers"][0])
        if env.get("DDP_PS_SERVERS") != str(servers):
            problems.append(f"Job {job['metadata']['name']}: DDP_PS_SERVERS "
                            f"{env.get('DDP_PS_SERVERS')} is not the {servers} server pods")
    return problems


def pod_labels_match(job: dict, service: dict):
    labels = job["spec"]["template"].get("metadata", {}).get("labels", {})
    for key, value in service["spec"].get("selector", {}).items():
        yield labels.get(key) == value
