# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""k8s/eks.py (make eks-up / eks-run / eks-stage-data / eks-down) run end to end against
fakecloud.py's AWS, ECR and cluster (what they answer, and refuse, as the real ones do), and in
DRY_RUN=1 from a bare copy of the repository with nothing beside it: the offline steps run, the
cloud commands are printed and none is run, every step says how long it took, and nothing
lands outside the git-ignored local folder."""
import json
import os
import shutil
import subprocess
import sys

import pytest

import deploycheck as dc
import fakecloud

sys.path.insert(0, str(dc.ROOT / "k8s"))
from ops import jobs
from ops.outputs import PLACEHOLDERS

EKS = dc.ROOT / "k8s" / "eks.py"
LOGS = dc.ROOT / "tests" / "deploy" / "logs"
CIDRS = 'TF_VARS=-var endpoint_public_cidrs=["203.0.113.7/32"]'


def outputs(karpenter=False, codebuild=True):
    values = json.loads(json.dumps(PLACEHOLDERS))
    values["image_repository"]["value"] = "123456789012.dkr.ecr.us-west-2.amazonaws.com/libddp"
    values["karpenter_node_role"] = {"value": "libddp-karpenter-node" if karpenter else None}
    if not codebuild:
        del values["codebuild_project"]
    return values


class Fake:
    """The fake cloud in TMP, and k8s/eks.py (of ROOT) run against it."""

    def __init__(self, tmp, root=dc.ROOT, **state):
        for tool in ("kubectl", "terraform"):
            if shutil.which(tool) is None:
                pytest.skip(f"{tool} is not installed here")
        self.tmp, self.root = tmp, root
        self.bin = fakecloud.install(tmp / "bin", tmp / "state", **{"outputs": outputs(),
                                                                     **state})
        self.local = tmp / "local"

    @property
    def cloud(self):
        return fakecloud.Cloud(self.tmp / "state")

    def env(self, **extra):
        env = {k: v for k, v in os.environ.items() if k not in ("DRY_RUN", "DDP_SHARED")}
        return {**env, "PATH": f"{self.bin}:{os.environ['PATH']}",
                "EKS_LOCAL": str(self.local), "EKS_POLL_SECONDS": "0", **extra}

    def eks(self, *args, **extra):
        return subprocess.run([sys.executable, str(self.root / "k8s" / "eks.py"), *args],
                              env=self.env(**extra), capture_output=True, text=True,
                              timeout=300, cwd=self.root)

    def ok(self, *args, **extra):
        done = self.eks(*args, **extra)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def kubectl(self, *args):
        """A user's own kubectl call against the fake cluster."""
        return subprocess.run(["kubectl", "--kubeconfig", str(self.local / "kubeconfig"),
                               *args], env=self.env(), capture_output=True, text=True)

    def mutations(self, since=0):
        """The calls since call SINCE that changed AWS or the cluster."""
        changing = ("apply", "delete", "patch", "destroy", "build", "push", "start-build",
                    "cp", "sync", "create")
        return [c for c in self.cloud.cloud_calls()[since:]
                if any(w in changing for w in c[1:3]) and "--dry-run=server" not in c]


@pytest.fixture
def clone(tmp_path):
    """A copy of the working tree (what git tracks and does not ignore) as a repository of its
    own with one commit, and nothing beside it: no ../shared, no build, no venvs."""
    files = subprocess.run(["git", "-C", str(dc.ROOT), "ls-files", "-co", "--exclude-standard"],
                           capture_output=True, text=True, check=True).stdout.split("\n")
    root = tmp_path / "clone" / "libddp"
    for name in filter(None, files):
        if (dc.ROOT / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(dc.ROOT / name, root / name)
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "clone"], check=True)
    assert not (root.parent / "shared").exists()
    return root


def commit(root, path="libddp/NOTE", text="a change"):
    (root / path).write_text(text)
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(git + ["add", path], check=True)
    subprocess.run(git + ["commit", "-qm", text], check=True)


