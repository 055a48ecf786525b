#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Stand-ins for aws, docker, kubectl and terraform that behave as AWS, an ECR repository with
immutable tags, an EKS cluster's API server and terraform's state do in the ways k8s/eks.py
meets them, kept in one state file, so that tests can run `make eks-*` end to end offline and
look at what reached "AWS" and "the cluster", in which order.

    install(folder, state_dir, **state) -> writes FOLDER/{aws,docker,kubectl,terraform}
    Cloud(state_dir): .state (the JSON), .calls() (every command line, in order)

What is modelled, as the real services answer: ECR refuses to push a tag that exists
(IMMUTABLE); `aws ecr describe-images` fails with ImageNotFoundException for one that does not;
CodeBuild's build fails when its push is refused; the API server refuses a kind whose CRD is not
installed ("no matches for kind"), an apply that changes a Job's pod template ("field is
immutable"), and answers Unauthorized once the credentials have expired; deleting a Namespace
deletes what is in it, and a PersistentVolume whose claim went is Released; deleting Karpenter's
NodePools leaves their NodeClaims until they are waited for; terraform destroy fails with
DependencyViolation while Karpenter's nodes exist. kubectl kustomize and terraform fmt are the
real ones (FAKECLOUD_REAL_KUBECTL, FAKECLOUD_REAL_TERRAFORM)."""
from __future__ import annotations

import copy
import json
import os
import pathlib
import subprocess
import sys

import yaml

# Kinds served by a controller's CRD: its resource name (kubectl api-resources -o name).
CRD_KINDS = {"MPIJob": "mpijobs.kubeflow.org", "TrainJob": "trainjobs.trainer.kubeflow.org",
             "ClusterTrainingRuntime": "clustertrainingruntimes.trainer.kubeflow.org",
             "LocalQueue": "localqueues.kueue.x-k8s.io",
             "ClusterQueue": "clusterqueues.kueue.x-k8s.io",
             "ResourceFlavor": "resourceflavors.kueue.x-k8s.io",
             "NodePool": "nodepools.karpenter.sh",
             "EC2NodeClass": "ec2nodeclasses.karpenter.k8s.aws",
             "NodeClaim": "nodeclaims.karpenter.sh"}
ALIASES = {"mpijob": "MPIJob", "mpijobs": "MPIJob", "trainjob": "TrainJob", "job": "Job",
           "jobs": "Job", "pv": "PersistentVolume", "clusterqueue": "ClusterQueue",
           "nodepools.karpenter.sh": "NodePool", "nodeclaims.karpenter.sh": "NodeClaim",
           "ec2nodeclasses.karpenter.k8s.aws": "EC2NodeClass", "namespace": "Namespace",
           "workloads": "Workload"}
CLUSTER_SCOPED = {"Namespace", "PersistentVolume", "StorageClass", "ClusterQueue",
                  "ResourceFlavor", "NodePool", "EC2NodeClass", "NodeClaim",
                  "ClusterTrainingRuntime"}
DEFAULTS = {"credentials": "ok", "reachable": True, "region": "us-west-2", "cluster": "libddp",
            "regions": ["us-west-2", "us-east-1"], "buildx": True, "registry": [],
            "crds": sorted(set(CRD_KINDS) - {"NodePool", "EC2NodeClass", "NodeClaim"}),
            "objects": {}, "nodeclaims": [], "checkpoints": 0, "builds": {}, "stack": "none",
            "outcome": "Succeeded", "outputs": {}}


class Cloud:
    def __init__(self, folder):
        self.folder = pathlib.Path(folder)
        self.path = self.folder / "state.json"
        self.state = json.loads(self.path.read_text()) if self.path.exists() else {}

    def save(self) -> None:
        """Whole or not at all (a rename): the two ends of a pipe (aws ... | docker login) read
        the state at the same time."""
        temporary = self.path.with_suffix(f".{os.getpid()}")
        temporary.write_text(json.dumps(self.state, indent=1))
        temporary.rename(self.path)

    def log(self, kind: str, argv: list[str]) -> None:
        with open(self.folder / "calls.log", "a") as f:
            f.write(json.dumps([kind, *argv]) + "\n")

    def calls(self) -> list[list[str]]:
        path = self.folder / "calls.log"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() \
            else []

    def cloud_calls(self) -> list[list[str]]:
        """The calls that reached AWS or the cluster (not kustomize, fmt or buildx's version)."""
        return [c[1:] for c in self.calls() if c[0] == "cloud"]


def install(folder, state_dir, **state) -> pathlib.Path:
    folder, state_dir = pathlib.Path(folder), pathlib.Path(state_dir)
    folder.mkdir(parents=True, exist_ok=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    cloud = Cloud(state_dir)
    cloud.state = {**copy.deepcopy(DEFAULTS), **state}
    cloud.save()
    real = {name: subprocess.run(["which", name], capture_output=True, text=True).stdout.strip()
            for name in ("kubectl", "terraform")}
    for name in ("aws", "docker", "kubectl", "terraform"):
        script = folder / name
        script.write_text(f"#!/bin/sh\nFAKECLOUD_STATE={state_dir} FAKECLOUD_TOOL={name} "
                          f"FAKECLOUD_REAL_KUBECTL={real['kubectl']} "
                          f"FAKECLOUD_REAL_TERRAFORM={real['terraform']} "
                          f'exec {sys.executable} {pathlib.Path(__file__).resolve()} "$@"\n')
        script.chmod(0o755)
    return folder


def fail(message: str, status: int = 1):
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.exit(status)


def option(argv: list[str], *names: str, default=None):
    for i, word in enumerate(argv):
        for name in names:
            if word == name and i + 1 < len(argv):
                return argv[i + 1]
            if word.startswith(name + "="):
                return word.split("=", 1)[1]
    return default


def positional(argv: list[str], valued=("--region", "--query", "--output")) -> list[str]:
    return [a for i, a in enumerate(argv) if not a.startswith("-") and not (
        i > 0 and argv[i - 1] in valued)]


# AWS ------------------------------------------------------------------------------------------

def aws(cloud: Cloud, argv: list[str]) -> None:
    state, region = cloud.state, option(argv, "--region")
    service, verb = (argv + ["", ""])[:2]
    if region and region not in state["regions"]:
        fail(f"\nCould not connect to the endpoint URL: \"https://{service}.{region}"
             ".amazonaws.com/\"", 255)
    if state["credentials"] != "ok":
        fail(f"\nAn error occurred (ExpiredToken) when calling the {verb} operation: The security "
             "token included in the request is expired", 254)
    if (service, verb) == ("sts", "get-caller-identity"):
        print("arn:aws:iam::123456789012:user/tester")
    elif (service, verb) == ("ec2", "describe-regions"):
        name = option(argv, "--region-names")
        if name not in state["regions"]:
            fail("\nAn error occurred (InvalidParameterValue) when calling the DescribeRegions "
                 f"operation: Invalid region names: [{name}]", 254)
        print("opt-in-not-required")
    elif (service, verb) == ("ecr", "get-login-password"):
        print("token")
    elif (service, verb) == ("ecr", "describe-images"):
        tag = option(argv, "--image-ids").split("=", 1)[1]
        if tag not in state["registry"]:
            fail("\nAn error occurred (ImageNotFoundException) when calling the DescribeImages "
                 f"operation: The image with imageId {{imageTag:'{tag}'}} does not exist within "
                 f"the repository with name '{option(argv, '--repository-name')}'", 254)
        print(tag)
    elif (service, verb) == ("eks", "update-kubeconfig"):
        if option(argv, "--name") != state["cluster"] or region != state["region"] or \
                state["stack"] != "up":
            fail("\nAn error occurred (ResourceNotFoundException) when calling the "
                 f"DescribeCluster operation: No cluster found for name: {option(argv, '--name')}.",
                 254)
        path, alias = pathlib.Path(option(argv, "--kubeconfig")), option(argv, "--alias")
        path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config",
                                        "current-context": alias, "contexts": [{"name": alias}]}))
        print(f"Added new context {alias} to {path}")
    elif (service, verb) == ("s3", "ls"):
        if state["checkpoints"] == 0:
            sys.exit(1)
        for i in range(state["checkpoints"]):
            print(f"2026-12-06 10:00:00    1048576 checkpoints/run{i}.pt")
        print(f"\nTotal Objects: {state['checkpoints']}\n   Total Size: 1048576")
    elif (service, verb) == ("s3", "sync") and not positional(argv)[-1].startswith("s3://"):
        target = pathlib.Path(positional(argv)[-1])
        target.mkdir(parents=True, exist_ok=True)
        for i in range(state["checkpoints"]):
            (target / f"run{i}.pt").write_bytes(b"checkpoint")
    elif (service, verb) == ("codebuild", "start-build"):
        overrides = argv[argv.index("--environment-variables-override") + 1:]
        tag = next(w.split("value=", 1)[1] for w in overrides if w.startswith("name=TAG,"))
        build = f"libddp-images:{len(state['builds']) + 1}"
        state["builds"][build] = "FAILED" if tag in state["registry"] else "SUCCEEDED"
        if tag not in state["registry"]:
            state["registry"].append(tag)
        print(build)
    elif (service, verb) == ("codebuild", "batch-get-builds"):
        print(state["builds"][option(argv, "--ids")])


