# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddp.ray on a real local Ray cluster that the tests start and stop: a head node and a second
node under `unshare --uts` with a host name of its own (a second host, as libddp sees it: its
ranks meet the head's over TCP, their own over shared memory). RayExecutor's placement, ranks,
environment, transports, executables and errors; Ray Train's TorchTrainer with
TorchConfig(backend="ddp") and the digits examples through both (examples/ray/).

On PyTorch 2 (.venv-torch2, where `make torch2-frameworks` installs Ray; DDP_REQUIRE_FRAMEWORKS=1
there makes its absence a failure). Needs root for `unshare --uts`."""
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from cluster_fixtures import marker, probe_module, stop_marked
from frameworks_needed import need

pytestmark = pytest.mark.torch
HOST2 = "ddp-ray-node-2"
EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "ray"


def _need_ray():
    need("ray")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A two-node Ray cluster on this machine (2 CPUs each), started and stopped by the tests:
    the head, and a second node under `unshare --uts` whose processes carry a marker of their
    own, so that a test can lose that node (SIGKILL to all of it) and start another in its
    place. Ray's health checks are tightened (a lost node is dead to Ray within seconds)."""

    def __init__(self, ddp_env):
        self.name, self.value = marker()
        self.temp = tempfile.mkdtemp(prefix="ddp-ray-", dir="/tmp")  # short: Ray's socket paths
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.ray_cli = str(pathlib.Path(sys.executable).parent / "ray")
        self.env = dict(ddp_env, **{self.name: self.value}, RAY_USAGE_STATS_ENABLED="0",
                        RAY_health_check_period_ms="1000",
                        RAY_health_check_failure_threshold="3")
        self.common = ["--node-ip-address", "127.0.0.1", "--num-cpus", "2",
                       "--disable-usage-stats"]
        self.node2: tuple[str, str] | None = None  # the second node's own marker

    def start_head(self):
        subprocess.run([self.ray_cli, "start", "--head", "--port", str(self.port),
                        "--include-dashboard=false", "--temp-dir", self.temp, *self.common],
                       env=self.env, check=True, capture_output=True, text=True, timeout=120)

    def start_node2(self):
        """A second node, named HOST2 (a node that comes back is a new node to Ray)."""
        self.node2 = marker()
        subprocess.run(["unshare", "--uts", "sh", "-c", f'hostname {HOST2} && exec "$@"', "sh",
                        self.ray_cli, "start", "--address", self.address, *self.common],
                       env=dict(self.env, DDP_TEST_RAY_NODE=self.node2[1]), check=True,
                       capture_output=True, text=True, timeout=120)

    def lose_node2(self):
        """Every process of the second node killed at once (SIGKILL): a lost machine."""
        assert self.node2 is not None
        left = stop_marked("DDP_TEST_RAY_NODE", self.node2[1], grace=5.0,
                           first=signal.SIGKILL)
        assert not left, left
        self.node2 = None

    def wait_for_nodes(self, count, timeout=60):
        import ray
        deadline = time.monotonic() + timeout
        while sum(n["Alive"] for n in ray.nodes()) != count and time.monotonic() < deadline:
            time.sleep(0.5)
        return sorted(n["NodeManagerHostname"] for n in ray.nodes() if n["Alive"])

    def stop(self):
        left = stop_marked(self.name, self.value)
        shutil.rmtree(self.temp, ignore_errors=True)
        return left


@pytest.fixture(scope="module")
def ray_cluster(ddp_env):
    """The two-node cluster (a Cluster); the test's process is its driver."""
    _need_ray()
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("the second Ray node runs under `unshare --uts` (a host name of its own): "
                    "needs root and unshare")
    import ray
    cluster = Cluster(ddp_env)
    try:
        cluster.start_head()
        cluster.start_node2()
        ray.init(address=cluster.address, log_to_driver=False)
        assert cluster.wait_for_nodes(2) == sorted([socket.gethostname(), HOST2])
        ray.cloudpickle.register_pickle_by_value(probe_module())
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Counter, lambdas
        yield cluster
    except subprocess.CalledProcessError as e:
        pytest.fail(f"starting the Ray cluster: {e.cmd} exited {e.returncode}\n{e.stdout}\n"
                    f"{e.stderr}")
    finally:
        ray.shutdown()
        left = cluster.stop()
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
        with pytest.raises(RuntimeError, match=r"rank 1 \(host [^)]+\) failed: ValueError: "
                           "rank 1 fails on purpose"):
            executor.run(cluster_probe.fail_on, args=[1])
        assert time.monotonic() - start < 60
    finally:
        executor.shutdown()
    # A rank whose process dies: the call fails with a rank and its host named (the dead one's,
    # or a survivor's whose libddp error names the dead one).
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=120), num_workers=2)
    executor.start()
    try:
        with pytest.raises(RuntimeError, match=r"RayExecutor.run: rank [01] \(host [^)]+\) "
                           r"failed: ") as lost:
            executor.run(cluster_probe.die_on, args=[1])
    finally:
        executor.shutdown()
    assert "rank 1" in str(lost.value), lost.value
    assert any(word in str(lost.value) for word in ("died", "connection lost", "exited")), \
        lost.value
    # What cannot be pickled is refused before anything starts, named.
    lock = threading.Lock()
    executor = RayExecutor(num_workers=2)
    executor.start()
    try:
        with pytest.raises(TypeError, match=r"RayExecutor.run: .*<lambda> cannot be pickled "
                           r"to go to the workers \(TypeError: .*lock.*\); nothing was started"):
            executor.run(lambda: lock.locked())
    finally:
        executor.shutdown()
    elastic = RayExecutor(min_workers=2)
    elastic.start()
    with pytest.raises(TypeError, match="RayExecutor.run: .*<lambda> cannot be pickled"):
        elastic.run(lambda: lock.locked())
    broken = RayExecutor(num_workers=2)
    with pytest.raises(RuntimeError, match=r"RayExecutor.start: rank [01] \(host [^)]+\) "
                       "failed: ValueError: no executable"):
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
    env = dict(ddp_env, RAY_ADDRESS=ray_cluster.address, RAY_USAGE_STATS_ENABLED="0")
    done = subprocess.run([sys.executable, str(EXAMPLES / "train_digits.py"), "--path", path,
                           "--workers", "4", "--target-accuracy", "0.97",
                           "--storage", str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=400, cwd=str(tmp_path))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert f"ray {path}: 4 ranks on backend ddp" in out, out[-6000:]
    if path == "trainer":  # the function never imports ddp: torch's entry point registered it
        assert "(registered by torch's entry point)" in out, out[-6000:]


def _progress(directory):
    """{file: (step, size, generation)} of the elastic workers' progress files."""
    seen = {}
    for path in pathlib.Path(directory).iterdir():
        try:
            step, size, generation = map(int, path.read_text().split())
        except (OSError, ValueError):
            continue  # being written
        seen[path.name] = (step, size, generation)
    return seen


def _wait_until(what, check, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout} s")


def _newest(progress):
    """(size, generation) of the newest generation that trained a step."""
    return max(((size, generation) for _, size, generation in progress.values()),
               key=lambda sg: sg[1], default=(0, -1))


def test_elastic_mode_goes_on_when_a_node_is_lost_and_grows_when_one_joins(
        ray_cluster, tmp_path, capfd):
    """RayExecutor(min_workers=2, max_workers=4): 4 workers on the two nodes; the second node
    lost mid-run (every process of it SIGKILLed) leaves 2, who go on from their last commit, the
    driver naming the lost node and ranks; a new node that joins gets 2 workers, who join at the
    next commit and get the state from rank 0. No step is lost or applied twice (weights ==
    steps on every rank); ranks on one node meet over shared memory."""
    from ddp.ray import RayExecutor
    cluster_probe = probe_module()
    progress, finish = tmp_path / "progress", tmp_path / "finish"
    progress.mkdir()
    executor = RayExecutor(min_workers=2, max_workers=4, elastic_timeout=60)
    executor.start(extra_env_vars={"DDP_TEST_EXTRA": "elastic"})
    steps = {}

    def training(size, after, least_step=0):
        """Whether SIZE workers of a generation newer than AFTER have trained LEAST_STEP."""
        seen = _progress(progress)
        size_now, generation = _newest(seen)
        return size_now == size and generation > after and \
            max(step for step, _, _ in seen.values()) >= least_step

    def drive():
        try:
            _wait_until("4 workers training", lambda: training(4, -1, 10), 120)
            before = _newest(_progress(progress))[1]
            ray_cluster.lose_node2()
            _wait_until("2 workers training after the node was lost",
                        lambda: training(2, before), 90)
            steps["lost"] = max(step for step, _, _ in _progress(progress).values())
            ray_cluster.start_node2()
            _wait_until("4 workers training after a node joined",
                        lambda: training(4, before + 1), 120)
            time.sleep(1.0)  # a few steps of the 4
        except Exception as e:  # noqa: BLE001 - the test says it, not the thread
            steps["error"] = e
        finally:
            finish.touch()

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    try:
        results = executor.run(cluster_probe.elastic_train, args=[str(progress), str(finish)])
    finally:
        finish.touch()
        driver.join(timeout=300)
        executor.shutdown()
        if ray_cluster.node2 is None:  # the later tests have their two nodes again
            ray_cluster.start_node2()
            ray_cluster.wait_for_nodes(2)
    err = capfd.readouterr().err
    assert "error" not in steps and "lost" in steps, (steps, err[-4000:])
    assert [r["rank"] for r in results] == [0, 1, 2, 3], (results, err[-4000:])
    final = results[0]["step"]
    for r in results:
        assert r["size"] == 4 and r["step"] == final and r["weights"] == [float(final)] * 4, r
        assert r["sizes"] == [4, 2, 4], r
        assert r["generation"] == results[0]["generation"] >= 2, r
    assert final > steps["lost"]
    hosts = [r["host"] for r in results]
    assert hosts[:2] == [socket.gethostname()] * 2 and hosts[2:] == [HOST2] * 2, results
    # A node is a host to libddp, named with its Ray node ID: the new node is not the lost one.
    assert results[2]["hostname_env"].startswith(f"{HOST2}/")
    for a, b in ((0, 1), (2, 3)):
        pair = sorted([results[a]["pid"], results[b]["pid"]])
        assert results[a]["shm_pids"] == pair == results[b]["shm_pids"], results
    # The driver said what happened, naming the lost node and its workers' ranks.
    said = [line for line in err.splitlines() if line.startswith("ddp.ray: elastic:")]
    for slot in (0, 1):
        assert any(re.search(rf"worker {HOST2}/[0-9a-f]{{8}}:{slot} \(rank \d, host {HOST2}/"
                             r"[0-9a-f]{8}\) (was lost: |.*left: stopping)", line)
                   for line in said), said
    assert "ddp.ray: elastic: generation" in err, err[-4000:]


def test_elastic_mode_is_checked_and_waits_for_min_workers_then_says_why(ray_cluster):
    """Horovod's checks of the elastic settings; the calls that have no meaning in elastic mode
    refused; more workers than the cluster can hold: run() fails after elastic_timeout,
    saying so, and nothing is left running."""
    import ray

    from ddp.ray import ElasticRayExecutor, RayExecutor
    with pytest.raises(ValueError, match="max_workers needs min_workers"):
        RayExecutor(max_workers=4)
    with pytest.raises(ValueError, match=r"max_workers \(2\) is below min_workers \(3\)"):
        RayExecutor(min_workers=3, max_workers=2)
    with pytest.raises(ValueError, match="not both"):
        RayExecutor(min_workers=2, num_workers=2)
    elastic = RayExecutor(min_workers=2)
    elastic.start()
    with pytest.raises(NotImplementedError, match="execute: not in elastic mode"):
        elastic.execute(print)
    with pytest.raises(ValueError, match="executables"):
        RayExecutor(min_workers=2).start(executable_cls=Counter)
    with pytest.raises(ValueError, match="cooldown_range needs 0 < low <= high"):
        RayExecutor(min_workers=2, cooldown_range=(5, 1))
    settings = ElasticRayExecutor.create_settings(min_num_proc=2, max_num_proc=3, timeout_s=9)
    assert (settings.min_np, settings.max_np) == (2, 3)
    with pytest.raises(TypeError, match="min_np_procs"):
        ElasticRayExecutor.create_settings(min_np_procs=2)
    # Every worker fails: their nodes get no more, and after elastic_timeout the job stops,
    # naming the first failure.
    failing = RayExecutor(min_workers=2, max_workers=2, elastic_timeout=3)
    failing.start()
    with pytest.raises(RuntimeError, match=r"fewer than min_workers 2, since worker .* raised "
                       r"ValueError: no training today(, and 1 worker more)?; its first failure: "
                       r"worker \S+ \(rank \d, host \S+\) raised ValueError: no training today"):
        failing.run(_fails)
    too_many = ElasticRayExecutor(ElasticRayExecutor.create_settings(min_np=5,
                                                                     elastic_timeout=3))
    too_many.start()
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="4 slots within elastic_timeout 3 s, fewer than "
                       "the 5 needed to start"):
        too_many.run(lambda: None)
    assert time.monotonic() - start < 30
    _wait_until("no actor left", lambda: ray.available_resources().get("CPU") == 4.0, 30)