def test_a_bare_clone_runs_every_target_in_a_dry_run(clone, tmp_path):
    """`make eks-run` and `eks-stage-data` (and up, down) from a clone with nothing beside it
    and no build: the MPIJob, Trainer and Karpenter schemas are not there, which is said, and
    the rest is checked; no cloud command runs. (The CRD schemas read from ../shared made this
    a FileNotFoundError traceback; eks-stage-data needed .venv from `make build`.)"""
    fake = Fake(tmp_path)
    venv = dc.ROOT / ".venv-deploy"
    if not (venv / ".ok").exists():
        pytest.skip("no .venv-deploy here (make deploy-venv)")
    make = ["make", "--no-print-directory", "-C", str(clone), f"DEPLOY_VENV={venv}",
            "-o", f"{venv}/.ok"]
    env = fake.env(DRY_RUN="1")
    for target in (["eks-up", CIDRS], ["eks-run", "JOB=ddp-digits"],
                   ["eks-run", "JOB=ddp-torch-digits"], ["eks-stage-data"], ["eks-down"]):
        done = subprocess.run(make + target, env=env, capture_output=True, text=True,
                              timeout=300)
        out = done.stdout + done.stderr
        assert done.returncode == 0, out
        assert "Traceback" not in out, out
        if target[0] == "eks-run":
            schema = "trainjob" if "torch" in target[1] else "mpijob"
            assert f"not checked here: {schema}-kubeflow-v" in out, out
            assert "\nno problems\n" in out, out
    assert (fake.local / "data" / "digits" / "digits.npz").stat().st_size > 0
    assert fake.cloud.cloud_calls() == []
    assert subprocess.run(["git", "-C", str(clone), "status", "--porcelain"],
                          capture_output=True, text=True).stdout == ""


