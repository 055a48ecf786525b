#!/usr/bin/env python3
"""A rehearsal of an MPIJob on this machine, as close to a cluster as it gets: the overlay is
rendered, the launcher's command and environment are taken from it, one network namespace is made
per pod and named as the MPI operator names them (<job>-launcher, <job>-worker-<i>, each with that
host name and resolving the others as <pod>.<job>.<namespace>.svc, as the headless Service's DNS
does), the hostfile is written as the operator writes /etc/mpi/hostfile and given to Open MPI with
the operator's own variables, and the command runs in the launcher's namespace through the image's
entrypoint. Commands on the workers start with an sshd session's environment (PATH, HOME, LANG),
not the launcher's: what the ranks need must come through mpirun's -x, as on a cluster. What
differs from a cluster, and only this: Open MPI's remote shell is `ip netns exec` instead of ssh
(sshd itself is not rehearsed), the image's /opt/libddp is this checkout, and `python3` and
`ddp-bench` are this checkout's .venv and build.

    python3 tests/deploy/rehearsal.py [--overlay cpu] [--job ddp-digits]    (as root)
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import deploycheck as dc  # noqa: E402

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


def rehearse(job: dict, workdir: pathlib.Path, timeout: float = 600,
             dockerfile: pathlib.Path = dc.ROOT / "k8s" / "image" / "Dockerfile.cpu"):
    """Runs the job's launcher command; returns the CompletedProcess (text, output captured)."""
    why = netsim.available()
    if why:
        raise RuntimeError(f"network namespaces: {why}")
    view = operator_view(job)
    container = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    hostfile = workdir / "hostfile"
    hostfile.write_text(view["hostfile"])
    # The image's commands, from this checkout.
    bin_dir = workdir / "bin"
    bin_dir.mkdir(exist_ok=True)
    for command, target in (("python3", BUILT / ".venv" / "bin" / "python"),
                            ("ddp-bench", BUILT / "build" / "bin" / "ddp-bench")):
        if not target.exists():
            raise RuntimeError(f"{target} is missing: make build first")
        (bin_dir / command).write_text(f'#!/bin/sh\nexec {shlex.quote(str(target))} "$@"\n')
        (bin_dir / command).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir),
           "LANG": "C.UTF-8"}
    env.update(dc.image_env_values(dockerfile))  # the image's ENV
    env.update({e["name"]: e["value"] for e in container.get("env", [])})  # the pod's
    env.update(view["env"])  # the operator's
    env["OMPI_MCA_orte_default_hostfile"] = str(hostfile)  # /etc/mpi/hostfile in the pod
    env["OMPI_MCA_plm_rsh_agent"] = "{rsh}"  # ssh in the pod
    args = [a.replace(IMAGE_ROOT, f"{dc.ROOT}/") for a in container["args"]]
    with netsim.Cluster(len(view["pods"]), names=view["pods"], domain=view["domain"],
                        sshd_env=True) as cluster:
        env["OMPI_MCA_plm_rsh_agent"] = cluster.rsh
        return cluster.run(0, ["sh", str(ENTRYPOINT), *args], env=env, cwd=str(workdir),
                           capture_output=True, text=True, timeout=timeout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--overlay", default="cpu", choices=sorted(dc.OVERLAYS))
    parser.add_argument("--job", default="ddp-digits")
    args = parser.parse_args()
    job = find_job(args.overlay, args.job)
    with tempfile.TemporaryDirectory(prefix="rehearsal-") as workdir:
        done = rehearse(job, pathlib.Path(workdir))
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
