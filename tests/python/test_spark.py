# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddp.spark on a real local Spark cluster: Spark's local-cluster[2,2,1024] (a master and two
worker JVMs, two cores each, executors in processes of their own), driven from the test's
process. ddp.spark.run's ranks, results and errors; Spark's TorchDistributor and ddp.spark.run
training the digits CNN to >= 97% on 4 ranks (examples/spark/).

On PyTorch 2 (.venv-torch2, where `make torch2-frameworks` installs PySpark; with
DDP_REQUIRE_FRAMEWORKS=1 its absence fails). Java from Debian (`make deps`)."""
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import threading

import pytest

from cluster_fixtures import probe_module
from frameworks_needed import missing

pytestmark = pytest.mark.torch
MASTER = "local-cluster[2,2,1024]"
EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "spark"


def _need_spark():
    why = None
    if importlib.util.find_spec("pyspark") is None:
        why = f"pyspark is not installed in {sys.prefix} (make torch2-frameworks installs it)"
    elif shutil.which("java") is None:
        why = "no java on PATH (make deps installs Debian's OpenJDK 17)"
    if why is not None:
        missing(why)


def _work_dir():
    """Where local-cluster's workers keep each application's files (SPARK_HOME/work)."""
    import pyspark
    return pathlib.Path(pyspark.__file__).parent / "work"


@pytest.fixture(scope="module")
def spark():
    _need_spark()
    from pyspark import cloudpickle
    from pyspark.sql import SparkSession
    before = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the executors' Python: this venv's
    session = (SparkSession.builder.master(MASTER).appName("ddp-tests")
               .config("spark.ui.enabled", "false").getOrCreate())
    cloudpickle.register_pickle_by_value(probe_module())
    app = session.sparkContext.applicationId
    try:
        yield session
    finally:
        session.stop()
        shutil.rmtree(_work_dir() / app, ignore_errors=True)
        if before is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = before


def test_run_gives_ranks_by_host_and_returns_results_in_rank_order(spark):
    """4 barrier tasks on two executors of one machine: one host to libddp (shared memory among
    all four), ranks 0-3 with results in rank order, Horovod's and torchrun's variables."""
    import ddp.spark
    ranks = ddp.spark.run(probe_module().probe, args=(1.0,), num_proc=4)
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert all(r["size"] == 4 and r["sum"] == 10.0 for r in ranks), ranks
    assert [(r["local_rank"], r["local_size"], r["cross_size"]) for r in ranks] == \
        [(0, 4, 1), (1, 4, 1), (2, 4, 1), (3, 4, 1)]
    pids = sorted(r["pid"] for r in ranks)
    assert all(r["shm_pids"] == pids for r in ranks), ranks
    for r in ranks:
        assert r["env"]["RANK"] == r["env"]["HOROVOD_RANK"] == str(r["rank"])
        assert r["env"]["WORLD_SIZE"] == "4" and r["env"]["MASTER_ADDR"], r["env"]
    two = ddp.spark.run(probe_module().probe, kwargs={"value": 0.0}, num_proc=2,
                        env={"DDP_TEST_EXTRA": "1"}, start_timeout=60, verbose=2)
    assert [(r["rank"], r["size"], r["sum"]) for r in two] == [(0, 2, 1.0), (1, 2, 1.0)]


def test_a_failing_rank_fails_the_stage_with_the_rank_named(spark):
    """A rank whose fn raises, and a rank whose process dies (SIGKILL: it can say nothing), each
    fail run() with the rank and its host named; Spark's own error is the cause."""
    import ddp.spark
    with pytest.raises(RuntimeError, match=r"rank 2 \(host [^)]+\) failed: ValueError: rank 2 "
                       "fails on purpose"):
        ddp.spark.run(probe_module().fail_on, args=(2,), num_proc=4)
    with pytest.raises(RuntimeError, match=r"ddp.spark.run: rank 1 \(host [^)]+\) (was lost: "
                       r"Python worker exited unexpectedly|failed: )") as lost:
        ddp.spark.run(probe_module().die_on, args=(1,), num_proc=4)
    assert "rank 1" in str(lost.value), lost.value
    lock = threading.Lock()
    with pytest.raises(TypeError, match=r"ddp.spark.run: .*<lambda> cannot be pickled to go to "
                       "the workers"):
        ddp.spark.run(lambda: lock.locked(), num_proc=2)
    # The executors are usable afterwards.
    assert [r["rank"] for r in ddp.spark.run(probe_module().probe, args=(0.0,), num_proc=4)] == \
        [0, 1, 2, 3]


def test_horovods_other_options_are_taken_and_unknown_ones_refused(spark):
    import ddp.spark
    with pytest.raises(TypeError, match="unexpected keyword argument.s. num_procs"):
        ddp.spark.run(print, num_procs=2)


def test_run_without_a_spark_session_says_so(ddp_env):
    _need_spark()
    done = subprocess.run([sys.executable, "-c", "import ddp.spark; ddp.spark.run(print)"],
                          env=ddp_env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "no active SparkContext: make a SparkSession first" in done.stderr, done.stderr


@pytest.mark.parametrize("path", ["run", "distributor"])
def test_digits_example_on_four_ranks(spark, ddp_env, tmp_path, path):
    """examples/spark/train_digits.py through ddp.spark.run and through Spark's
    TorchDistributor (torchrun in each task, init_process_group("ddp") in a function that never
    imports ddp), each an application of its own on local-cluster: >= 97% on 4 ranks."""
    before = set(_work_dir().glob("app-*"))
    try:
        done = subprocess.run([sys.executable, str(EXAMPLES / "train_digits.py"), "--path",
                               path, "--workers", "4", "--master", MASTER,
                               "--target-accuracy", "0.97"],
                              env=dict(ddp_env, PYSPARK_PYTHON=sys.executable),
                              capture_output=True, text=True, timeout=400, cwd=str(tmp_path))
    finally:  # the example's application's files (its executors' logs)
        for app in set(_work_dir().glob("app-*")) - before:
            shutil.rmtree(app, ignore_errors=True)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert f"spark {path}: 4 ranks on " in out, out[-6000:]
    if path == "distributor":
        assert "4 ranks on backend ddp (registered by torch's entry point)" in out, out[-6000:]
