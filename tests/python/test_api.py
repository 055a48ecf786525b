# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The Python API (numpy/buffers and torch) and DistributedOptimizer, in real multi-rank jobs.

Each test runs a worker under ddprun; the workers check every rank's results against numpy/torch
references and exit non-zero on the first mismatch, naming it."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import WORKERS

EXAMPLES = WORKERS.parents[2] / "examples" / "pytorch"


@pytest.mark.parametrize("np", [1, 2, 3])
def test_numpy_api_every_dtype_and_op(run_job, np):
    result = run_job(np, "api_numpy.py")
    assert result.stdout.count(": ok") == np


def test_the_c_api_shares_the_packages_engine(run_job):
    # ddp/c_api.h through ctypes, on the context that ddp.init() made: a framework plugin's view.
    result = run_job(3, "c_api.py")
    assert result.stdout.count(": ok") == 3


def test_ddp_tensorflow_without_tensorflow_says_how_to_get_it(ddp_env):
    # The torch environment has no TensorFlow, and must not (its numpy 2 would break Debian's
    # torch 1.13; TensorFlow lives in .venv-tf): importing ddp.tensorflow here says what to do.
    result = subprocess.run([sys.executable, "-c", "import ddp.tensorflow"], env=ddp_env,
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "ddp.tensorflow needs TensorFlow 2" in result.stderr, result.stderr
    assert "pip install tensorflow-cpu" in result.stderr, result.stderr
    numpy = subprocess.run([sys.executable, "-c", "import numpy; print(numpy.__version__)"],
                           env=ddp_env, capture_output=True, text=True, check=True)
    assert numpy.stdout.startswith("1."), numpy.stdout


PAGES = (48 << 20) // 4096  # tests/python/workers/freed_memory.py's block, in pages


@pytest.mark.parametrize("env, outcome", [
    ({}, "kept"),
    ({"DDP_KEEP_FREED_MEMORY": "0"}, "off"),
    ({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"}, "user settings"),
    ({"MALLOC_TRIM_THRESHOLD_": "65536"}, "user settings"),
])
def test_init_keeps_freed_memory_unless_told_otherwise(ddp_env, env, outcome):
    # A step's freed temporaries stay in the process for the next step (ddp/memory.h): after
    # ddp.init() a freed 48 MiB block comes back without faulting its pages in again, unless
    # DDP_KEEP_FREED_MEMORY=0 or the user's own malloc settings say otherwise.
    env = dict({k: v for k, v in ddp_env.items()
                if not k.startswith(("DDP_", "MALLOC_", "GLIBC_TUNABLES"))}, DDP_SIZE="1", **env)
    result = subprocess.run([sys.executable, str(WORKERS / "freed_memory.py")], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["outcome"] == outcome, seen
    # Said once by rank 0, where it changed the process's allocator.
    said = result.stderr.count("freed memory is kept for reuse")
    assert said == (1 if outcome == "kept" else 0), result.stderr
    assert seen["before"] >= 5 * PAGES, seen  # glibc's default: every round faults
    if outcome == "kept":
        assert seen["after"] <= 1.5 * PAGES, seen  # the first round only
    else:
        assert seen["after"] >= 5 * PAGES, seen


def test_a_malformed_keep_freed_memory_is_an_error_naming_it(ddp_env):
    env = dict(ddp_env, DDP_SIZE="1", DDP_KEEP_FREED_MEMORY="maybe")
    result = subprocess.run([sys.executable, "-c", "import ddp; ddp.init()"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "DDP_KEEP_FREED_MEMORY='maybe' is not a boolean" in result.stderr, result.stderr


def test_a_rank_that_left_is_named_as_data(run_job):
    # DDPError carries the status code, the blamed ranks and the tensor (ddp/errors.h).
    result = run_job(3, "left.py")
    assert result.stdout.count(": ok") == 2 and "rank 2: left" in result.stdout, result.stdout


@pytest.mark.torch
@pytest.mark.parametrize("np", [pytest.param(1, marks=pytest.mark.once), 3])
def test_torch_api_every_dtype_and_op(run_job, np):
    result = run_job(np, "api_torch.py")
    assert result.stdout.count(": ok") == np


@pytest.mark.torch
def test_the_fast_path_and_the_general_one_agree(run_job):
    # Handles, results, automatic names and errors, with ranks taking different paths.
    result = run_job(2, "fast_path.py")
    assert result.stdout.count(": ok") == 2


@pytest.mark.torch
def test_horovods_names_and_flags_work_as_in_horovod(run_job):
    # average=, the *_built()/*_enabled() queries, join(device), HorovodInternalError.
    result = run_job(2, "horovod_compat.py")
    assert result.stdout.count(": ok") == 2


@pytest.mark.torch
@pytest.mark.parametrize("np", [2, pytest.param(3, marks=pytest.mark.once)])
def test_horovods_operations_move_any_dtype_and_carry_gradients(run_job, np):
    # int16/bool/complex through allgather, broadcast, alltoall; gradients through allgather,
    # broadcast, alltoall, reducescatter (in a process set too); grouped allgather/reducescatter.
    result = run_job(np, "horovod_ops.py")
    assert result.stdout.count(": ok") == np


@pytest.mark.torch
@pytest.mark.parametrize("np", [2, pytest.param(3, marks=pytest.mark.once)])
def test_horovods_semantics_hold(run_job, np):
    # A name in flight raises ValueError at the call; barrier() does not wait for unrelated
    # pending operations; a dropped handle's output outlives it; ProcessSet objects (add, remove,
    # duplicates, job-rank roots); Horovod's argument positions and compression=; alltoall with
    # uneven splits (and its gradient); sparse_allreduce_async.
    result = run_job(np, "horovod_semantics.py")
    assert result.stdout.count(": ok") == np


@pytest.mark.torch
# On PyTorch 2 (make test) plain, join and adam: fp16, passes and predivide vary the compression
# and scaling on the same hooks (`once`: 1.13 alone).
@pytest.mark.parametrize("mode", ["plain", pytest.param("fp16", marks=pytest.mark.once),
                                  pytest.param("passes", marks=pytest.mark.once), "join",
                                  pytest.param("predivide", marks=pytest.mark.once), "adam"])
def test_distributed_optimizer_matches_single_process_training(run_job, mode):
    result = run_job(3, "optimizer.py", mode)
    assert result.stdout.count(f"{mode} ok") == 3


@pytest.mark.torch
def test_the_gradient_hook_sees_each_accumulated_gradient(ddp_env):
    # DistributedOptimizer submits a gradient from a hook that must fire once backward has
    # accumulated it: on torch >= 2.1 register_post_accumulate_grad_hook, before that a hook on
    # the AccumulateGrad node. Each torch line takes its own path here, and both see p.grad final.
    code = ("import json, torch\n"
            "from ddp.torch.optimizer import gradient_hook\n"
            "p = torch.nn.Parameter(torch.ones(3))\n"
            "seen = []\n"
            "keep = gradient_hook(p, lambda: seen.append(p.grad.tolist()))\n"
            "(2 * p).sum().backward()\n"
            "(3 * p).sum().backward()\n"
            "major, minor = map(int, torch.__version__.split('.')[:2])\n"
            "print(json.dumps({'new': (major, minor) >= (2, 1), 'seen': seen,\n"
            "                  'post': hasattr(p, 'register_post_accumulate_grad_hook'),\n"
            "                  'kept': [type(k).__name__ for k in keep]}))\n")
    result = subprocess.run([sys.executable, "-c", code], env=ddp_env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["seen"] == [[2.0] * 3, [5.0] * 3], out
    assert out["post"] == out["new"], out
    assert len(out["kept"]) == (1 if out["new"] else 2), out

def test_import_without_init_has_clear_errors(ddp_env):
    code = ("import ddp, numpy\n"
            "assert not ddp.is_initialized()\n"
            "for f in (ddp.rank, ddp.barrier, lambda: ddp.allgather(numpy.ones(2)),\n"
            "          lambda: ddp.broadcast_object(1)):\n"
            "    try:\n"
            "        f()\n"
            "    except ddp.DDPError as e:\n"
            "        assert 'before ddp.init()' in str(e), e\n"
            "    else:\n"
            "        raise SystemExit('no error')\n"
            "print('ok')\n")
    env = {k: v for k, v in ddp_env.items() if not k.startswith(("DDP_", "OMPI_", "PMI"))}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


@pytest.mark.parametrize("check_sees_the_shutdown", [True, False])
def test_a_thread_without_the_gil_as_the_interpreter_ends_never_aborts_it(ddp_env,
                                                                          check_sees_the_shutdown):
    """A daemon thread inside a libddp call (the GIL let go) as the interpreter shuts down: the
    process exits with the script's status, never "terminate called without an active exception"
    from CPython ending the thread through C++ frames. Either ReleaseGil sees the shutdown before
    taking the GIL back, or the shutdown begins in between (a delay placed there): both wait."""
    sleep, delay = (1.0, 0.0) if check_sees_the_shutdown else (0.2, 1.0)
    code = ("import threading, time\n"
            "import ddp._ddp as m\n"
            "class SlowShutdown:\n"  # the interpreter's shutdown lasts 2 s: the thread wakes in it
            "    def __del__(self):\n"
            "        time.sleep(2)\n"
            "slow = SlowShutdown()\n"
            f"threading.Thread(target=m._sleep_without_gil, args=({sleep}, {delay}),\n"
            "                 daemon=True).start()\n"
            "time.sleep(0.5)\n"
            "raise SystemExit(3)\n")
    result = subprocess.run([sys.executable, "-c", code], env=ddp_env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 3, f"{result.returncode}\n{result.stderr}"
    assert "terminate called" not in result.stderr, result.stderr


def test_init_errors_name_the_variable(ddp_env):
    env = {k: v for k, v in ddp_env.items() if not k.startswith(("DDP_", "OMPI_", "PMI"))}
    env.update(DDP_RANK="0", DDP_SIZE="2")  # no token
    result = subprocess.run([sys.executable, "-c", "import ddp; ddp.init()"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "ddp.DDP" in result.stderr and "DDP_JOB_TOKEN" in result.stderr, result.stderr
    env.update(DDP_JOB_TOKEN="0123456789abcdef", DDP_TRANSPORT="carrier-pigeon")
    result = subprocess.run([sys.executable, "-c", "import ddp; ddp.init()"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert "DDP_TRANSPORT" in result.stderr, result.stderr


def test_start_timeout_names_the_missing_rank(run_job):
    # Rank 1 never calls init(): rank 0 gives up after --start-timeout, naming it, and the
    # launcher stops rank 1 and fails.
    result = run_job(2, "start_timeout.py", launcher_args=["--start-timeout", "3"], timeout=90,
                     check=False)
    assert result.returncode == 1, result.stderr
    assert "ddprun: rank 0 exited with status 1" in result.stderr, result.stderr
    assert "DDPError" in result.stderr and "rank" in result.stderr, result.stderr


needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None,
                                  reason="Open MPI's mpirun is not installed")


def _transports(ddp_env):
    """{name: library} of the transports this installation has."""
    code = "import ddp._ddp, json; print(json.dumps(dict(ddp._ddp.transports())))"
    out = subprocess.run([sys.executable, "-c", code], env=ddp_env, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)


def _mpirun_env(ddp_env, **extra):
    env = dict(ddp_env, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    for key in [k for k in env if k.startswith("DDP_")]:
        del env[key]
    env.update(extra)
    return env


@needs_mpirun
def test_script_runs_unchanged_under_mpirun(ddp_env, tmp_path):
    """The MPI bootstrap: nothing exported, no store; rank 0's token goes through MPI."""
    result = subprocess.run(
        ["mpirun", "-np", "3", "-x", "PYTHONPATH", sys.executable, str(WORKERS / "api_numpy.py")],
        env=_mpirun_env(ddp_env), cwd=str(tmp_path), capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    for r in range(3):
        assert f"rank {r}: ok" in result.stdout, result.stdout + result.stderr


@needs_mpirun
def test_mpirun_with_the_store_bootstrap(ddp_env, tmp_path):
    """DDP_BOOTSTRAP=store (or a DDP_RENDEZVOUS_ADDR) keeps the store: the token is exported."""
    env = _mpirun_env(ddp_env, DDP_BOOTSTRAP="store", DDP_JOB_TOKEN="mpirun-test-token-0123",
                      DDP_RENDEZVOUS_PORT="29531")
    result = subprocess.run(
        ["mpirun", "-np", "2", "-x", "DDP_BOOTSTRAP", "-x", "DDP_JOB_TOKEN", "-x",
         "DDP_RENDEZVOUS_PORT", "-x", "PYTHONPATH", sys.executable,
         str(WORKERS / "api_numpy.py")],
        env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 0: ok" in result.stdout and "rank 1: ok" in result.stdout


@needs_mpirun
@pytest.mark.skipif(os.environ.get("DDP_SKIP_DEMO") == "1", reason="DDP_SKIP_DEMO=1")
def test_demo_under_mpirun(ddp_env, tmp_path):
    """`mpirun -np 4 python examples/pytorch/train_digits.py`, unchanged (6
    epochs, not 20: the full run is test_demo_reaches_97_percent_on_4_ranks's, under ddprun)."""
    result = subprocess.run(
        ["mpirun", "-np", "4", "-x", "PYTHONPATH", sys.executable,
         str(EXAMPLES / "train_digits.py"), "--epochs", "6", "--target-accuracy", "0.9"],
        env=_mpirun_env(ddp_env), cwd=str(tmp_path), capture_output=True, text=True,
        timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "test accuracy" in result.stdout.lower(), result.stdout


@needs_mpirun
@pytest.mark.parametrize("extra", [[], ["DDP_MPI_ALLREDUCE=1"]],
                         ids=["point-to-point", "mpi-allreduce"])
def test_engine_over_the_mpi_transport(ddp_env, tmp_path, extra):
    """DDP_TRANSPORT=mpi: the engine (every collective, dtype and op) over MPI_Isend/MPI_Irecv, or
    with allreduce handed to MPI_Allreduce."""
    if "mpi" not in _transports(ddp_env):
        pytest.skip("built without MPI")
    command = ["mpirun", "-np", "3", "-x", "PYTHONPATH", "-x", "DDP_TRANSPORT=mpi"]
    for e in extra:
        command += ["-x", e]
    result = subprocess.run(
        command + [sys.executable, str(WORKERS / "api_numpy.py")],
        env=_mpirun_env(ddp_env), cwd=str(tmp_path), capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    for r in range(3):
        assert f"rank {r}: ok" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("env", [{"DDP_TRANSPORT": "tcp"}, {"DDP_TRANSPORT": "shm"},
                                 {"DDP_TRANSPORT": "shm", "DDP_ALGO": "ring"}],
                         ids=["tcp", "shm", "shm-ring"])
def test_engine_over_tcp_and_shared_memory(run_job, ddp_env, env):
    """The engine (every collective, dtype and op) over TCP and over shared memory (its own
    allreduce, and the ring over its point-to-point rings)."""
    assert "shm" in _transports(ddp_env)
    result = run_job(3, "api_numpy.py", env=env)
    assert result.stdout.count(": ok") == 3


@pytest.mark.parametrize("provider", ["tcp;ofi_rxm", "shm"])
def test_engine_over_the_libfabric_transport(run_job, ddp_env, provider):
    """DDP_TRANSPORT=ofi: the engine over libfabric's socket and shared-memory providers."""
    if "ofi" not in _transports(ddp_env):
        pytest.skip("built without libfabric")
    result = run_job(3, "api_numpy.py", env={"DDP_TRANSPORT": "ofi", "DDP_OFI_PROVIDER": provider})
    assert result.stdout.count(": ok") == 3


@pytest.mark.once
@pytest.mark.torch
def test_distributed_optimizer_over_libfabric(run_job, ddp_env):
    if "ofi" not in _transports(ddp_env):
        pytest.skip("built without libfabric")
    result = run_job(2, "optimizer.py", "plain",
                     env={"DDP_TRANSPORT": "ofi", "DDP_OFI_PROVIDER": "tcp;ofi_rxm"})
    assert result.stdout.count("plain ok") == 2


@pytest.mark.once
@pytest.mark.torch
@pytest.mark.skipif(os.environ.get("DDP_SKIP_DEMO") == "1", reason="DDP_SKIP_DEMO=1")
def test_demo_reaches_97_percent_on_4_ranks(run_job, tmp_path):
    checkpoint = tmp_path / "digits.pt"
    result = run_job(4, str(EXAMPLES / "train_digits.py"), "--target-accuracy", "0.97",
                     "--checkpoint", checkpoint, timeout=300)
    assert "final test accuracy" in result.stdout and checkpoint.exists(), result.stdout


def _gpus():
    try:
        import torch
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


@pytest.mark.torch
@pytest.mark.skipif(_gpus() == 0, reason="no GPU here (CUDA tensors go through NCCL on a GPU)")
def test_torch_cuda_tensors_through_nccl(run_job):
    """One rank per GPU (NCCL allows no more): a 1-GPU machine runs it as a 1-rank job."""
    result = run_job(min(_gpus(), 4), "api_cuda.py", timeout=600)
    assert "cuda api ok" in result.stdout


@pytest.mark.torch
@pytest.mark.skipif(_gpus() == 0, reason="no GPU here (CUDA tensors go through NCCL on a GPU)")
def test_a_stream_ordered_failure_reaches_its_handle_and_the_next_call(run_job):
    result = run_job(1, "api_cuda_watch.py", env={"DDP_TIMEOUT_SECONDS": "1"}, timeout=120)
    assert "cuda watcher ok" in result.stdout