def test_a_dry_run_prints_the_cloud_commands(tmp_path):
    fake = Fake(tmp_path)
    before = subprocess.run(["git", "-C", str(dc.ROOT), "status", "--porcelain"],
                            capture_output=True, text=True).stdout
    out = fake.ok("run", "JOB=ddp-bench", "OVERLAY=gpu-efa", DRY_RUN="1", IMAGE_BUILDER="docker")
    kubectl = f"kubectl --kubeconfig {fake.local}/kubeconfig --context libddp-libddp"
    assert "would run: docker buildx build --platform linux/amd64 -f " \
           "k8s/image/Dockerfile.gpu-efa -t REGISTRY/libddp:gpu-efa-" in out, out
    assert f"would run: {kubectl} apply -k {fake.local}/gpu-efa --dry-run=server" in out
    assert f"would run: {kubectl} -n libddp-gpu logs job/ddp-bench-launcher" in out
    assert "\nno problems\n" in out  # deploycheck --render ran on the local overlay
    starts = [line for line in out.splitlines() if line.startswith("==> ")]
    ends = [line for line in out.splitlines() if line.startswith("<== ")]
    assert len(starts) == len(ends) >= 5 and all(line.endswith(" s") for line in ends)
    rendered = dc.kustomize(fake.local / "gpu-efa")
    assert [d["metadata"]["name"] for d in rendered if d["kind"] in ("MPIJob", "Job")] == \
        ["ddp-bench"]  # the model check goes with ddp-digits alone
    out = fake.ok("run", "JOB=ddp-digits", "OVERLAY=cpu", DRY_RUN="1", IMAGE_BUILDER="codebuild")
    assert "would run: aws codebuild start-build --region us-west-2 --project-name " \
           "libddp-images" in out and "name=FLAVOUR,value=cpu name=TAG,value=cpu-" in out
    assert (fake.local / "source.zip").stat().st_size > 0
    out = fake.ok("run", "JOB=ddp-torch-digits", DRY_RUN="1", IMAGE_BUILDER="docker")
    trainjob = next(d for d in dc.kustomize(fake.local / "trainjob") if d["kind"] == "TrainJob")
    assert trainjob["metadata"]["namespace"] == "libddp-trainjob"
    assert trainjob["spec"]["trainer"]["image"].startswith("REGISTRY/libddp:gpu-efa-")
    assert trainjob["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "libddp"
    assert fake.cloud.cloud_calls() == []
    assert subprocess.run(["git", "-C", str(dc.ROOT), "status", "--porcelain"],
                          capture_output=True, text=True).stdout == before


@pytest.mark.parametrize("builder", ["docker", "codebuild"])
def test_the_second_run_of_a_commit_uses_the_image_it_pushed(tmp_path, clone, builder):
    """ECR's tags are immutable: the README's ddp-digits then ddp-bench pushed the same tag
    twice, and the second push was refused. Now the second run finds the tag and builds
    nothing; a new commit gets a new tag."""
    fake = Fake(tmp_path, root=clone)
    fake.ok("up", CIDRS)
    fake.ok("run", "JOB=ddp-digits", "OVERLAY=cpu", IMAGE_BUILDER=builder)
    first = list(fake.cloud.state["registry"])
    assert len(first) == 1 and first[0].startswith("cpu-")
    out = fake.ok("run", "JOB=ddp-bench", "OVERLAY=cpu", IMAGE_BUILDER=builder)
    assert "is in the repository already: used as it is" in out, out
    assert fake.cloud.state["registry"] == first
    commit(clone)
    fake.ok("run", "JOB=ddp-bench", "OVERLAY=cpu", IMAGE_BUILDER=builder)
    assert len(fake.cloud.state["registry"]) == 2
    # The fake refuses what ECR refuses: the same tag pushed again.
    again = subprocess.run(["docker", "buildx", "build", "-t", f"r/libddp:{first[0]}", "--push",
                            "."], env=fake.env(), capture_output=True, text=True)
    assert again.returncode == 1 and "cannot be overwritten" in again.stderr


def test_a_dirty_tree_gets_its_own_tag(tmp_path, clone):
    fake = Fake(tmp_path, root=clone)
    fake.ok("up", CIDRS)
    fake.ok("run", "JOB=ddp-bench", "OVERLAY=cpu", IMAGE_BUILDER="docker")
    (clone / "libddp" / "NOTE").write_text("not committed")
    out = fake.ok("run", "JOB=ddp-bench", "OVERLAY=cpu", IMAGE_BUILDER="docker")
    tags = fake.cloud.state["registry"]
    assert len(tags) == 2 and "-dirty-" in tags[1] and tags[1].startswith(tags[0]), tags
    (clone / "docs").mkdir(exist_ok=True)
    (clone / "docs" / "NOTE").write_text("not an input of the image")
    fake.ok("run", "JOB=ddp-bench", "OVERLAY=cpu", IMAGE_BUILDER="docker")
    assert len(fake.cloud.state["registry"]) == 2, out


def test_a_new_commit_does_not_reapply_the_model_check(tmp_path, clone):
    """The model check is a Job, whose pod template is immutable: applied again with a new
    commit's image (as every gpu-efa run did) the API server refused it. Now it goes with
    ddp-digits alone, deleted first."""
    fake = Fake(tmp_path, root=clone)
    fake.ok("up", CIDRS)
    fake.ok("run", "JOB=ddp-digits", IMAGE_BUILDER="docker")
    assert "Job/libddp-gpu/ddp-model-check" in fake.cloud.state["objects"]
    commit(clone)
    fake.ok("run", "JOB=ddp-bench", IMAGE_BUILDER="docker")
    fake.ok("run", "JOB=ddp-digits", IMAGE_BUILDER="docker")
    # The fake's API server refuses what the real one refuses.
    job = next(d for d in dc.kustomize(fake.local / "gpu-efa") if d["kind"] == "Job")
    job["spec"]["template"]["spec"]["containers"][0]["image"] = "other:tag"
    changed = subprocess.run(["kubectl", "--kubeconfig", str(fake.local / "kubeconfig"), "apply",
                              "-f", "-"], input=json.dumps(job), env=fake.env(),
                             capture_output=True, text=True)
    assert changed.returncode == 1 and "field is immutable" in changed.stderr


def test_the_fsx_claim_binds_again_after_its_namespace_went(tmp_path, clone):
    """The FSx volume is kept (Retain) when its claim goes, and stays Released, naming the old
    claim: the next run's claim could not bind it. eks.py frees it first; the data stay."""
    fake = Fake(tmp_path, root=clone)
    fake.ok("up", CIDRS)
    fake.ok("run", "JOB=ddp-bench", IMAGE_BUILDER="docker")
    assert fake.kubectl("delete", "namespace", "libddp-gpu").returncode == 0
    assert fake.cloud.state["objects"]["PersistentVolume//fsx"]["phase"] == "Released"
    fake.ok("run", "JOB=ddp-bench", IMAGE_BUILDER="docker")
    assert fake.cloud.state["objects"]["PersistentVolumeClaim/libddp-gpu/fsx"]["phase"] == \
        "Bound"


def test_jobs_go_into_their_own_namespaces(tmp_path, clone):
    """Deleting one overlay (its namespace with it) leaves the others' jobs."""
    fake = Fake(tmp_path, root=clone)
    fake.ok("up", CIDRS)
    fake.ok("run", "JOB=ddp-bench", IMAGE_BUILDER="docker")
    fake.ok("run", "JOB=ddp-bench", "OVERLAY=cpu", IMAGE_BUILDER="docker")
    fake.ok("run", "JOB=ddp-ps", IMAGE_BUILDER="docker")
    objects = fake.cloud.state["objects"]
    assert {"MPIJob/libddp-gpu/ddp-bench", "MPIJob/libddp-cpu/ddp-bench",
            "Job/libddp-ps/ddp-ps", "Secret/libddp-ps/ddp-ps-token"} <= set(objects)
    assert fake.kubectl("delete", "-k", str(fake.local / "cpu")).returncode == 0
    objects = fake.cloud.state["objects"]
    assert "MPIJob/libddp-gpu/ddp-bench" in objects and "Job/libddp-ps/ddp-ps" in objects
    assert "MPIJob/libddp-cpu/ddp-bench" not in objects


def test_every_cluster_call_goes_to_the_stacks_cluster(tmp_path, clone):
    """`run` and `down` acted on the current kube context, whichever cluster that was. Now
    every kubectl call names the kubeconfig eks.py writes for terraform's cluster."""
    fake = Fake(tmp_path, root=clone)
    fake.ok("up", CIDRS)
    fake.ok("run", "JOB=all", "OVERLAY=cpu", IMAGE_BUILDER="docker",
            KUBECONFIG=str(tmp_path / "someone-elses"))
    fake.ok("down", KUBECONFIG=str(tmp_path / "someone-elses"))
    calls = [c for c in fake.cloud.cloud_calls() if c[0] == "kubectl"]
    assert calls and all(c[1:5] == ["--kubeconfig", str(fake.local / "kubeconfig"),
                                    "--context", "libddp-libddp"] for c in calls), calls


def test_down_takes_karpenters_nodes_first_and_keeps_checkpoints(tmp_path, clone):
    """terraform destroy failed on DependencyViolation while Karpenter's nodes ran (and they
    billed): the NodePools are now deleted and their nodes waited for first. A kind whose CRD is
    absent (a TrainJob with Trainer not installed) no longer stops the teardown. Exported
    checkpoints are not deleted unless saved or let go."""
    crds = [k for k in fakecloud.CRD_KINDS if k not in ("TrainJob", "ClusterTrainingRuntime")]
    fake = Fake(tmp_path, root=clone, outputs=outputs(karpenter=True), crds=crds,
                nodeclaims=["gpu-efa-x1", "cpu-y2"], checkpoints=2)
    fake.ok("up", CIDRS, "karpenter=true")
    assert "NodePool//gpu-efa" in fake.cloud.state["objects"]
    fake.ok("run", "JOB=ddp-bench", IMAGE_BUILDER="docker")
    fake.ok("run", "JOB=ddp-torch-digits", DRY_RUN="1")  # a local trainjob overlay, not applied
    before = len(fake.cloud.cloud_calls())
    done = fake.eks("down")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "holds 2 object(s)" in done.stderr and "Nothing was deleted" in done.stderr
    assert fake.mutations(before) == []
    out = fake.ok("down", f"SAVE_CHECKPOINTS={tmp_path / 'saved'}")
    assert sorted(p.name for p in (tmp_path / "saved").iterdir()) == ["run0.pt", "run1.pt"]
    assert "TrainJob: not a kind of this cluster (Kubeflow Trainer is not installed)" in out
    order = [" ".join(c) for c in fake.cloud.cloud_calls()[before:]]
    where = {what: next(i for i, c in enumerate(order) if what in c) for what in (
        "delete nodepools.karpenter.sh", "wait --for=delete nodeclaims.karpenter.sh",
        "delete ec2nodeclasses.karpenter.k8s.aws", "terraform -chdir=terraform destroy")}
    assert list(where) == sorted(where, key=where.get), order
    assert fake.cloud.state["stack"] == "destroyed" and fake.cloud.state["nodeclaims"] == []
    # What the old teardown did (destroy with Karpenter's nodes up) fails in the fake as on AWS.
    fake = Fake(tmp_path / "old", outputs=outputs(karpenter=True), nodeclaims=["gpu-efa-x1"])
    done = subprocess.run(["terraform", "destroy"], env=fake.env(), capture_output=True,
                          text=True)
    assert done.returncode == 1 and "DependencyViolation" in done.stderr


@pytest.mark.parametrize("state, args, env, said", [
    ({}, ["run", "JOB=ddp-mnist"], {}, "JOB=ddp-mnist: no such job; one of all, ddp-bench"),
    ({}, ["run", "JOB=ddp-digits", "OVERLAY=gcp"], {}, "OVERLAY=gcp: no such overlay"),
    ({}, ["run", "JOB=ddp-ps", "OVERLAY=cpu"], {}, "ddp-ps runs with OVERLAY=ps"),
    ({}, ["run", "JOB=ddp-digits", "TIMEOUT=soon"], {}, "TIMEOUT=soon: a whole number"),
    ({}, ["up"], {}, "say who may reach the cluster's API"),
    ({}, ["up", CIDRS, "REGION=mars-1"], {}, "REGION=mars-1: not an AWS region name"),
    ({}, ["up", CIDRS, "REGION=us-west-9"], {}, "region us-west-9: not one this account can use"),
    ({"credentials": "expired"}, ["up", CIDRS], {}, "AWS refused these credentials"),
    ({"credentials": "expired", "stack": "up"}, ["run", "JOB=ddp-digits"], {},
     "did not accept these AWS credentials"),
    ({"reachable": False, "stack": "up"}, ["run", "JOB=ddp-digits"], {},
     "API cannot be reached from here"),
    ({"stack": "up", "buildx": False, "outputs": outputs(codebuild=False)},
     ["run", "JOB=ddp-digits"], {}, "no way to build the image"),
    ({"stack": "up", "crds": ["MPIJob"]}, ["run", "JOB=ddp-torch-digits"], {},
     "TrainJob (Kubeflow Trainer)"),
    ({"stack": "up"}, ["run", "JOB=ddp-digits"], {"IMAGE_BUILDER": "podman"},
     "IMAGE_BUILDER=podman: docker or codebuild"),
    ({}, ["run", "JOB=ddp-digits"], {"PATH_WITHOUT": "aws"}, "aws is not installed here"),
])
def test_bad_input_is_one_line_and_changes_nothing(tmp_path, clone, state, args, env, said):
    if state.get("stack") == "up":  # as `make eks-up` leaves it: Kueue's queues applied
        state["objects"] = {f"ClusterQueue//{q}": {"kind": "ClusterQueue", "spec": {}}
                            for q in ("libddp-cpu", "libddp-gpu")}
    fake = Fake(tmp_path, root=clone, **state)
    if args[0] == "run":
        fake.local.mkdir(parents=True, exist_ok=True)
        (fake.local / "outputs.json").write_text(json.dumps(fake.cloud.state["outputs"]))
    if env.pop("PATH_WITHOUT", None):
        (fake.bin / "aws").unlink()
        env["PATH"] = f"{fake.bin}:/usr/bin:/bin"
    done = fake.eks(*args, **env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith("eks.py: ") and done.stderr.count("\n") == 1, done.stderr
    assert said in done.stderr, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert fake.mutations() == [], fake.mutations()


def test_what_a_finished_job_reports():
    log = (LOGS / "nccl-efa.log").read_text() + "ddp-efa-check: OK: NCCL used EFA on all 16 " \
        "ranks\n"
    assert jobs.report(log) == ["final test accuracy 97.78% after 20 epochs in 41.0 s; "
                                "throughput 701 images/s over 16 ranks (44 per rank)",
                                "ddp-efa-check: OK: NCCL used EFA on all 16 ranks"]
    bench = ("[1,0]<stdout>:        1024           256     f32      sum      55.1     0.02"
             "     0.03       0\n[1,0]<stdout>:  1073741824     268435456     f32      sum"
             "   25000.0    42.95    80.53       0\n")
    assert jobs.report(bench) == ["busbw 80.53 GB/s at 1073741824 bytes (peak 80.53 GB/s)"]
