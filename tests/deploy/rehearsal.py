#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""A rehearsal of an MPIJob on this machine, as close to a cluster as it gets: the overlay is
rendered, the launcher's command and environment are taken from it, one network namespace is made
per pod, its host named as the MPI operator names the pods (<job>-launcher, <job>-worker-<i>),
resolving the others as <pod>.<job>.<namespace>.svc, as the headless Service's DNS
does), the hostfile is written as the operator writes /etc/mpi/hostfile and given to Open MPI with
the operator's own variables, and the command runs in the launcher's namespace through the image's
entrypoint. Commands on the workers start with an sshd session's environment (PATH, HOME, LANG),
not the launcher's: what the ranks need must come through mpirun's -x, as on a cluster. What
differs from a cluster, and only this: Open MPI's remote shell is `ip netns exec` instead of ssh
(sshd itself is not rehearsed), the image's /opt/libddp is this checkout, and `python3` and
`ddp-bench` are this checkout's .venv and build.

    python3 tests/deploy/rehearsal.py [--overlay cpu|gpu-efa|ps] [--job ddp-digits]  (as root)

The gpu-efa overlay's launch lines run as written (ddp-efa-check around mpirun, --prefix, every
-x) but with CPU tensors (--device cpu), 2 ranks per worker instead of 8, this machine's Open MPI
for the EFA installer's, and FSx in the work folder: ddp-efa-check must then fail (no NCCL, no
EFA). The parameter-server job (k8s/ps/, two Indexed Jobs) runs one namespace per pod.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import os
import pathlib
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import deploycheck as dc

spec = importlib.util.spec_from_file_location("netsim",
                                              dc.ROOT / "benchmarks" / "netsim" / "netsim.py")
netsim = importlib.util.module_from_spec(spec)
spec.loader.exec_module(netsim)

# The checkout whose .venv and build/ stand in for the image's (this one unless
# DDP_REHEARSAL_BUILT names another, e.g. a worktree's main checkout that has been built).
BUILT = pathlib.Path(os.environ.get("DDP_REHEARSAL_BUILT", dc.ROOT))
IMAGE_ROOT = "/opt/libddp/"  # where the images keep examples/ (k8s/image/Dockerfile.*)
ENTRYPOINT = dc.ROOT / "k8s" / "image" / "entrypoint.sh"


def find_job(overlay: str, name: str) -> dict:
    for doc in dc.kustomize(dc.OVERLAYS[overlay]):
        if doc["kind"] == "MPIJob" and doc["metadata"]["name"] == name:
            return doc
    raise KeyError(f"no MPIJob {name} in overlay {overlay}")


def operator_view(job: dict) -> dict:
    """What the MPI operator derives from the job: pod names, DNS domain, hostfile, and the
    variables it gives the launcher (pkg/controller/mpi_job_controller.go, v0.8)."""
    name, namespace = job["metadata"]["name"], job["metadata"].get("namespace", "default")
    spec = job["spec"]
    workers = spec["mpiReplicaSpecs"]["Worker"]["replicas"]
    slots = spec.get("slotsPerWorker", 1)
    domain = f"{name}.{namespace}.svc"
    return {
        "pods": [f"{name}-launcher"] + [f"{name}-worker-{i}" for i in range(workers)],
        "domain": domain,
        "hostfile": "".join(f"{name}-worker-{i}.{domain} slots={slots}\n" for i in range(workers)),
        "env": {"K_MPI_JOB_ROLE": "launcher",
                "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
                "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
                "OMPI_MCA_orte_set_default_slots": str(slots)},
    }


def image_commands(workdir: pathlib.Path) -> pathlib.Path:
    """A folder of the image's commands, from this checkout (and BUILT's .venv and build)."""
    bin_dir = workdir / "bin"
    bin_dir.mkdir(exist_ok=True)
    python = BUILT / ".venv" / "bin" / "python"
    for command, target in (("python3", [python]),
                            ("ddp-bench", [BUILT / "build" / "bin" / "ddp-bench"]),
                            ("ddp-efa-check", [python, dc.ROOT / "k8s/image/efa_check.py"]),
                            ("ddp-model-check", [python, dc.ROOT / "k8s/image/model_check.py"]),
                            # torch 2's: Debian's 1.13 torchrun fails under Python 3.11
                            ("torchrun", [BUILT / ".venv-torch2" / "bin" / "torchrun"])):
        if not target[0].exists():
            if command == "torchrun":
                continue  # only the TrainJob's rehearsal needs it (make build-torch2)
            raise RuntimeError(f"{target[0]} is missing: make build first")
        line = " ".join(shlex.quote(str(word)) for word in target)
        (bin_dir / command).write_text(f'#!/bin/sh\nexec {line} "$@"\n')
        (bin_dir / command).chmod(0o755)
    return bin_dir


