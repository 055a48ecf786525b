# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""`make eks-run`: the job's image (built once), a local overlay with that job alone (or the
overlay's jobs together), checked offline and by the cluster, applied into its overlay's own
namespace through Kueue's queue, waited for, and its result read from the logs."""
from __future__ import annotations

import os
import re
import subprocess
import sys

from local_overlay import MODEL_CHECK, NAMESPACES
from ops.image import builder, image
from ops.kube import Kube
from ops.outputs import Outputs
from ops.settings import Settings
from ops.shell import DRY_RUN, LOCAL, ROOT, Failure, need, probe, quote, sh, step

QUEUES = {"cpu": "libddp-cpu", "gpu-efa": "libddp-gpu", "ps": "libddp-cpu",
          "trainjob": "libddp-gpu"}
KINDS = {"cpu": ["MPIJob", "LocalQueue"], "gpu-efa": ["MPIJob", "LocalQueue"],
         "ps": ["LocalQueue"], "trainjob": ["TrainJob", "ClusterTrainingRuntime", "LocalQueue"]}
# The kind of each overlay's jobs, as kubectl names it.
JOB_KIND = {"cpu": "mpijob", "gpu-efa": "mpijob", "ps": "job", "trainjob": "trainjob"}


def python() -> str:
    return quote(sys.executable)


def render_and_check(outputs: Outputs, settings: Settings, ref: str) -> os.PathLike:
    overlay = settings.overlay
    folder = LOCAL / overlay
    what = "its jobs together" if settings.job == "all" else f"{settings.job} alone"
    with step(f"local overlay {folder}: {what}"):
        alone = f" --job {settings.job}" if overlay in ("cpu", "gpu-efa") and \
            settings.job != "all" else ""
        sh(f"{python()} k8s/local_overlay.py --overlay {overlay} --image {quote(ref)} "
           f"--terraform-outputs {outputs.write()}{alone} --out {folder}", offline=True)
    with step("render and validate (schemas where present, controller rules, EFA, fit)"):
        sh(f"{python()} tests/deploy/deploycheck.py --render {folder}", offline=True)
    if DRY_RUN and os.environ.get("REHEARSE", "0") == "1":
        for job in settings.jobs:
            with step(f"rehearse {job} in network namespaces (tests/deploy/rehearsal.py)"):
                sh(f"{python()} tests/deploy/rehearsal.py --overlay {overlay} --job {job}",
                   offline=True)
    return folder


def preflight(kube: Kube, settings: Settings) -> None:
    """Before an image is built or anything deleted: the cluster answers, has the kinds the
    job needs, and Kueue's ClusterQueue for its pool."""
    kube.connect()
    with step(f"the cluster has what {settings.overlay}'s jobs need"):
        kube.require(KINDS[settings.overlay], f"OVERLAY={settings.overlay}")
        queue = QUEUES[settings.overlay]
        if not DRY_RUN and not kube.exists(f"clusterqueue {queue}"):
            raise Failure(f"Kueue's ClusterQueue {queue} is not on the cluster: `make eks-up` "
                          "applies k8s/kueue/ (k8s/local/kueue)")


def run(outputs: Outputs, settings: Settings) -> int:
    need("aws", "the image and the cluster are reached through it (the AWS CLI v2)")
    need("kubectl", "the job is applied and followed with it")
    kube = Kube(outputs)
    how = builder(outputs)  # how the image will be built: known before anything starts
    preflight(kube, settings)
    ref = image(outputs, settings.overlay, how)
    folder = render_and_check(outputs, settings, ref)
    namespace = NAMESPACES[settings.overlay]
    with step(f"apply {settings.job} into {namespace} (its queue admits it whole)"):
        replace(kube, settings, namespace)
        kube.apply(folder)
    kind = JOB_KIND[settings.overlay]
    status = 0
    for job in settings.jobs:
        with step(f"wait for {job} to succeed or fail (at most {settings.timeout_s} s)"):
            state = kube.wait(namespace, kind, job, settings.timeout_s)
            print(f"    {job}: {state}")
        with step(f"{job}'s log -> {LOCAL / 'logs' / (job + '.log')}"):
            log = sh(kube.cmd(logs_of(settings.overlay, namespace, job)), capture=True)
            if not DRY_RUN:
                (LOCAL / "logs").mkdir(parents=True, exist_ok=True)
                (LOCAL / "logs" / f"{job}.log").write_text(log)
            for line in report(log) if not DRY_RUN else []:
                print(f"    {line}")
        ok = state.startswith("Succeeded")
        if ok and job == "ddp-digits" and settings.overlay == "gpu-efa":
            ok = model_check(kube, namespace, settings.timeout_s) == 0
        status = status or (0 if ok else 1)
    return status


