# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""A scheduling simulation of jobs competing for a node pool, with and without Kueue, to show
what the rendered manifests and k8s/kueue's configuration do when there are too few nodes: the
pods of the jobs, the pool's nodes, kube-scheduler's first fit, the MPI operator's
WaitForWorkersReady (a job runs only once all of its pods are placed), and Kueue's admission
(a ClusterQueue's quota, blockAdmission, waitForPodsReady's timeout and requeuing with a
backoff limit), step by step in simulated seconds. Without Kueue every job's pods are made at
once, interleaved (the controllers make them concurrently); with it a job's pods are made only
once it is admitted, whole. The outcome: each job's end, and whether the pool deadlocked (no
job can progress and nothing is left to wait for)."""
from __future__ import annotations

import dataclasses
import re

from deploycheck import _quantity
from kueue_check import pod_sets

RESOURCES = ("cpu", "memory", "nvidia.com/gpu", "vpc.amazonaws.com/efa")


@dataclasses.dataclass
class Job:
    name: str
    pods: list[dict]  # requests of each pod, in the order its controller makes them
    duration_s: float
    state: str = "queued"  # queued, admitted, running, succeeded, deactivated
    placed: dict = dataclasses.field(default_factory=dict)  # pod index -> node
    deadline: float = 0.0  # an admitted job not running by then is evicted (waitForPodsReady)
    started_at: float = 0.0
    evictions: int = 0
    requeue_at: float = 0.0

    def need(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for pod in self.pods:
            for key, amount in pod.items():
                total[key] = total.get(key, 0) + amount
        return total


def jobs_of(docs: list[dict], duration_s: float = 600) -> list[Job]:
    """The MPIJobs, Jobs and TrainJobs of a rendered overlay, as pods with their requests."""
    jobs = []
    runtimes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterTrainingRuntime"}
    for doc in docs:
        if doc["kind"] not in ("MPIJob", "Job", "TrainJob") or (
                doc["kind"] == "Job" and doc["spec"].get("suspend")):
            continue
        pods = []
        for count, _, requests in pod_sets(doc, runtimes):
            pods += [{k: v for k, v in requests.items() if k in RESOURCES}] * count
        jobs.append(Job(doc["metadata"]["name"], pods, duration_s))
    return jobs


def duration_s(text: str) -> float:
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u]
               for n, u in re.findall(r"(\d+(?:\.\d+)?)(h|m|s)", text))


@dataclasses.dataclass
class Kueue:
    """A ClusterQueue's quota and the controller's waitForPodsReady (None: Kueue not used)."""
    quota: dict[str, float]
    block_admission: bool = True
    timeout_s: float = 1800
    recovery_s: float = 1800
    backoff_limit: int | None = 5
    backoff_base_s: float = 60

    @classmethod
    def from_manifests(cls, cluster_queue: dict, config: dict) -> "Kueue":
        flavor = cluster_queue["spec"]["resourceGroups"][0]["flavors"][0]
        wait = config.get("waitForPodsReady", {})
        requeue = wait.get("requeuingStrategy", {})
        timeout = duration_s(wait.get("timeout", "30m"))
        return cls({r["name"]: _quantity(r["nominalQuota"]) for r in flavor["resources"]},
                   bool(wait.get("blockAdmission", False)), timeout,
                   duration_s(wait.get("recoveryTimeout", "")) or timeout,
                   requeue.get("backoffLimitCount"), float(requeue.get("backoffBaseSeconds", 60)))


def simulate(jobs: list[Job], nodes: list[dict[str, float]], kueue: Kueue | None,
             step_s: float = 10, until_s: float = 6 * 3600, lost: tuple | None = None):
    """Runs the pool; LOST = (node index, at s, back at s): a node that goes and comes back (node
    repair). Returns (jobs, deadlocked, the log of events)."""
    free = [dict(n) for n in nodes]
    up = [True] * len(nodes)
    log: list[str] = []
    made: list[tuple[Job, int]] = []  # pods made and not yet placed, in creation order
    if kueue is None:  # every job's pods at once
        made = interleaved(jobs)
        for job in jobs:
            job.state = "admitted"
    now = 0.0
    while now <= until_s:
        if lost is not None and now == lost[1]:
            _lose_node(jobs, free, nodes, lost[0], up, made, log, now,
                       kueue.recovery_s if kueue else until_s)
        if lost is not None and now == lost[2]:
            up[lost[0]], free[lost[0]] = True, dict(nodes[lost[0]])
            log.append(f"{now:6.0f} s: node {lost[0]} is back")
        for job in jobs:  # running jobs end, freeing their nodes
            if job.state == "running" and now >= job.started_at + job.duration_s:
                _free(job, free)
                job.state = "succeeded"
                log.append(f"{now:6.0f} s: {job.name} succeeded")
        if kueue is not None:
            made += _admit(jobs, kueue, now, log)
        for job, index in list(made):  # kube-scheduler: first fit, in creation order
            node = next((n for n in range(len(free)) if up[n] and _fits(job.pods[index], free[n])),
                        None)
            if node is not None:
                _take(job.pods[index], free[node])
                job.placed[index] = node
                made.remove((job, index))
        for job in jobs:  # WaitForWorkersReady: a job runs once all of its pods are placed
            if job.state == "admitted" and len(job.placed) == len(job.pods):
                job.state, job.started_at = "running", now
                log.append(f"{now:6.0f} s: {job.name} runs on nodes "
                           f"{sorted(set(job.placed.values()))}")
        if kueue is not None:
            made = _timeouts(jobs, kueue, free, made, now, log)
        if all(j.state in ("succeeded", "deactivated") for j in jobs):
            return jobs, False, log
        now += step_s
    return jobs, True, log


def interleaved(jobs: list[Job]) -> list[tuple[Job, int]]:
    """The pods of jobs made at the same time, as their controllers, running concurrently,
    make them: one of each job in turn."""
    made = []
    for i in range(max((len(j.pods) for j in jobs), default=0)):
        made += [(j, i) for j in jobs if i < len(j.pods)]
    return made


def _fits(pod, free) -> bool:
    return all(free.get(k, 0) >= v for k, v in pod.items())


def _take(pod, free) -> None:
    for k, v in pod.items():
        free[k] -= v


def _free(job: Job, free: list[dict]) -> None:
    for index, node in job.placed.items():
        for k, v in job.pods[index].items():
            free[node][k] += v
    job.placed = {}


def _admit(jobs: list[Job], kueue: Kueue, now: float, log: list[str]) -> list:
    """The queue admits, in order, each job whose whole need fits what the quota has left; with
    blockAdmission, none while an admitted job's pods are not all placed."""
    admitted = []
    for job in sorted((j for j in jobs if j.state == "queued" and j.requeue_at <= now),
                      key=lambda j: j.requeue_at):
        if kueue.block_admission and any(j.state == "admitted" for j in jobs):
            break
        used = {}
        for other in (j for j in jobs if j.state in ("admitted", "running")):
            for k, v in other.need().items():
                used[k] = used.get(k, 0) + v
        if all(used.get(k, 0) + v <= kueue.quota.get(k, 0) for k, v in job.need().items()):
            job.state, job.deadline = "admitted", now + kueue.timeout_s
            admitted.append(job)
            log.append(f"{now:6.0f} s: {job.name} admitted")
    return interleaved(admitted)