def image_env(dockerfile: pathlib.Path, env: dict) -> dict:
    """env with the image's ENV lines applied, ${VAR} expanded as docker does."""
    env = dict(env)
    for name, value in dc.image_env_values(dockerfile).items():
        env[name] = re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), value)
    return env


def on_this_machine(args: list[str], workdir: pathlib.Path) -> list[str]:
    """A launcher's args as this machine runs them: the image's files from this checkout, FSx
    (/fsx) in the work folder, the EFA installer's Open MPI (--prefix; OPAL_PREFIX is dropped)
    this machine's, and CUDA tensors on the CPU."""
    out = [a.replace(IMAGE_ROOT, f"{dc.ROOT}/").replace("/fsx/", f"{workdir}/fsx/")
           for a in args]
    if "/opt/amazon/openmpi" in out:  # a prefix whose bin/ holds this machine's orted alone
        prefix = workdir / "openmpi"
        (prefix / "bin").mkdir(parents=True, exist_ok=True)
        (prefix / "lib").mkdir(exist_ok=True)
        if not (prefix / "bin" / "orted").exists():
            (prefix / "bin" / "orted").symlink_to(shutil.which("orted") or "/usr/bin/orted")
        out = [str(prefix) if a == "/opt/amazon/openmpi" else a for a in out]
    return ["cpu" if a == "cuda" and out[i - 1] == "--device" else a for i, a in enumerate(out)]


def scale_slots(job: dict, slots: int) -> dict:
    """The job with SLOTS ranks per worker (slotsPerWorker, mpirun's -np and -N): a GPU job's
    8 ranks per node are more processes than this machine's cores hold."""
    job = copy.deepcopy(job)
    job["spec"]["slotsPerWorker"] = slots
    container = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    args = container["args"]
    workers = job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    args[args.index("-np") + 1] = str(workers * slots)
    args[args.index("-N") + 1] = str(slots)
    return job


def rehearse(job: dict, workdir: pathlib.Path, timeout: float = 600,
             dockerfile: pathlib.Path = dc.ROOT / "k8s" / "image" / "Dockerfile.cpu"):
    """Runs the job's launcher command; returns the CompletedProcess (text, output captured)."""
    why = netsim.available()
    if why:
        raise RuntimeError(f"network namespaces: {why}")
    view, env, args = launcher_setup(job, workdir, dockerfile)
    with netsim.Cluster(len(view["pods"]), names=view["pods"], domain=view["domain"],
                        sshd_env=True) as cluster:
        env["OMPI_MCA_plm_rsh_agent"] = cluster.rsh
        return cluster.run(0, ["sh", str(ENTRYPOINT), *args], env=env, cwd=str(workdir),
                           capture_output=True, text=True, timeout=timeout)


def launcher_setup(job: dict, workdir: pathlib.Path, dockerfile: pathlib.Path):
    """(pod names, DNS domain, the launcher's environment and args) as rehearse() runs them."""
    view = operator_view(job)
    container = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    hostfile = workdir / "hostfile"
    hostfile.write_text(view["hostfile"])
    bin_dir = image_commands(workdir)
    env = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir),
           "LANG": "C.UTF-8"}
    env = image_env(dockerfile, env)  # the image's ENV
    if env.get("OPAL_PREFIX") == "/opt/amazon/openmpi":  # the EFA installer's: not here
        del env["OPAL_PREFIX"]
    env.update({e["name"]: e["value"] for e in container.get("env", [])})  # the pod's
    env.update(view["env"])  # the operator's
    env["OMPI_MCA_orte_default_hostfile"] = str(hostfile)  # /etc/mpi/hostfile in the pod
    return view, env, on_this_machine(container["args"], workdir)