def _fails():
    raise ValueError("no training today")


class Hog:
    """Holds a CPU of a node (other work on the cluster)."""

    def ping(self):
        return os.getpid()


def test_elastic_mode_a_worker_its_node_cannot_start_fails_and_the_rest_train(ray_cluster,
                                                                              tmp_path, capfd):
    """A node's slots count its total CPUs (as Horovod's); with one of the second node's CPUs
    held by another actor, its second worker never starts: after placement_group_timeout_s it
    fails as a worker that could not start, its node gets no more, and the other 3 train."""

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from ddp.ray import RayExecutor
    node2 = next(n["NodeID"] for n in ray.nodes()
                 if n["Alive"] and n["NodeManagerHostname"] == HOST2)
    hog = ray.remote(num_cpus=1)(Hog).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node2, soft=False)).remote()
    ray.get(hog.ping.remote())
    progress, finish = tmp_path / "progress", tmp_path / "finish"
    progress.mkdir()
    # Long enough for an actor to start on a busy machine (a Python worker process each).
    executor = RayExecutor(RayExecutor.create_settings(placement_group_timeout_s=15),
                           min_workers=2, max_workers=4, elastic_timeout=60)
    executor.start()

    def finish_when_three_train():
        try:
            _wait_until("3 workers training",
                        lambda: _newest(_progress(progress))[0] == 3, 90)
        finally:
            finish.touch()

    threading.Thread(target=finish_when_three_train, daemon=True).start()
    try:
        results = executor.run(probe_module().elastic_train, args=[str(progress), str(finish)])
    finally:
        finish.touch()
        executor.shutdown()
        ray.kill(hog)
    err = capfd.readouterr().err
    assert [r["rank"] for r in results] == [0, 1, 2] and \
        all(r["size"] == 3 for r in results), (results, err[-3000:])
    assert sorted(r["host"] for r in results) == sorted([socket.gethostname()] * 2 + [HOST2])
    assert re.search(rf"worker {HOST2}/[0-9a-f]{{8}}:\d \(rank \d, host \S+\) was not started on "
                     r"its node within 15 s \(placement_group_timeout_s\)", err), err[-3000:]