def _timeouts(jobs, kueue, free, made, now, log) -> list:
    """waitForPodsReady: an admitted job not running by the timeout is evicted (its pods
    deleted, its quota freed) and queued again after a backoff, or deactivated at the limit."""
    for job in jobs:
        if job.state == "admitted" and now >= job.deadline:
            _free(job, free)
            made = [(j, i) for j, i in made if j is not job]
            job.evictions += 1
            if kueue.backoff_limit is not None and job.evictions > kueue.backoff_limit:
                job.state = "deactivated"
                log.append(f"{now:6.0f} s: {job.name} deactivated after {job.evictions - 1} "
                           "requeues")
            else:
                job.state = "queued"
                job.requeue_at = now + kueue.backoff_base_s * 2 ** (job.evictions - 1)
                log.append(f"{now:6.0f} s: {job.name} evicted (pods not ready), queued again")
    return made


def _lose_node(jobs, free, nodes, index, up, made, log, now, recovery_s) -> None:
    """The node goes with its pods: a running job on it waits for them to be placed again (its
    controller makes them again), and Kueue evicts it whole if they are not running again within
    recoveryTimeout."""
    up[index] = False
    log.append(f"{now:6.0f} s: node {index} lost")
    for job in jobs:
        gone = [i for i, n in job.placed.items() if n == index]
        for i in gone:
            del job.placed[i]
            made.append((job, i))
        if gone and job.state == "running":
            job.state, job.deadline = "admitted", now + recovery_s
            log.append(f"{now:6.0f} s: {job.name} lost {len(gone)} pods; waits for them")
    free[index] = {k: 0.0 for k in nodes[index]}