def replace(kube: Kube, settings: Settings, namespace: str) -> None:
    """What a new run replaces: the job's last run (a finished MPIJob, TrainJob or Job is not
    started again by an apply), the model check's Job (its pod template is immutable: another
    image cannot be applied over it), the parameter-server job's token; and the FSx volume
    freed of a claim that is gone."""
    sh(kube.cmd(f"-n {namespace} delete {JOB_KIND[settings.overlay]} {' '.join(settings.jobs)} "
                "--ignore-not-found --wait"))
    if settings.overlay == "gpu-efa" and "ddp-digits" in settings.jobs:
        sh(kube.cmd(f"-n {namespace} delete job {MODEL_CHECK} --ignore-not-found --wait"))
    if settings.overlay == "gpu-efa":
        release_volume(kube)
    if settings.overlay == "ps":
        sh(kube.cmd(f"create namespace {namespace} --dry-run=client -o yaml") + " | " +
           kube.cmd("apply -f -"))
        sh(kube.cmd(f"-n {namespace} create secret generic ddp-ps-token --from-literal=token="
                    '"$(openssl rand -hex 16)" --dry-run=client -o yaml') + " | " +
           kube.cmd("apply -f -"))


def release_volume(kube: Kube) -> None:
    """The FSx PersistentVolume is kept (Retain) when its claim goes (its namespace deleted):
    it is then Released, still naming the old claim, and no new claim can bind it. Its
    claimRef is dropped so that the overlay's claim binds it again; the data stay."""
    query = kube.cmd("get pv fsx -o jsonpath='{.status.phase}'")
    if DRY_RUN:
        sh(query)
        return
    phase = probe(query).stdout.strip()
    if phase == "Released":
        remove = '[{"op":"remove","path":"/spec/claimRef"}]'
        sh(kube.cmd(f"patch pv fsx --type json -p {quote(remove)}"))


def logs_of(overlay: str, namespace: str, job: str) -> str:
    if overlay == "ps":  # rank 0 prints the accuracy
        return (f"-n {namespace} logs -l job-name={job},"
                "batch.kubernetes.io/job-completion-index=0 --tail=-1")
    if overlay == "trainjob":  # JobSet labels every node's pod by the TrainJob
        return f"-n {namespace} logs -l jobset.sigs.k8s.io/jobset-name={job} --tail=-1 --prefix"
    return f"-n {namespace} logs job/{job}-launcher"


def report(log: str) -> list[str]:
    """The lines worth printing from a job's log: accuracy, busbw, the EFA verification."""
    lines = [m.group(0) for m in re.finditer(r"final test accuracy [^\n]*", log)]
    rows = re.findall(r"^(?:\[\d+,\d+\]<stdout>:)?\s*(\d+)\s+\d+\s+\w+\s+\w+\s+[\d.]+\s+"
                      r"([\d.]+)\s+([\d.]+)\s+\d+\s*$", log, re.M)
    if rows:
        size, _, busbw = max(rows, key=lambda r: int(r[0]))
        lines.append(f"busbw {busbw} GB/s at {int(size)} bytes "
                     f"(peak {max(float(r[2]) for r in rows):g} GB/s)")
    lines += [m.group(0) for m in re.finditer(r"ddp-efa-check: [^\n]*", log)]
    lines += [m.group(0) for m in re.finditer(r"[^\n]*img/sec[^\n]*", log)][-1:]
    return lines or ["(nothing to report: see the log)"]


def model_check(kube: Kube, namespace: str, timeout_s: int) -> int:
    """Resumes the suspended ddp-model-check Job (the demo's checkpoint on FSx) and reports."""
    with step(f"{MODEL_CHECK}: the checkpoint's accuracy on the held-out images"):
        sh(kube.cmd(f"-n {namespace} patch job {MODEL_CHECK} --type merge "
                    "-p '{\"spec\":{\"suspend\":false}}'"))
        wait = kube.cmd(f"-n {namespace} wait --for=condition=complete job/{MODEL_CHECK} "
                        f"--timeout={timeout_s}s")
        if DRY_RUN:
            sh(wait)
            return 0
        print(f"    $ {wait}", flush=True)
        ok = subprocess.run(wait, shell=True, cwd=ROOT).returncode == 0
        log = sh(kube.cmd(f"-n {namespace} logs job/{MODEL_CHECK}"), capture=True)
        for line in re.findall(r"model check: [^\n]*", log):
            print(f"    {line}")
    return 0 if ok else 1
