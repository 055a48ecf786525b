# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The cluster k8s/eks.py acts on: always the one terraform made (its outputs), through a
kubeconfig of its own in k8s/local/ (never the caller's current context, which may be another
cluster), checked to answer, and to have the kinds a step needs, before anything is changed."""
from __future__ import annotations

import time

from ops.outputs import Outputs
from ops.shell import DRY_RUN, LOCAL, Failure, last_line, probe, quote, sh, step

# The kinds that come from a controller, not Kubernetes itself: the API resource to look for
# and what installs it.
CONTROLLERS = {
    "MPIJob": ("mpijobs.kubeflow.org", "the MPI operator"),
    "TrainJob": ("trainjobs.trainer.kubeflow.org", "Kubeflow Trainer"),
    "ClusterTrainingRuntime": ("clustertrainingruntimes.trainer.kubeflow.org",
                               "Kubeflow Trainer"),
    "LocalQueue": ("localqueues.kueue.x-k8s.io", "Kueue"),
    "ClusterQueue": ("clusterqueues.kueue.x-k8s.io", "Kueue"),
    "ResourceFlavor": ("resourceflavors.kueue.x-k8s.io", "Kueue"),
    "NodePool": ("nodepools.karpenter.sh", "Karpenter"),
    "EC2NodeClass": ("ec2nodeclasses.karpenter.k8s.aws", "Karpenter"),
    "NodeClaim": ("nodeclaims.karpenter.sh", "Karpenter"),
}


def explain(cluster: str, error: str) -> str:
    """One line for why kubectl could not talk to the cluster, and what to do."""
    said = last_line(error) or "no answer"
    lowered = error.lower()
    if any(w in lowered for w in ("unauthorized", "provide credentials", "expired",
                                  "security token", "unable to locate credentials")):
        return (f"the cluster {cluster} did not accept these AWS credentials ({said}): refresh "
                "them (aws sso login, or aws configure) and run again")
    if any(w in lowered for w in ("no such host", "i/o timeout", "connection refused",
                                  "dial tcp", "unable to connect")):
        return (f"the cluster {cluster}'s API cannot be reached from here ({said}): is this "
                "machine's address in endpoint_public_cidrs (TF_VARS), and is the stack up?")
    return f"the cluster {cluster} did not answer kubectl: {said}"


class Kube:
    def __init__(self, outputs: Outputs):
        self.cluster, self.region = outputs["cluster_name"], outputs.region
        self.config = LOCAL / "kubeconfig"
        self.context = f"libddp-{self.cluster}"
        self._resources: set[str] | None = None

    def cmd(self, rest: str) -> str:
        """A kubectl command line for this cluster alone."""
        return f"{quote('kubectl', '--kubeconfig', self.config, '--context', self.context)} {rest}"

    def connect(self) -> None:
        """The kubeconfig written afresh from AWS (k8s/local/kubeconfig, context libddp-CLUSTER),
        and the cluster asked whether it answers."""
        with step(f"kubectl: the cluster {self.cluster} in {self.region} "
                  f"(its own kubeconfig, {self.config})"):
            LOCAL.mkdir(parents=True, exist_ok=True)
            update = quote("aws", "eks", "update-kubeconfig", "--region", self.region, "--name",
                           self.cluster, "--kubeconfig", self.config, "--alias", self.context)
            if DRY_RUN:
                sh(update)
                sh(self.cmd("get --raw /version"))
                return
            print(f"    $ {update}", flush=True)
            done = probe(update)
            if done.returncode != 0:
                why = last_line(done.stderr)
                if "ResourceNotFound" in done.stderr or "No cluster found" in done.stderr:
                    raise Failure(f"no EKS cluster {self.cluster} in {self.region} ({why}): is "
                                  "the stack up (make eks-up), in that region?")
                raise Failure(explain(self.cluster, done.stderr))
            done = probe(self.cmd("get --raw /version"))
            if done.returncode != 0:
                raise Failure(explain(self.cluster, done.stderr))

    def resources(self) -> set[str]:
        if self._resources is None:
            done = probe(self.cmd("api-resources -o name"))
            if done.returncode != 0:
                raise Failure(explain(self.cluster, done.stderr))
            self._resources = set(done.stdout.split())
        return self._resources

    def missing(self, kinds) -> dict[str, str]:
        """{kind: what installs it} for the KINDS this cluster does not serve (none in a dry
        run: nothing is asked)."""
        if DRY_RUN:
            return {}
        served = self.resources()
        return {kind: CONTROLLERS[kind][1] for kind in sorted(set(kinds))
                if kind in CONTROLLERS and CONTROLLERS[kind][0] not in served}

    def require(self, kinds, what: str) -> None:
        missing = self.missing(kinds)
        if missing:
            named = ", ".join(f"{kind} ({by})" for kind, by in missing.items())
            raise Failure(f"{what} needs kinds this cluster does not have: {named}; `make "
                          "eks-up` installs them (terraform/addons.tf)")

    def exists(self, rest: str) -> bool:
        """Whether `kubectl get REST` finds it (False in a dry run)."""
        return not DRY_RUN and probe(self.cmd(f"get {rest} -o name")).returncode == 0

    def names(self, rest: str) -> list[str]:
        """`kubectl get REST -o name`: the objects' names ([] in a dry run)."""
        if DRY_RUN:
            sh(self.cmd(f"get {rest} -o name"))
            return []
        done = probe(self.cmd(f"get {rest} -o name"))
        if done.returncode != 0:
            raise Failure(explain(self.cluster, done.stderr))
        return done.stdout.split()

    def apply(self, folder) -> None:
        """The folder checked by the API server first (admission, the CRDs' schemas: a dry
        run), then applied: a manifest the cluster refuses changes nothing."""
        sh(self.cmd(f"apply -k {quote(folder)} --dry-run=server"))
        sh(self.cmd(f"apply -k {quote(folder)}"))

    def wait(self, namespace: str, kind: str, name: str, timeout_s: int) -> str:
        """Polls a job's conditions until it succeeds or fails (a batch Job's Complete counts
        as Succeeded); says when its state changes (queued by Kueue, admitted, running)."""
        query = self.cmd(f"-n {namespace} get {kind} {name} -o jsonpath="
                         "'{range .status.conditions[?(@.status==\"True\")]}{.type} {end}'")
        if DRY_RUN:
            sh(query)
            return "Succeeded (dry run)"
        print(f"    $ {query}  (every 15 s)", flush=True)
        deadline, said = time.monotonic() + timeout_s, None
        while time.monotonic() < deadline:
            done = probe(query)
            if done.returncode != 0:
                raise Failure(f"{kind} {name}: {explain(self.cluster, done.stderr)}")
            states = ["Succeeded" if s == "Complete" else s for s in done.stdout.split()]
            for final in ("Succeeded", "Failed"):
                if final in states:
                    return final
            now = " ".join(states) or "waiting (queued: Kueue admits it when its pool has room)"
            if now != said:
                print(f"    {kind} {name}: {now}", flush=True)
                said = now
            time.sleep(15)
        raise Failure(f"{kind} {name} neither succeeded nor failed in {timeout_s} s (`kubectl -n "
                      f"{namespace} get workloads` says whether Kueue has admitted it)")
