# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddp.ray on a real local Ray cluster that the tests start and stop: a head node and a second
node under `unshare --uts` with a host name of its own (a second host, as libddp sees it: its
ranks meet the head's over TCP, their own over shared memory). RayExecutor's placement, ranks,
environment, transports, executables and errors; Ray Train's TorchTrainer with
TorchConfig(backend="ddp") and the digits examples through both (examples/ray/).

On PyTorch 2 (.venv-torch2, where `make torch2-frameworks` installs Ray; DDP_REQUIRE_FRAMEWORKS=1
there makes its absence a failure). Needs root for `unshare --uts`."""
import importlib.util
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from cluster_fixtures import marker, probe_module, stop_marked

pytestmark = pytest.mark.torch
HOST2 = "ddp-ray-node-2"
EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "ray"


def _need_ray():
    if importlib.util.find_spec("ray") is not None:
        return
    why = f"ray is not installed in {sys.prefix} (make torch2-frameworks installs it)"
    if os.environ.get("DDP_REQUIRE_FRAMEWORKS") == "1":
        pytest.fail(why + "; DDP_REQUIRE_FRAMEWORKS=1")
    pytest.skip(why)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_cluster(ddp_env):
    """The address of a two-node Ray cluster on this machine (2 CPUs each); the test's process
    is its driver."""
    _need_ray()
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("the second Ray node runs under `unshare --uts` (a host name of its own): "
                    "needs root and unshare")
    import ray
    name, value = marker()
    temp = tempfile.mkdtemp(prefix="ddp-ray-", dir="/tmp")  # short: Ray's socket paths
    port = _free_port()
    ray_cli = str(pathlib.Path(sys.executable).parent / "ray")
    env = dict(ddp_env, **{name: value}, RAY_USAGE_STATS_ENABLED="0")
    common = ["--node-ip-address", "127.0.0.1", "--num-cpus", "2", "--disable-usage-stats"]
    try:
        subprocess.run([ray_cli, "start", "--head", "--port", str(port),
                        "--include-dashboard=false", "--temp-dir", temp, *common], env=env,
                       check=True, capture_output=True, text=True, timeout=120)
        subprocess.run(["unshare", "--uts", "sh", "-c", f'hostname {HOST2} && exec "$@"', "sh",
                        ray_cli, "start", "--address", f"127.0.0.1:{port}", *common], env=env,
                       check=True, capture_output=True, text=True, timeout=120)
        address = f"127.0.0.1:{port}"
        ray.init(address=address, log_to_driver=False)
        deadline = time.monotonic() + 60
        while sum(n["Alive"] for n in ray.nodes()) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert sorted(n["NodeManagerHostname"] for n in ray.nodes() if n["Alive"]) == \
            sorted([socket.gethostname(), HOST2])
        ray.cloudpickle.register_pickle_by_value(probe_module())
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Counter, lambdas
        yield address
    except subprocess.CalledProcessError as e:
        pytest.fail(f"starting the Ray cluster: {e.cmd} exited {e.returncode}\n{e.stdout}\n"
                    f"{e.stderr}")
    finally:
        ray.shutdown()
        left = stop_marked(name, value)
        shutil.rmtree(temp, ignore_errors=True)
        assert not left, f"Ray's processes left running: {left}"


def _connected(a, b):
    """Whether ranks A and B (cluster_probe.probe's reports) hold a TCP connection."""
    return (any(remote in b["listening"] for _, remote in a["established"])
            or any(remote in a["listening"] for _, remote in b["established"]))


def test_executor_places_ranks_by_host_shared_memory_within_tcp_across(ray_cluster):
    """num_hosts=2 x num_workers_per_host=2: ranks 0-1 on one host, 2-3 on the other, each
    pair over shared memory (each maps its peer's segments and no one else's), TCP between the
    hosts; Horovod's and torchrun's variables set; an allreduce right."""
    from ddp.ray import RayExecutor
    cluster_probe = probe_module()
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=120), num_hosts=2,
                           num_workers_per_host=2)
    assert executor.num_workers == 4
    executor.start()
    try:
        ranks = executor.run(cluster_probe.probe, args=[1.0])
    finally:
        executor.shutdown()
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert all(r["size"] == 4 and r["sum"] == 10.0 for r in ranks), ranks
    assert ranks[0]["host"] == ranks[1]["host"] != ranks[2]["host"] == ranks[3]["host"]
    assert {r["host"] for r in ranks} == {socket.gethostname(), HOST2}
    assert [(r["local_rank"], r["local_size"], r["cross_rank"], r["cross_size"])
            for r in ranks] == [(0, 2, 0, 2), (1, 2, 0, 2), (0, 2, 1, 2), (1, 2, 1, 2)]
    for a, b in ((0, 1), (2, 3)):
        pair = sorted([ranks[a]["pid"], ranks[b]["pid"]])
        assert ranks[a]["shm_pids"] == pair and ranks[b]["shm_pids"] == pair, ranks
    for a in (0, 1):
        for b in (2, 3):
            assert _connected(ranks[a], ranks[b]), (ranks[a], ranks[b])
    for r in ranks:
        assert r["env"]["RANK"] == r["env"]["HOROVOD_RANK"] == str(r["rank"])
        assert r["env"]["WORLD_SIZE"] == "4" and r["env"]["MASTER_ADDR"], r["env"]