def docker(cloud: Cloud, argv: list[str]) -> None:
    state = cloud.state
    if argv[:2] == ["buildx", "version"]:
        if not state["buildx"]:
            fail("docker: 'buildx' is not a docker command.")
        print("github.com/docker/buildx v0.29.1")
    elif argv[:1] == ["login"]:
        sys.stdin.read()
        print("Login Succeeded")
    elif argv[:2] == ["buildx", "build"]:
        ref = option(argv, "-t")
        tag = ref.rpartition(":")[2]
        if tag in state["registry"]:
            fail(f"ERROR: failed to push {ref}: tag invalid: The image tag '{tag}' already "
                 "exists in the 'libddp' repository and cannot be overwritten because the "
                 "repository is immutable.")
        state["registry"].append(tag)


# Kubernetes -----------------------------------------------------------------------------------

def real_kubectl(argv: list[str]) -> None:
    os.execv(os.environ["FAKECLOUD_REAL_KUBECTL"],
             ["kubectl", *[a for a in argv if a not in ("--kubeconfig", "--context")]])


def render(folder: str) -> list[dict]:
    done = subprocess.run([os.environ["FAKECLOUD_REAL_KUBECTL"], "kustomize", folder],
                          capture_output=True, text=True)
    if done.returncode != 0:
        fail(done.stderr)
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def key(doc: dict, namespace: str | None = None) -> str:
    kind = doc["kind"]
    ns = "" if kind in CLUSTER_SCOPED else (doc["metadata"].get("namespace") or namespace or
                                            "default")
    return f"{kind}/{ns}/{doc['metadata']['name']}"