def test_elastic_mode_a_failed_nodes_cooldown_ends_and_it_gets_a_worker_again(ray_cluster,
                                                                             tmp_path, capfd):
    """cooldown_range (Horovod's): a worker raises once; its node gets no new workers for 1-2 s,
    the 3 others go on from their last commit, then the node gets a worker again and the job is
    4 again, no step lost or applied twice."""
    from ddp.ray import RayExecutor
    progress, finish = tmp_path / "progress", tmp_path / "finish"
    progress.mkdir()
    executor = RayExecutor(min_workers=2, max_workers=4, cooldown_range=(1, 2),
                           elastic_timeout=60)
    executor.start()
    seen = []

    def finish_when_four_again():
        try:
            _wait_until("3 workers training", lambda: _newest(_progress(progress))[0] == 3, 90)
            seen.append(3)
            _wait_until("4 workers again", lambda: _newest(_progress(progress))[0] == 4, 90)
            seen.append(4)
            time.sleep(1.0)
        finally:
            finish.touch()

    threading.Thread(target=finish_when_four_again, daemon=True).start()
    try:
        results = executor.run(probe_module().elastic_train,
                               args=[str(progress), str(finish)],
                               kwargs={"fail_once": str(tmp_path / "failed")})
    finally:
        finish.touch()
        executor.shutdown()
    err = capfd.readouterr().err
    assert seen == [3, 4], err[-3000:]
    final = results[0]["step"]
    assert [r["rank"] for r in results] == [0, 1, 2, 3], (results, err[-3000:])
    for r in results:
        assert r["weights"] == [float(final)] * 4 and r["sizes"] == [4, 3, 4], r
    assert re.search(rf"raised RuntimeError: failing once on purpose; host {HOST2}/[0-9a-f]{{8}} "
                     r"gets no new workers for \d\.\d s", err), err[-3000:]
    assert re.search(rf"host {HOST2}/[0-9a-f]{{8}} may get workers again \(its cooldown is "
                     r"over\)", err), err[-3000:]