def rehearse_lost_worker(job: dict, workdir: pathlib.Path, worker: int = 1,
                         after: str = "epoch  2", timeout: float = 600,
                         dockerfile: pathlib.Path = dc.ROOT / "k8s" / "image" / "Dockerfile.cpu"):
    """A node lost in the middle of a job: the launcher's command runs until its output shows
    AFTER, then every process of worker WORKER's pod is stopped and killed (SIGSTOP to all,
    then SIGKILL: as its node going at once, its sockets closed by the kernel), and the
    launcher is waited for. Then what the operator and the launcher Job do next
    (k8s/mpijob/base/common.yaml: the worker pod made again, the launcher run again,
    backoffLimit 2): the same command once more, the worker's pod empty. Returns (first exit
    status, its output, seconds from the kill to the launcher's exit, the second run's
    CompletedProcess)."""
    why = netsim.available()
    if why:
        raise RuntimeError(f"network namespaces: {why}")
    view, env, args = launcher_setup(job, workdir, dockerfile)
    with netsim.Cluster(len(view["pods"]), names=view["pods"], domain=view["domain"],
                        sshd_env=True) as cluster:
        env["OMPI_MCA_plm_rsh_agent"] = cluster.rsh
        launcher = cluster.popen(0, ["sh", str(ENTRYPOINT), *args], env=env, cwd=str(workdir),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines, killed = [], None
        deadline = time.monotonic() + timeout
        for line in launcher.stdout:
            lines.append(line)
            if killed is None and after in line:
                pids = subprocess.run(["ip", "netns", "pids", cluster.namespaces[1 + worker]],
                                      capture_output=True, text=True).stdout.split()
                # A node goes at once: every process frozen first (none can see another die
                # and say so), then all killed. Killed one by one, a rank of that pod saw its
                # neighbour's exit and aborted the job, naming it, before its own kill came.
                for sig in (signal.SIGSTOP, signal.SIGKILL):
                    for pid in pids:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(int(pid), sig)
                killed = time.monotonic()
                lines.append(f"--- rehearsal: killed {len(pids)} processes of "
                             f"{view['pods'][1 + worker]}\n")
            if time.monotonic() > deadline:
                launcher.kill()
                break
        status = launcher.wait()
        lost_s = time.monotonic() - killed if killed is not None else float("nan")
        again = cluster.run(0, ["sh", str(ENTRYPOINT), *args], env=env, cwd=str(workdir),
                            capture_output=True, text=True, timeout=timeout)
    return status, "".join(lines), lost_s, again


def indexed_pods(docs: list[dict]) -> list[tuple[str, int, dict, str]]:
    """(pod name, completion index, container, subdomain) of every pod of the Indexed Jobs, as
    the Job controller names them (<job>-<index>)."""
    pods = []
    for job in (d for d in docs if d["kind"] == "Job"):
        pod = job["spec"]["template"]["spec"]
        for index in range(int(job["spec"].get("completions", 1))):
            pods.append((f"{job['metadata']['name']}-{index}", index, pod["containers"][0],
                         pod.get("subdomain", "")))
    return pods


def rehearse_jobs(docs: list[dict], workdir: pathlib.Path, timeout: float = 300,
                  dockerfile: pathlib.Path = dc.ROOT / "k8s" / "image" / "Dockerfile.cpu"):
    """Runs every pod of the Indexed Jobs at once, one namespace each (its host named and
    resolvable as <pod>.<subdomain>.<namespace>.svc), each with its container's args through the
    entrypoint, its env (a Secret's value: a fresh token) and JOB_COMPLETION_INDEX. Returns
    {pod: (exit status, output)}."""
    why = netsim.available()
    if why:
        raise RuntimeError(f"network namespaces: {why}")
    pods = indexed_pods(docs)
    namespace = next(d for d in docs if d["kind"] == "Job")["metadata"].get("namespace",
                                                                          "default")
    bin_dir = image_commands(workdir)
    token = secrets.token_hex(16)
    base = image_env(dockerfile, {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
                                  "HOME": str(workdir), "LANG": "C.UTF-8"})
    with netsim.Cluster(len(pods), names=[p[0] for p in pods],
                        domain=f"{pods[0][3]}.{namespace}.svc") as cluster:
        running = []
        for host, (name, index, container, _) in enumerate(pods):
            env = dict(base, JOB_COMPLETION_INDEX=str(index))
            env.update({e["name"]: e["value"] if "value" in e else token
                        for e in container.get("env", [])})
            args = on_this_machine(container.get("command", []) + container["args"], workdir)
            running.append((name, cluster.popen(host, ["sh", str(ENTRYPOINT), *args], env=env,
                                                cwd=str(workdir), stdout=subprocess.PIPE,
                                                stderr=subprocess.STDOUT, text=True)))
        done = {}
        for name, process in running:
            try:
                out, _ = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                out, _ = process.communicate()
            done[name] = (process.returncode, out)
    return done


def rehearse_trainjob(docs: list[dict], workdir: pathlib.Path, procs: int = 1,
                      timeout: float = 300,
                      dockerfile: pathlib.Path = dc.ROOT / "k8s" / "image" / "Dockerfile.gpu-efa"):
    """A TrainJob's nodes, one namespace each, their hosts named as JobSet names them
    (<trainjob>-node-0-<i>, resolvable as <pod>.<trainjob>), each running the trainer's command
    with the PET_* variables Trainer's torch plugin sets (PET_MASTER_ADDR the first node's name,
    port 29400) and PROCS processes per node instead of numProcPerNode. Returns {pod: (exit
    status, output)}."""
    why = netsim.available()
    if why:
        raise RuntimeError(f"network namespaces: {why}")
    job = next(d for d in docs if d["kind"] == "TrainJob")
    name, trainer = job["metadata"]["name"], job["spec"]["trainer"]
    nodes = int(trainer.get("numNodes", 1))
    pods = [f"{name}-node-0-{i}" for i in range(nodes)]
    bin_dir = image_commands(workdir)
    if not (bin_dir / "torchrun").exists():
        raise RuntimeError("no torchrun of torch 2 in .venv-torch2 (make build-torch2)")
    base = image_env(dockerfile, {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
                                  "HOME": str(workdir), "LANG": "C.UTF-8"})
    base.pop("OPAL_PREFIX", None)
    base.update({e["name"]: e["value"] for e in trainer.get("env", [])})
    base.update({"PET_NNODES": str(nodes), "PET_NPROC_PER_NODE": str(procs),
                 "PET_MASTER_ADDR": f"{pods[0]}.{name}", "PET_MASTER_PORT": "29400"})
    command = on_this_machine(trainer["command"] + trainer.get("args", []), workdir)
    with netsim.Cluster(nodes, names=pods, domain=name) as cluster:
        running = [(pod, cluster.popen(i, ["sh", str(ENTRYPOINT), *command],
                                       env=dict(base, PET_NODE_RANK=str(i)), cwd=str(workdir),
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True)) for i, pod in enumerate(pods)]
        done = {}
        for pod, process in running:
            try:
                out, _ = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                out, _ = process.communicate()
            done[pod] = (process.returncode, out)
    return done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--overlay", default="cpu",
                        choices=sorted(dc.OVERLAYS) + ["ps", "trainjob"],
                        help="ps: k8s/ps/'s Jobs; trainjob: k8s/trainjob/'s nodes, 1 process "
                        "each; gpu-efa: CPU tensors, 2 ranks per worker")
    parser.add_argument("--job", default="ddp-digits")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rehearsal-") as workdir:
        if args.overlay == "trainjob":
            done = rehearse_trainjob(dc.kustomize(dc.ROOT / "k8s" / "trainjob"),
                                     pathlib.Path(workdir))
            for name, (status, out) in done.items():
                sys.stdout.write(f"--- {name}: exit {status}\n{out}")
            return max(status for status, _ in done.values())
        if args.overlay == "ps":
            done = rehearse_jobs(dc.kustomize(dc.ROOT / "k8s" / "ps"), pathlib.Path(workdir))
            for name, (status, out) in done.items():
                sys.stdout.write(f"--- {name}: exit {status}\n{out}")
            return max(status for status, _ in done.values())
        job = find_job(args.overlay, args.job)
        if args.overlay == "gpu-efa":
            done = rehearse(scale_slots(job, 2), pathlib.Path(workdir),
                            dockerfile=dc.ROOT / "k8s" / "image" / "Dockerfile.gpu-efa")
        else:
            done = rehearse(job, pathlib.Path(workdir))
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