def kube_apply(cloud: Cloud, docs: list[dict], source: str, dry_run: bool, namespace=None):
    objects = cloud.state["objects"]
    for doc in docs:
        kind = doc["kind"]
        if kind in CRD_KINDS and kind not in cloud.state["crds"]:
            fail(f'error: resource mapping not found for name: "{doc["metadata"]["name"]}" '
                 f'namespace: "{doc["metadata"].get("namespace", "")}" from "{source}": no '
                 f'matches for kind "{kind}" in version "{doc["apiVersion"]}"\n'
                 "ensure CRDs are installed first")
        old = objects.get(key(doc, namespace))
        if kind == "Job" and old and old["spec"].get("template") != doc["spec"].get("template"):
            fail(f'The Job "{doc["metadata"]["name"]}" is invalid: spec.template: Invalid value: '
                 '...: field is immutable')
    if not dry_run:
        for doc in docs:
            old = objects.get(key(doc, namespace), {})
            objects[key(doc, namespace)] = dict(doc, phase=old.get("phase", "Available"))
            if doc["kind"] == "PersistentVolumeClaim":
                claim = objects[key(doc, namespace)]
                pv = objects.get(f"PersistentVolume//{doc['spec'].get('volumeName')}")
                if pv is None or pv["phase"] == "Released":  # claimed by a claim that is gone
                    claim["phase"] = "Pending"
                else:
                    claim["phase"] = pv["phase"] = "Bound"
    for doc in docs:
        print(f"{doc['kind'].lower()}/{doc['metadata']['name']} "
              f"{'configured (server dry run)' if dry_run else 'configured'}")


