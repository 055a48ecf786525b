# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Offline checks of k8s/ and terraform/: each function takes files (the project's, or a broken
copy a test made) and returns the problems it finds as strings, empty when there are none.
tests/deploy/test_*.py run them; `python tests/deploy/deploycheck.py` prints them all."""
from __future__ import annotations

import functools
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The CRDs' JSON Schemas are test data kept beside the project (../shared/schemas/), not in it: a
# user's clone has none. Where they are absent the checks that need them say so and pass (the
# cluster's API server checks those kinds at `kubectl apply --dry-run=server`, as k8s/eks.py does
# before it applies); everything else is checked as usual.
SHARED = pathlib.Path(os.environ.get("DDP_SHARED", ROOT.parent / "shared"))
SCHEMA_DIR = SHARED / "schemas"
MPIJOB_SCHEMA = SCHEMA_DIR / "mpijob-kubeflow-v2beta1.json"
OVERLAYS = {p.name: p for p in sorted((ROOT / "k8s" / "mpijob" / "overlays").iterdir())}
DOCKERFILES = sorted((ROOT / "k8s" / "image").glob("Dockerfile.*"))
KUBERNETES_VERSION = "1.35"  # terraform/variables.tf's default (kubernetes_version_support)


def tool(name: str) -> str | None:
    """A command from this Python's environment (the deploy venv), else from PATH."""
    here = pathlib.Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def yaml_files(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """Every YAML file of the project (git's list; a walk outside a checkout)."""
    done = subprocess.run(["git", "-C", str(root), "ls-files", "--cached", "--others",
                           "--exclude-standard", "*.yaml", "*.yml"], capture_output=True, text=True)
    if done.returncode == 0:
        return [root / line for line in done.stdout.splitlines() if (root / line).exists()]
    return sorted(p for p in root.rglob("*.y*ml") if not any(
        part.startswith((".", "build")) for part in p.relative_to(root).parts))


def parse_yaml(paths: list[pathlib.Path]) -> list[str]:
    problems = []
    for path in paths:
        try:
            list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError as e:
            problems.append(f"{path}: {e}")
    return problems


def yamllint(paths: list[pathlib.Path],
             config: pathlib.Path = ROOT / ".yamllint.yaml") -> list[str]:
    done = subprocess.run([tool("yamllint"), "-f", "parsable", "-s", "-c", str(config),
                           *map(str, paths)], capture_output=True, text=True)
    problems = done.stdout.splitlines()
    if done.returncode != 0 and not problems:
        problems = [done.stderr.strip() or f"yamllint exited with {done.returncode}"]
    return problems


def kustomize(folder: pathlib.Path) -> list[dict]:
    """The overlay rendered as `kubectl apply -k` renders it (RuntimeError: why not)."""
    done = subprocess.run(["kubectl", "kustomize", str(folder)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {folder}: {done.stderr.strip()}")
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def prune_nulls(value):
    """What the API server stores: null values dropped (a `command:` with no value is absent)."""
    if isinstance(value, dict):
        return {k: prune_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [prune_nulls(v) for v in value if v is not None]
    return value


# The schema files that a check wanted and did not find (not_checked() says so).
_MISSING_SCHEMAS: set[pathlib.Path] = set()


@functools.lru_cache(maxsize=None)
def _validator(path: pathlib.Path):
    import jsonschema
    return jsonschema.Draft7Validator(json.loads(path.read_text()))


def crd_schema(path: pathlib.Path, doc: dict) -> list[str]:
    """DOC against the strict JSON Schema of its CRD at PATH (unknown fields are errors, as with
    the API server's strict validation; nulls pruned first, as it does). No file: nothing is
    checked, and not_checked() names it."""
    if not path.exists():
        _MISSING_SCHEMAS.add(path)
        return []
    kind, name = doc.get("kind"), doc.get("metadata", {}).get("name")
    return [f"{kind} {name}: {'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
            for e in _validator(path).iter_errors(prune_nulls(doc))]


def not_checked() -> list[str]:
    """What could not be checked for want of a schema file, one line each."""
    return [f"not checked here: {path.name} (no {path.parent}); the cluster's API server checks "
            "those objects at kubectl apply --dry-run=server" for path in sorted(_MISSING_SCHEMAS)]


def mpijob_schema(doc: dict) -> list[str]:
    """The operator CRD's strict schema (unknown fields are errors, as with strict validation)."""
    return crd_schema(MPIJOB_SCHEMA, doc)


def _mpirun_option(args: list[str], *names: str) -> str | None:
    for i, word in enumerate(args[:-1]):
        if word in names:
            return args[i + 1]
    return None


def image_env_values(dockerfile: pathlib.Path) -> dict[str, str]:
    """The variables a Dockerfile's ENV lines set (NAME=VALUE forms)."""
    values = {}
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    for line in re.findall(r"^ENV\s+(.*)$", text, re.M):
        values.update(word.split("=", 1) for word in shlex.split(line) if "=" in word)
    return values


def image_env(image: str) -> set[str]:
    """Variables set in the image libddp:TAG (the ENV lines of k8s/image/Dockerfile.TAG, and of
    every Dockerfile for another image), which mpirun's -x may pass on."""
    names = {"PATH", "HOME", "HOSTNAME"}
    tag = image.rpartition(":")[2]
    for dockerfile in DOCKERFILES:
        if dockerfile.suffix[1:] == tag or not any(d.suffix[1:] == tag for d in DOCKERFILES):
            names.update(image_env_values(dockerfile))
    if tag == "gpu-efa":
        names.add("LD_LIBRARY_PATH")  # set by the CUDA base image, extended by the Dockerfile
    return names


def _resource_problems(where: str, container: dict) -> list[str]:
    problems = []
    resources = container.get("resources", {})
    requests, limits = resources.get("requests", {}), resources.get("limits", {})
    for key in ("nvidia.com/gpu", "vpc.amazonaws.com/efa", "hugepages-2Mi", "memory", "cpu"):
        if key in requests or key in limits:
            if requests.get(key) != limits.get(key):
                problems.append(f"{where}: {key} requests {requests.get(key)} != limits "
                                f"{limits.get(key)} (must be equal)")
    return problems


def _quantity(text) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|m|k|M|G|T)?", str(text))
    if not m:
        raise ValueError(f"quantity {text!r}")
    scale = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "m": 1e-3, "k": 1e3, "M": 1e6,
             "G": 1e9, "T": 1e12}
    return float(m.group(1)) * scale.get(m.group(2), 1)


def mpijob_rules(doc: dict) -> list[str]:
    """What the schema cannot say and the operator's controller rejects, and what the launcher's
    mpirun line must agree with (ranks = workers x slots)."""
    name = doc.get("metadata", {}).get("name", "?")
    spec = doc.get("spec", {})
    replicas = spec.get("mpiReplicaSpecs", {})
    problems = []
    launcher, worker = replicas.get("Launcher"), replicas.get("Worker")
    if launcher is None or launcher.get("replicas") != 1:
        problems.append(f"MPIJob {name}: Launcher must be present with replicas 1")
    if worker is not None and worker.get("replicas", 1) < 1:
        problems.append(f"MPIJob {name}: Worker replicas must be >= 1")
    for role, replica in replicas.items():
        if replica.get("restartPolicy") not in ("Never", "OnFailure"):
            problems.append(f"MPIJob {name}: {role} restartPolicy must be Never or OnFailure, "
                            f"not {replica.get('restartPolicy')}")
        if not replica.get("template", {}).get("spec", {}).get("containers"):
            problems.append(f"MPIJob {name}: {role} has no container")
    run_policy = spec.get("runPolicy", {})
    if run_policy.get("cleanPodPolicy", "None") not in ("None", "Running", "All"):
        problems.append(f"MPIJob {name}: cleanPodPolicy must be None, Running or All")
    for key in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        if run_policy.get(key, 0) < 0:
            problems.append(f"MPIJob {name}: runPolicy.{key} must be >= 0")
    if spec.get("slotsPerWorker", 1) < 0:
        problems.append(f"MPIJob {name}: slotsPerWorker must be >= 0")
    if spec.get("launcherCreationPolicy", "AtStartup") not in ("AtStartup", "WaitForWorkersReady"):
        problems.append(f"MPIJob {name}: launcherCreationPolicy must be AtStartup or "
                        "WaitForWorkersReady")
    if worker is not None and not re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?",
                                               f"{name}-worker-{worker.get('replicas', 1) - 1}"):
        problems.append(f"MPIJob {name}: {name}-worker-N is not a DNS-1035 label")
    if problems or worker is None:
        return problems

    # The launcher's mpirun line against the job's shape and the environment it passes on.
    slots = spec.get("slotsPerWorker", 1)
    container = launcher["template"]["spec"]["containers"][0]
    if "command" in container:
        problems.append(f"MPIJob {name}: the launcher sets command, which bypasses the image's "
                        "entrypoint (it waits for the workers' DNS names): use args")
    args = launch_command(container.get("args", []))[1]
    if args[:1] != ["mpirun"]:
        problems.append(f"MPIJob {name}: the launcher's args do not start with mpirun")
        return problems
    np, per_node = _mpirun_option(args, "-np", "-n"), _mpirun_option(args, "-N", "--npernode")
    if np is None or int(np) != worker["replicas"] * slots:
        problems.append(f"MPIJob {name}: mpirun -np {np} is not workers x slotsPerWorker = "
                        f"{worker['replicas']} x {slots}")
    if per_node is None or int(per_node) != slots:
        problems.append(f"MPIJob {name}: mpirun -N {per_node} is not slotsPerWorker {slots}")
    env = {e["name"] for e in container.get("env", [])} | image_env(container.get("image", ""))
    for i, word in enumerate(args[:-1]):
        if word == "-x" and "=" not in args[i + 1] and args[i + 1] not in env:
            problems.append(f"MPIJob {name}: mpirun -x {args[i + 1]} passes a variable that "
                            "neither the launcher's env nor the image sets")
    for flag in ("--allow-run-as-root", "--bind-to"):
        if flag not in args:
            problems.append(f"MPIJob {name}: mpirun without {flag}")

    # Workers: sshd, equal requests and limits, /dev/shm in memory with a size below the limit.
    pod = worker["template"]["spec"]
    wc = pod["containers"][0]
    problems += _resource_problems(f"MPIJob {name} worker", wc)
    shm = [m["name"] for m in wc.get("volumeMounts", []) if m.get("mountPath") == "/dev/shm"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    if not shm or volumes.get(shm[0], {}).get("emptyDir", {}).get("medium") != "Memory":
        problems.append(f"MPIJob {name}: workers need /dev/shm as a memory emptyDir")
    else:
        size = volumes[shm[0]]["emptyDir"].get("sizeLimit")
        limit = wc.get("resources", {}).get("limits", {}).get("memory")
        if size is None:
            problems.append(f"MPIJob {name}: /dev/shm has no sizeLimit")
        elif limit is None or _quantity(size) >= _quantity(limit):
            problems.append(f"MPIJob {name}: /dev/shm sizeLimit {size} must be below the memory "
                            f"limit {limit} (it counts against it)")
    if "IPC_LOCK" not in wc.get("securityContext", {}).get("capabilities", {}).get("add", []):
        problems.append(f"MPIJob {name}: workers need IPC_LOCK (pinned memory)")
    if "nvidia.com/gpu" in wc.get("resources", {}).get("limits", {}):
        gpus = int(wc["resources"]["limits"]["nvidia.com/gpu"])
        if gpus != slots:
            problems.append(f"MPIJob {name}: slotsPerWorker {slots} is not the {gpus} GPUs a "
                            "worker asks for")
        if not any(t.get("key") == "nvidia.com/gpu" for t in pod.get("tolerations", [])):
            problems.append(f"MPIJob {name}: GPU workers do not tolerate the nvidia.com/gpu taint")
    return problems


EFA_CHECK = "ddp-efa-check"  # k8s/image/efa_check.py in the GPU image


def launch_command(args: list[str]) -> tuple[list[str], list[str]]:
    """(the ddp-efa-check options, the mpirun line) of a launcher's args: the check wraps the
    mpirun line as `ddp-efa-check FLAGS -- mpirun ...`."""
    if args[:1] == [EFA_CHECK] and "--" in args:
        cut = args.index("--")
        return args[1:cut], args[cut + 1:]
    return [], args


def efa_verification(doc: dict) -> list[str]:
    """Jobs whose workers take EFA interfaces run their mpirun line under ddp-efa-check, which
    fails the job unless NCCL (CUDA tensors) or libddp's ofi transport (ddp-bench --transport
    ofi) report EFA; and they turn on the logs it reads."""
    name = doc.get("metadata", {}).get("name", "?")
    replicas = doc.get("spec", {}).get("mpiReplicaSpecs", {})
    worker = replicas.get("Worker", {}).get("template", {}).get("spec", {})
    if not any("vpc.amazonaws.com/efa" in c.get("resources", {}).get("limits", {})
               for c in worker.get("containers", [])):
        return []
    container = replicas["Launcher"]["template"]["spec"]["containers"][0]
    flags, mpirun = launch_command(container.get("args", []))
    if container.get("args", [])[:1] != [EFA_CHECK]:
        return [f"MPIJob {name}: its workers use EFA but its launcher does not run "
                f"`{EFA_CHECK} ... -- mpirun ...`: nothing would notice a fall back to TCP"]
    passed = {mpirun[i + 1].partition("=")[0]: mpirun[i + 1].partition("=")[2]
              for i, word in enumerate(mpirun[:-1]) if word == "-x"}
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    problems = []
    cuda = "cuda" in mpirun or "--device=cuda" in mpirun
    ofi = "ddp-bench" in mpirun and "ofi" in mpirun[mpirun.index("ddp-bench"):]
    if cuda and "--nccl" not in flags:
        problems.append(f"MPIJob {name}: CUDA tensors go through NCCL: {EFA_CHECK} needs --nccl")
    if ofi and "--ddp-ofi" not in flags:
        problems.append(f"MPIJob {name}: ddp-bench --transport ofi: {EFA_CHECK} needs --ddp-ofi")
    if "--nccl" in flags:
        # NCCL_DEBUG_SUBSYS is INIT,BOOTSTRAP,ENV unless set: NET must be asked for.
        subsys = set(passed.get("NCCL_DEBUG_SUBSYS", "INIT,BOOTSTRAP,ENV").upper().split(","))
        if passed.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE") or \
                not ({"INIT", "NET"} <= subsys or "ALL" in subsys):
            problems.append(f"MPIJob {name}: NCCL_DEBUG={passed.get('NCCL_DEBUG')} "
                            f"NCCL_DEBUG_SUBSYS={passed.get('NCCL_DEBUG_SUBSYS')} hides NCCL's "
                            "choice of network: pass -x NCCL_DEBUG=INFO and "
                            "-x NCCL_DEBUG_SUBSYS=INIT,NET")
    if "--ddp-ofi" in flags:
        level = (passed.get("DDP_LOG_LEVEL") or env.get("DDP_LOG_LEVEL")) \
            if "DDP_LOG_LEVEL" in passed else None
        if str(level).lower() not in ("info", "debug", "trace"):
            problems.append(f"MPIJob {name}: libddp reports its transport at DDP_LOG_LEVEL=info, "
                            f"and the ranks get {level}: set it and pass it with -x")
    return problems


def builtin_kind(doc: dict) -> list[str]:
    """Built-in kinds against Kubernetes' own schema, strict (unknown fields are errors)."""
    import kubernetes_validate
    try:
        kubernetes_validate.validate(prune_nulls(doc), KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{doc.get('kind')} {doc.get('metadata', {}).get('name')}: "
                f"{'.'.join(map(str, e.path))}: {e.message}"]
    return []


def manifests(docs: list[dict]) -> list[str]:
    """Every rendered object: MPIJobs against the CRD's schema and the controller's rules, the
    rest against Kubernetes' schemas."""
    import kueue_check
    problems = []
    for doc in docs:
        if doc.get("kind") == "MPIJob":
            problems += mpijob_schema(doc) + mpijob_rules(doc) + efa_verification(doc)
        elif doc.get("kind") in kueue_check.KINDS:
            problems += kueue_check.objects(doc)
        else:
            problems += builtin_kind(doc)
    return problems


def hadolint(dockerfile: pathlib.Path) -> list[str]:
    done = subprocess.run([tool("hadolint"), "--no-color", str(dockerfile)], capture_output=True,
                          text=True)
    return [] if done.returncode == 0 else (done.stdout + done.stderr).strip().splitlines()


def dockerfile_sources(dockerfile: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    """Every COPY source (but --from stages) exists in the build context (the repository)."""
    problems = []
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    for line in re.findall(r"^COPY\s+(.*)$", text, re.M):
        words = shlex.split(line)
        if any(w.startswith("--from") for w in words):
            continue
        for source in [w for w in words if not w.startswith("--")][:-1]:
            if not (root / source).exists():
                problems.append(f"{dockerfile.name}: COPY {source}: not in the repository")
    return problems


def build_inputs_copied(dockerfile: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    """Every file or folder at the repository's root that the CMake build reads (the top-level
    CMakeLists.txt, cmake/*.cmake and the library's and bindings' CMakeLists.txt naming
    ${CMAKE_CURRENT_SOURCE_DIR}/X at the root or ${PROJECT_SOURCE_DIR}/X: VERSION, LICENSE, ...)
    is COPY'd into the image's build stage."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    copied = set()
    for line in re.findall(r"^COPY\s+(.*)$", text, re.M):
        words = [w for w in shlex.split(line) if not w.startswith("--")]
        copied.update(w.rstrip("/").split("/")[0] for w in words[:-1])
    read = set()
    top = [root / "CMakeLists.txt", *sorted((root / "cmake").glob("*.cmake"))]
    below = sorted((root / "libddp").rglob("CMakeLists.txt")) + sorted(
        (root / "bindings").rglob("CMakeLists.txt"))
    for cmake in top + below:
        pattern = r"\$\{(PROJECT_SOURCE_DIR|CMAKE_CURRENT_SOURCE_DIR)\}/([\w.-]+)"
        for var, name in re.findall(pattern, cmake.read_text()):
            if var == "PROJECT_SOURCE_DIR" or cmake in top:
                read.add(name)
    return [f"{dockerfile.name}: the build reads {name} and the image does not COPY it"
            for name in sorted(read - copied) if (root / name).exists()]


# Terraform ---------------------------------------------------------------------------------

# What installs packages through apt: it needs the package lists, which images remove after each
# layer that fetched them.
APT_USERS = ("apt-get install", "apt install", "efa_installer.sh")


def apt_lists(dockerfile: pathlib.Path) -> list[str]:
    """Every RUN that installs with apt fetches the package lists first, in the same layer."""
    problems = []
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("RUN "):
            continue
        for user in APT_USERS:
            at = line.find(user)
            if at >= 0 and "apt-get update" not in line[:at]:
                problems.append(f"{dockerfile.name}: RUN {line[4:64].strip()}...: {user} without "
                                "apt-get update before it in the same RUN (an earlier layer "
                                "removed the package lists)")
    return problems


def one_nccl(dockerfile: pathlib.Path) -> list[str]:
    """A CUDA base image ships NCCL (libnccl2) and PyTorch's wheel another under the same soname:
    whichever a process loads first serves torch, libddp and aws-ofi-nccl. With both, the image
    must remove the base's, build libddp against the wheel's, and check that one is left."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    base_has_nccl = re.search(r"^FROM\s+nvidia/cuda:\S*-(?:devel|runtime)", text, re.M)
    wheel_has_nccl = re.search(r"pip install[^\n]*\btorch==", text)
    if not (base_has_nccl and wheel_has_nccl):
        return []
    problems = []
    if not re.search(r"apt-get (?:purge|remove)[^\n]*\blibnccl2\b", text):
        problems.append(f"{dockerfile.name}: the CUDA image's NCCL (libnccl2) stays beside "
                        "PyTorch's: which one loads depends on load order (apt-get purge it)")
    if "-DDDP_WITH_NCCL=ON" in text and not re.search(r"-DNCCL_LIBRARY=\S*nvidia/nccl/", text):
        problems.append(f"{dockerfile.name}: libddp's NCCL backend is not built against the "
                        "wheel's NCCL (-DNCCL_LIBRARY=.../nvidia/nccl/lib/libnccl.so.2)")
    if not re.search(r"find [^\n]*libnccl\.so[^\n]*wc -l\)\"? = 1", text):
        problems.append(f"{dockerfile.name}: no build step checks that one libnccl.so is left")
    return problems


def terraform_fmt(folder: pathlib.Path) -> list[str]:
    done = subprocess.run(["terraform", "fmt", "-check", "-recursive", "-diff", str(folder)],
                          capture_output=True, text=True)
    return [] if done.returncode == 0 else [f"terraform fmt: {done.stdout.strip()}"]


def _hcl(folder: pathlib.Path) -> dict[pathlib.Path, dict]:
    import hcl2
    parsed = {}
    for path in sorted(folder.glob("*.tf")):
        with path.open() as f:
            parsed[path] = hcl2.load(f)
    return parsed


def terraform_parse(folder: pathlib.Path) -> list[str]:
    try:
        _hcl(folder)
    except Exception as e:  # noqa: BLE001 - lark's errors carry the line and column
        return [f"HCL parse: {type(e).__name__}: {e}"]
    return []


TF_REFERENCE = re.compile(
    r"(?<![\w.\"])(var|local|module|data\.[a-z0-9_]+|(?:aws|helm|terraform|kubernetes)_[a-z0-9_]+)"
    r"\.([A-Za-z_][\w-]*)")


def terraform_references(folder: pathlib.Path) -> list[str]:
    """Every var., local., module., data. and resource reference names something declared."""
    declared: dict[str, set[str]] = {"var": set(), "local": set(), "module": set()}
    for blocks in _hcl(folder).values():
        for block in blocks.get("variable", []):
            declared["var"].update(block)
        for block in blocks.get("locals", []):
            declared["local"].update(block)
        for block in blocks.get("module", []):
            declared["module"].update(block)
        for kind in ("resource", "data"):
            for block in blocks.get(kind, []):
                for rtype, named in block.items():
                    key = f"data.{rtype}" if kind == "data" else rtype
                    declared.setdefault(key, set()).update(named)
    problems = []
    for path in sorted(folder.glob("*.tf")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = re.sub(r'"(?:[^"\\$]|\\.)*"', '""', line.split("#")[0])  # not in plain strings
            code += " " + " ".join(re.findall(r"\$\{([^}]*)\}", line))  # but in interpolations
            for kind, name in TF_REFERENCE.findall(code):
                if kind.startswith(("aws_", "helm_", "terraform_", "kubernetes_")) and \
                        kind not in declared:
                    problems.append(f"{path.name}:{number}: {kind}.{name}: no such resource type "
                                    "declared")
                elif name not in declared.get(kind, set()):
                    problems.append(f"{path.name}:{number}: {kind}.{name} is not declared")
    return problems


def module_inputs(folder: pathlib.Path) -> list[str]:
    """Every argument given to a registry module, and to an EKS managed node group, is an input
    of that module's version (tests/deploy/module_inputs.py)."""
    from module_inputs import EKS_V21_ADDON, EKS_V21_MANAGED_NODE_GROUP, MODULES
    problems = []
    for path, blocks in _hcl(folder).items():
        for block in blocks.get("module", []):
            for name, body in block.items():
                unwrap = lambda v: v[0] if isinstance(v, list) and len(v) == 1 else v  # noqa: E731
                source = unwrap(body.get("source"))
                known = MODULES.get(source)
                if known is None:
                    problems.append(f"{path.name}: module {name}: source {source} "
                                    "has no list of inputs in tests/deploy/module_inputs.py")
                    continue
                problems += [f"{path.name}: module {name}: {key} is not an input of {source}"
                             for key in body if key not in known and not key.startswith("__")]
                groups = unwrap(body.get("eks_managed_node_groups", {}))
                for group, settings in (groups.items() if isinstance(groups, dict) else ()):
                    problems += [f"{path.name}: node group {group}: {key} is not an input of an "
                                 "EKS managed node group" for key in settings
                                 if key not in EKS_V21_MANAGED_NODE_GROUP
                                 and not key.startswith("__")]
                addons = unwrap(body.get("addons", {}))
                for addon, settings in (addons.items() if isinstance(addons, dict) else ()):
                    problems += [f"{path.name}: add-on {addon}: {key} is not an attribute of an "
                                 "eks module add-on" for key in settings
                                 if key not in EKS_V21_ADDON and not key.startswith("__")]
    return problems


def kubernetes_version_support(folder: pathlib.Path, months: int = 3) -> list[str]:
    """The default Kubernetes version is in EKS standard support for at least `months` after the
    calendar in module_inputs.py was recorded (extended support costs 6x the control plane's
    $0.10/h), and is the version the manifests are validated against."""
    import datetime

    from module_inputs import CALENDAR_RECORDED, EKS_STANDARD_SUPPORT_ENDS
    variables = [b for blocks in _hcl(folder).values() for b in blocks.get("variable", [])]
    body = next((b["kubernetes_version"] for b in variables if "kubernetes_version" in b), {})
    version = body.get("default")
    version = version[0] if isinstance(version, list) and len(version) == 1 else version
    if version != KUBERNETES_VERSION:
        return [f"variables.tf: kubernetes_version defaults to {version}, but the manifests are "
                f"validated against {KUBERNETES_VERSION} (deploycheck.KUBERNETES_VERSION)"]
    ends = EKS_STANDARD_SUPPORT_ENDS.get(version)
    if ends is None:
        return [f"variables.tf: kubernetes_version {version} is not in EKS's calendar "
                "(tests/deploy/module_inputs.py)"]
    recorded = datetime.date.fromisoformat(CALENDAR_RECORDED)
    if datetime.date.fromisoformat(ends) < recorded + datetime.timedelta(days=30 * months):
        return [f"variables.tf: kubernetes_version {version} leaves EKS standard support on {ends}"
                f" (within {months} months of {CALENDAR_RECORDED}): a cluster made now pays "
                "extended support ($0.60/h) soon; pick a newer version"]
    return []


def checkov(folder: pathlib.Path) -> list[str]:
    """checkov's Terraform checks; a finding is fixed, or skipped in the code with its reason."""
    done = subprocess.run([tool("checkov"), "-d", str(folder), "--framework", "terraform",
                           "--quiet", "--compact", "--skip-download", "-o", "json"],
                          capture_output=True, text=True, env={**os.environ, "LOG_LEVEL": "ERROR"})
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        return [f"checkov gave no report (exit {done.returncode}): {done.stderr.strip()[-2000:]}"]
    reports = report if isinstance(report, list) else [report]
    problems = []
    for r in reports:
        for failed in r.get("results", {}).get("failed_checks", []):
            problems.append(f"{failed['file_path']}:{failed['file_line_range'][0]}: "
                            f"{failed['check_id']} {failed['check_name']} "
                            f"({failed['resource']})")
    return problems


def check_rendered(folder: pathlib.Path) -> list[str]:
    """One overlay (a local one too): rendered, validated, admitted by Kueue's queues (a local
    k8s/local/kueue beside a local overlay, else k8s/kueue), and fitted to terraform's cluster."""
    import cluster_fit
    import kueue_check
    docs = kustomize(folder)
    tf = ROOT / "terraform"
    queues = folder.parent / "kueue"
    kueue = kueue_check.render(queues if (queues / "kustomization.yaml").exists() and
                               queues != kueue_check.FOLDER else kueue_check.FOLDER)
    admitted = kueue_check.admitted({folder.name: docs}, kueue)
    trainer = [d for d in docs if d["kind"] in ("TrainJob", "ClusterTrainingRuntime")]
    docs = [d for d in docs if d not in trainer]
    rendered = {folder.name: docs}
    problems = manifests(docs) + admitted + cluster_fit.node_traffic(tf, rendered) + \
        cluster_fit.capacity(tf, rendered) + cluster_fit.checkpoints_exported(tf, rendered)
    if trainer:
        import trainjob_check  # Kubeflow Trainer's kinds: their own schemas and rules
        problems += [p for d in trainer for p in trainjob_check.schema(d)]
        problems += trainjob_check.rules(trainer) + trainjob_check.fits(
            trainer, cluster_fit.node_pools(tf), cluster_fit.INSTANCES)
    if any(d["kind"] == "Job" and d["spec"].get("completionMode") == "Indexed" for d in docs):
        import ps_check  # the parameter-server job's ranks, sizes and names
        problems += ps_check.ps_rules(docs)
    return problems


def check_terraform(tf: pathlib.Path = ROOT / "terraform") -> list[str]:
    problems = terraform_parse(tf) + terraform_references(tf) + module_inputs(tf) + checkov(tf)
    problems += kubernetes_version_support(tf)
    if shutil.which("terraform"):
        problems += terraform_fmt(tf)
    return problems


def check_all() -> list[str]:
    problems = parse_yaml(yaml_files()) + yamllint(yaml_files())
    for folder in [*OVERLAYS.values(), ROOT / "k8s" / "ps"]:
        problems += check_rendered(folder)
    for dockerfile in DOCKERFILES:
        problems += hadolint(dockerfile) + dockerfile_sources(dockerfile) + apt_lists(dockerfile)
        problems += one_nccl(dockerfile)
    problems += check_terraform()
    import cluster_fit
    import karpenter
    rendered = {name: kustomize(folder) for name, folder in OVERLAYS.items()}
    rendered.update({name: kustomize(ROOT / "k8s" / name) for name in ("ps", "trainjob")})
    nodes = karpenter.render()
    problems += [p for d in nodes for p in karpenter.schema(d) + karpenter.cel_rules(d)]
    problems += karpenter.fits_libddp(nodes, rendered)
    import kueue_check
    kueue = kueue_check.render()
    problems += [p for d in kueue for p in kueue_check.objects(d)]
    problems += kueue_check.quotas_fit_pools(kueue, cluster_fit.node_pools(ROOT / "terraform"),
                                             cluster_fit.INSTANCES)
    import walkthrough
    problems += [p for doc in walkthrough.DOCS for p in walkthrough.tracked_writes(doc)]
    return problems + check_rendered(ROOT / "k8s" / "trainjob")


def main(argv: list[str] | None = None) -> int:
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--render", type=pathlib.Path, help="check this overlay only")
    parser.add_argument("--terraform", action="store_true", help="check terraform/ only")
    args = parser.parse_args(argv)
    if args.render:
        problems = check_rendered(args.render)
    elif args.terraform:
        problems = check_terraform()
    else:
        problems = check_all()
    for line in not_checked():
        print(line)
    print("\n".join(problems) or "no problems")
    return 1 if problems else 0


if __name__ == "__main__":
    # Run as the module the other checks import (karpenter, trainjob_check, ...), not as a
    # second copy of it, so that what they record (not_checked) is what main prints.
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import deploycheck
    sys.exit(deploycheck.main())