class Counter:
    """An executable: made in each worker by start(), after its environment is set."""

    def __init__(self, start):
        self.value = start + int(os.environ["DDP_RANK"])

    def add(self, n):
        self.value += n
        return self.value


def test_executor_num_workers_executables_run_remote_and_callbacks(ray_cluster):
    import ray

    from ddp.ray import RayExecutor
    executor = RayExecutor(num_workers=3, cpus_per_worker=1)
    seen = []
    executor.start(executable_cls=Counter, executable_args=[10],
                   extra_env_vars={"DDP_TEST_EXTRA": "yes"})
    try:
        assert executor.execute(lambda c: c.add(1), callbacks=[seen.append]) == [11, 12, 13]
        assert seen == [[11, 12, 13]]
        assert executor.execute_single(lambda c: c.add(5)) == 16
        refs = executor.run_remote(lambda x: (os.environ["DDP_TEST_EXTRA"], x), args=[7])
        assert ray.get(refs) == [("yes", 7)] * 3
        assert executor.run(lambda: int(os.environ["LOCAL_WORLD_SIZE"]) > 0) == [True] * 3
        with pytest.raises(RuntimeError, match="already started"):
            executor.start()
    finally:
        executor.shutdown()
    with pytest.raises(RuntimeError, match="call start"):
        executor.run(print)
    with pytest.raises(ValueError, match="not both"):
        RayExecutor(num_workers=2, num_hosts=2)


class Broken:
    def __init__(self):
        raise ValueError("no executable")


def test_a_failing_rank_fails_the_call_named_and_more_than_the_cluster_is_refused(ray_cluster):
    """A rank's exception fails run() with that rank named while the others wait in an
    allreduce it never joins (shutdown() stops them); an executable that cannot be made fails
    start() and leaves nothing started; a placement the cluster cannot give fails after the
    placement timeout, saying what was asked and what there is."""
    from ddp.ray import RayExecutor
    cluster_probe = probe_module()
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=120), num_workers=3)
    executor.start()
    try:
        start = time.monotonic()
        with pytest.raises(RuntimeError,
                           match="rank 1 failed: ValueError: rank 1 fails on purpose"):
            executor.run(cluster_probe.fail_on, args=[1])
        assert time.monotonic() - start < 60
    finally:
        executor.shutdown()
    broken = RayExecutor(num_workers=2)
    with pytest.raises(RuntimeError, match="RayExecutor.start: rank [01] failed: ValueError: "
                       "no executable"):
        broken.start(executable_cls=Broken)
    assert broken.workers == [] and broken._close_store is None  # all of it stopped
    too_many = RayExecutor(RayExecutor.create_settings(placement_group_timeout_s=3),
                           num_hosts=3, num_workers_per_host=1)
    with pytest.raises(TimeoutError, match="3 workers of 1 CPU.s. each on 3 distinct hosts"):
        too_many.start()


@pytest.mark.parametrize("path", ["executor", "trainer"])
def test_digits_example_on_four_ranks(ray_cluster, ddp_env, tmp_path, path):
    """examples/ray/train_digits.py through RayExecutor and through Ray Train's TorchTrainer
    (TorchConfig(backend="ddp"), the training function unchanged): >= 97% on 4 ranks."""
    env = dict(ddp_env, RAY_ADDRESS=ray_cluster, RAY_USAGE_STATS_ENABLED="0")
    done = subprocess.run([sys.executable, str(EXAMPLES / "train_digits.py"), "--path", path,
                           "--workers", "4", "--target-accuracy", "0.97",
                           "--storage", str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=400, cwd=str(tmp_path))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert f"ray {path}: 4 ranks on backend ddp" in out, out[-6000:]
    if path == "trainer":  # the function never imports ddp: torch's entry point registered it
        assert "(registered by torch's entry point)" in out, out[-6000:]