def kube_delete(cloud: Cloud, docs: list[dict], source: str, namespace=None):
    objects = cloud.state["objects"]
    for doc in docs:
        if doc["kind"] in CRD_KINDS and doc["kind"] not in cloud.state["crds"]:
            fail(f'error: resource mapping not found for name: "{doc["metadata"]["name"]}" '
                 f'from "{source}": no matches for kind "{doc["kind"]}" in version '
                 f'"{doc["apiVersion"]}"\nensure CRDs are installed first')
    for doc in docs:
        gone = objects.pop(key(doc, namespace), None)
        if gone and doc["kind"] == "Namespace":
            for k in [k for k in objects if k.split("/")[1] == doc["metadata"]["name"]]:
                if k.startswith("PersistentVolumeClaim/"):
                    release(objects, k.split("/")[2])
                del objects[k]
        if gone and doc["kind"] == "PersistentVolumeClaim":
            release(objects, doc["metadata"]["name"])
        if gone and doc["kind"] == "NodePool":
            cloud.state["nodepools_deleted"] = True
        if gone:
            print(f"{doc['kind'].lower()} \"{doc['metadata']['name']}\" deleted")


def release(objects: dict, claim: str) -> None:
    """A claim is gone: its bound volume (Retain) is Released, still naming it."""
    for k, pv in objects.items():
        if k.startswith("PersistentVolume/") and pv.get("phase") == "Bound" and \
                k.split("/")[2] == claim:
            pv["phase"] = "Released"


def kind_of(word: str) -> str:
    return ALIASES.get(word.lower(), word)


def kubectl(cloud: Cloud, argv: list[str]) -> None:
    state = cloud.state
    config = option(argv, "--kubeconfig")
    if not config or not pathlib.Path(config).exists():
        fail("error: the kubeconfig is missing (the fake wants --kubeconfig on every call)")
    if not state["reachable"]:
        fail("Unable to connect to the server: dial tcp: lookup ABCD.gr7.us-west-2.eks."
             "amazonaws.com: no such host")
    if state["credentials"] != "ok":
        fail("error: You must be logged in to the server (Unauthorized)")
    namespace = option(argv, "-n", "--namespace")
    words = [a for i, a in enumerate(argv) if not a.startswith("-") and not (
        i > 0 and argv[i - 1] in ("--kubeconfig", "--context", "-n", "--namespace", "-o", "-k",
                                  "-f", "-p", "--type", "-l", "-L", "--raw"))]
    verb, rest = words[0], words[1:]
    objects = state["objects"]
    if verb == "get" and option(argv, "--raw"):
        print('{"major": "1", "minor": "35"}')
    elif verb == "api-resources":
        print("\n".join(["pods", "jobs.batch", "namespaces", "persistentvolumes"] +
                        [CRD_KINDS[k] for k in state["crds"]]))
    elif verb == "apply":
        source = option(argv, "-k") or option(argv, "-f")
        docs = render(source) if option(argv, "-k") else \
            [d for d in yaml.safe_load_all(sys.stdin.read()) if d]
        kube_apply(cloud, docs, source, option(argv, "--dry-run") == "server", namespace)
    elif verb == "create":  # namespace / secret, always --dry-run=client -o yaml here
        if rest[0] == "namespace":
            print(yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": rest[1]}}))
        else:
            print(yaml.safe_dump({"apiVersion": "v1", "kind": "Secret", "metadata": {
                "name": rest[2], "namespace": namespace}, "data": {"token": "eA=="}}))
    elif verb == "delete" and (option(argv, "-f") or option(argv, "-k")):
        source = option(argv, "-f") or option(argv, "-k")
        docs = render(source) if option(argv, "-k") else \
            [d for d in yaml.safe_load_all(pathlib.Path(source).read_text()) if d]
        kube_delete(cloud, docs, source, namespace)
    elif verb == "delete":
        kind = kind_of(rest[0])
        if kind in CRD_KINDS and kind not in state["crds"]:
            fail(f'error: the server doesn\'t have a resource type "{rest[0]}"')
        names = rest[1:] if "--all" not in argv else [
            k.split("/")[2] for k in objects if k.startswith(f"{kind}/")]
        docs = [{"kind": kind, "apiVersion": "v1", "metadata": {"name": n, "namespace": namespace}}
                for n in names]
        kube_delete(cloud, docs, rest[0], namespace)
    elif verb == "wait" and "--for=delete" in argv:
        state["nodeclaims"] = [] if state.get("nodepools_deleted") else state["nodeclaims"]
    elif verb == "wait":
        print("condition met")
    elif verb == "get" and kind_of(rest[0]) == "NodeClaim":
        print("\n".join(f"nodeclaim.karpenter.sh/{n}" for n in state["nodeclaims"]))
    elif verb == "get" and rest[0] == "pv":
        pv = objects.get(f"PersistentVolume//{rest[1]}")
        if pv is None:
            fail(f'Error from server (NotFound): persistentvolumes "{rest[1]}" not found')
        print(pv["phase"], end="")
    elif verb == "get" and rest[0] == "nodes":
        print("NAME  STATUS  POOL\nip-10-0-0-1  Ready  system")
    elif verb == "get":
        kind = kind_of(rest[0])
        found = [k for k in objects if k.startswith(f"{kind}/") and (
            len(rest) < 2 or k.split("/")[2] == rest[1]) and (
            kind in CLUSTER_SCOPED or k.split("/")[1] == (namespace or "default"))]
        if not found:
            fail(f'Error from server (NotFound): {rest[0]} "{rest[1] if len(rest) > 1 else ""}" '
                 "not found")
        if "jsonpath" in (option(argv, "-o") or ""):
            print(("Complete " if kind == "Job" and state["outcome"] == "Succeeded"
                   else f"{state['outcome']} "), end="")
        else:
            print("\n".join(f"{kind.lower()}/{k.split('/')[2]}" for k in found))
    elif verb == "patch" and rest[:2] == ["pv", "fsx"]:
        objects["PersistentVolume//fsx"]["phase"] = "Available"
    elif verb == "logs":
        print("[1,0]<stdout>:final test accuracy 97.50% after 20 epochs in 41.0 s\n"
              "ddp-efa-check: OK: NCCL used EFA on all 16 ranks\nmodel check: test accuracy "
              "97.50% on 359 held-out images")


def terraform(cloud: Cloud, argv: list[str]) -> None:
    state = cloud.state
    verb = next((a for a in argv if not a.startswith("-")), "")
    if verb == "apply":
        state["stack"] = "up"
    elif verb == "output":
        print(json.dumps(state["outputs"]))
    elif verb == "destroy":
        if state["nodeclaims"]:
            fail("Error: deleting EC2 VPC (vpc-0a1b2c3d): operation error EC2: DeleteVpc, "
                 "api error DependencyViolation: The vpc 'vpc-0a1b2c3d' has dependencies and "
                 "cannot be deleted.")
        state["stack"] = "destroyed"


def main(argv: list[str]) -> None:
    tool = os.environ["FAKECLOUD_TOOL"]
    cloud = Cloud(os.environ["FAKECLOUD_STATE"])
    offline = (tool == "kubectl" and argv[:1] == ["kustomize"]) or \
        (tool == "terraform" and argv[:1] == ["fmt"]) or \
        (tool == "docker" and argv[:2] == ["buildx", "version"])
    cloud.log("offline" if offline else "cloud", [tool, *argv])
    if tool == "kubectl" and argv[:1] == ["kustomize"]:
        real_kubectl(argv)
    if tool == "terraform" and argv[:1] == ["fmt"]:
        os.execv(os.environ["FAKECLOUD_REAL_TERRAFORM"], ["terraform", *argv])
    try:
        {"aws": aws, "docker": docker, "kubectl": kubectl, "terraform": terraform}[tool](
            cloud, argv)
    finally:
        cloud.save()


if __name__ == "__main__":
    main(sys.argv[1:])
