# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The torch.distributed backend 'ddp' (ddp/torch/c10d/), on the torch of the environment that
runs the tests: Debian's 1.13 in .venv (make test-python), PyPI's current 2.x in .venv-torch2
(make test-torch2). Real multi-process jobs; the workers check every rank's results against
references and exit non-zero on the first mismatch."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import WORKERS
from test_launchers import (_clean, _free_port, _srun_env, _torch_major, _torchrun_env,
                            run_ranks)

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
TORCH2 = _torch_major() >= 2


@pytest.mark.parametrize("np", [1, 2, 3, 4])
def test_every_op_dtype_and_reduce_op(run_job, np):
    """Every operation DDP, FSDP, comm hooks and the object collectives use, every dtype and
    reduce op Gloo serves on CPU (and AVG), against references, at world sizes 1 to 4."""
    result = run_job(np, "c10d_ops.py")
    assert result.stdout.count("c10d ops ok") == np, result.stdout


def test_profiler_events_name_every_operation_with_its_input_shapes(run_job):
    """Under torch's profiler every operation is one async event "ddp:<op>" with its inputs'
    shapes, as Gloo's are (the module built against this torch: bindings/torch_native)."""
    result = run_job(3, "c10d_profile.py")
    assert result.stdout.count("c10d profile ok 11") == 3, result.stdout
    assert "records no profiler events" not in result.stderr, result.stderr


def test_distributed_data_parallel(run_job):
    """DDP: plain, find_unused_parameters, gradient_as_bucket_view, no_sync, the fp16 and
    PowerSGD comm hooks (PowerSGD waits for a collective inside a future's callback)."""
    result = run_job(3, "c10d_ddp.py")
    assert result.stdout.count("c10d ddp ok 6") == 3, result.stdout


@pytest.mark.skipif(not TORCH2, reason="the Backend class is torch 2's")
@pytest.mark.parametrize("how", ["python-backend", "as-process-group"])
def test_distributed_data_parallel_without_the_backends_cpp_part(run_job, how):
    """torch 2 without the module built for it (`pip install` with build isolation): the
    Backend written in Python, through torch's trampolines, or where torch's Backend binds no
    constructor (2.11: "No constructor defined!") a ProcessGroup of libddp's own from the
    creator, which torch uses whole; DDP on each, and a warning that says what is missing."""
    result = run_job(2, "c10d_ddp.py", how)
    assert result.stdout.count("c10d ddp ok 6") == 2, result.stdout


@pytest.mark.skipif(not TORCH2, reason="FSDP on CPU needs torch 2 (this runs in .venv-torch2, "
                    "make test-torch2)")
def test_fsdp_and_fully_shard(run_job):
    result = run_job(3, "c10d_fsdp.py")
    assert result.stdout.count("c10d fsdp ok") == 3, result.stdout


def _ranks(ddp_env, tmp_path, worker, args, size=2, extra=None):
    """Starts `size` ranks with torch's env:// variables by hand (no launcher) and waits."""
    port = _free_port()
    base = dict(_clean(ddp_env), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                WORLD_SIZE=str(size), **(extra or {}))
    return run_ranks([dict(base, RANK=str(r)) for r in range(size)], worker, args(port), tmp_path)


@pytest.mark.parametrize("how", ["env", "tcp", "file", "store", "tcp-no-rank", "env-detail",
                                 "env-mixed"])
def test_every_init_method_and_bad_input(ddp_env, tmp_path, how):
    """Each init method; env-detail: under TORCH_DISTRIBUTED_DEBUG=DETAIL, where torch 2 wraps
    the backend in its checking wrapper (which asks its name and sequence numbers); env-mixed:
    "cpu:ddp,cuda:gloo" (torch 2), both backends in torch's group."""
    if how == "env-mixed" and not TORCH2:
        pytest.skip("a backend per device is torch 2's")
    store_port = _free_port()
    where = (lambda port: [how, str(tmp_path / "rendezvous")]) if how == "file" else \
        (lambda port: [how, str(store_port if how == "store" else port)])
    extra = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"} if how == "env-detail" else None
    for rank, (code, out, err) in enumerate(_ranks(ddp_env, tmp_path, "c10d_init.py", where,
                                                   extra=extra)):
        assert code == 0 and f"c10d init ok {how}" in out, f"rank {rank}: {code}\n{out}\n{err}"


@pytest.mark.parametrize("mode", ["kill", "kill-async", "mismatch", "late", "future",
                                  "future-python"])
def test_a_dead_or_disagreeing_rank_is_torchs_backend_error_naming_it(ddp_env, tmp_path, mode):
    if mode == "future-python" and not TORCH2:
        pytest.skip("the Backend written in Python is torch 2's")
    results = _ranks(ddp_env, tmp_path, "c10d_faults.py", lambda port: [mode], size=3,
                     extra={"DDP_TIMEOUT_SECONDS": "10"})
    survivors = [0, 2] if mode.startswith("kill") else [0, 1, 2]  # late: the absent leave too
    for rank in survivors:
        code, out, err = results[rank]
        assert code == 0 and f"survived {rank}" in out, f"rank {rank}: {code}\n{out}\n{err}"
        if TORCH2 and mode != "future-python" and (mode != "late" or rank == 0):
            assert "BackendError" in out, out
        if mode.startswith("kill"):
            # Found dead, not timed out: rank 1 is a zombie until this test collects it after
            # rank 0 (as under a launcher that polls its children), and a zombie has exited.
            assert "has exited" in out and "timed out" not in out, out


@pytest.mark.skipif(not TORCH2 or not hasattr(__import__("importlib").metadata, "entry_points"),
                    reason="torch < 2.5 loads no backends' entry points (this runs in "
                    ".venv-torch2, make test-torch2)")
def test_the_entry_point_registers_the_backend_at_import_torch(ddp_env, tmp_path):
    """What `pip install` declares (pyproject.toml's torch.backends entry point), installed as a
    dist-info on the path: `import torch` alone registers "ddp", without loading libddp, and a
    job runs with no `import ddp`."""
    import tomllib  # Python >= 3.11, as both test environments are

    pyproject = WORKERS.parents[2] / "pyproject.toml"
    entry = tomllib.loads(pyproject.read_text())["project"]["entry-points"]["torch.backends"]
    info = tmp_path / "site" / "libddp_autoload-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: libddp-autoload\nVersion: 0\n")
    (info / "entry_points.txt").write_text(
        "[torch.backends]\n" + "".join(f"{k} = {v}\n" for k, v in entry.items()))
    env = dict(_clean(ddp_env), PYTHONPATH=os.pathsep.join(
        p for p in (str(tmp_path / "site"), ddp_env.get("PYTHONPATH")) if p))
    code = ("import sys, torch, torch.distributed as dist\n"
            "assert hasattr(dist.Backend, 'DDP'), 'not registered'\n"
            "assert 'ddp._ddp' not in sys.modules, 'libddp loaded at import torch'\n"
            "dist.init_process_group('ddp', init_method='tcp://127.0.0.1:%d', rank=0, "
            "world_size=1)\n"
            "t = torch.ones(2); dist.all_reduce(t); assert t.tolist() == [1.0, 1.0]\n"
            "print('autoloaded', dist.get_backend())\n")
    done = subprocess.run([sys.executable, "-c", code % _free_port()], env=env, text=True,
                          capture_output=True, timeout=120, cwd=str(tmp_path))
    assert done.returncode == 0 and "autoloaded ddp" in done.stdout, done.stdout + done.stderr


def _anywhere_ok(results, size):
    for rank, (code, out, err) in enumerate(results):
        assert code == 0 and f"c10d anywhere ok {rank}" in out, f"rank {rank}: {code}\n{out}\n{err}"
    assert len(results) == size


# Which variables say rank and size is ddp.torch's own Python, the same on both torch lines:
# PyTorch 2 (make test) takes ddprun's; torchrun's and Slurm's run on 1.13 alone (`once`).
@pytest.mark.parametrize("launcher", ["ddprun", pytest.param("torchrun", marks=pytest.mark.once),
                                      pytest.param("srun", marks=pytest.mark.once)])
def test_ddp_init_method_reads_every_launchers_variables(ddp_env, tmp_path, launcher):
    """init_method="ddp://" with no rank=, world_size= or MASTER_*: one script under each
    launcher's variables alone (mpirun's below, with a real mpirun)."""
    size, port = 3, _free_port()
    base = dict(_clean(ddp_env), DDP_JOB_TOKEN="ddp-init-method-token-0123")
    if launcher == "ddprun":
        envs = [dict(base, DDP_RANK=str(r), DDP_SIZE=str(size), DDP_RENDEZVOUS_ADDR="127.0.0.1",
                     DDP_RENDEZVOUS_PORT=str(port)) for r in range(size)]
    elif launcher == "torchrun":
        envs = [_torchrun_env(base, r, size, port, agent=False) for r in range(size)]
    else:
        envs = [_srun_env(base, r, size, port) for r in range(size)]
    _anywhere_ok(run_ranks(envs, "c10d_anywhere.py", ["ddp"], tmp_path), size)


@pytest.mark.once  # the same ddp:// path as the launchers' test above, on PyTorch 2 too
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed")
def test_ddp_init_method_under_a_real_mpirun_and_for_gloo_too(ddp_env, tmp_path):
    """mpirun sets no torch variable: ddp:// takes the rank and size from MPI's (libddp's token
    goes through MPI), for the 'ddp' backend and for Gloo alike."""
    env = dict(_clean(ddp_env), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    for backend in ("ddp", "gloo"):
        done = subprocess.run(["mpirun", "-np", "2", "-x", "PYTHONPATH", sys.executable,
                               str(WORKERS / "c10d_anywhere.py"), backend], env=env,
                              cwd=str(tmp_path), capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, f"{backend}\n{done.stdout}\n{done.stderr}"
        for r in range(2):
            assert f"c10d anywhere ok {r}" in done.stdout, done.stdout + done.stderr


def test_ddp_init_method_refuses_a_rank_that_contradicts_the_launcher(ddp_env, tmp_path):
    code = ("import torch.distributed as dist, ddp.torch\n"
            "try:\n    dist.init_process_group('ddp', init_method='ddp://', rank=1, "
            "world_size=1)\nexcept ValueError as e:\n    print(e)\n    raise SystemExit(3)\n")
    done = subprocess.run([sys.executable, "-c", code], env=_clean(ddp_env), cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "contradicts the launcher" in done.stdout and "rank 0 of 1" in done.stdout, done.stdout


@pytest.mark.parametrize("size", [pytest.param(3, marks=pytest.mark.once), 4])
def test_new_group_subgroups_are_jobs_of_their_members(ddp_env, tmp_path, size):
    """new_group and new_subgroups: collectives in disjoint, overlapping and whole-job groups,
    interleaved with the default group, objects, DDP on a group."""
    for rank, (code, out, err) in enumerate(_ranks(ddp_env, tmp_path, "c10d_groups.py",
                                                   lambda port: [], size=size)):
        assert code == 0 and f"c10d groups ok {rank}" in out, f"rank {rank}: {code}\n{out}\n{err}"


def test_monitored_barrier_names_the_ranks_that_do_not_come(ddp_env, tmp_path):
    """monitored_barrier as Gloo's: passed by all (default group and a later one), one absent
    rank named (the others told), every absent one with wait_all_ranks, a zero timeout, and the
    group's collectives and next barriers fine afterwards (torch 1.13's dist.monitored_barrier
    asks the group only once `import ddp.torch` has extended it)."""
    for rank, (code, out, err) in enumerate(_ranks(ddp_env, tmp_path, "c10d_monitored.py",
                                                   lambda port: [], size=3)):
        assert code == 0 and f"c10d monitored ok {rank}" in out, \
            f"rank {rank}: {code}\n{out}\n{err}"


@pytest.mark.parametrize("size", [2, 3])
def test_send_and_recv(ddp_env, tmp_path, size):
    """send/recv, isend/irecv, tags out of order, a ring, batch_isend_irecv, in a group."""
    for rank, (code, out, err) in enumerate(_ranks(ddp_env, tmp_path, "c10d_p2p.py",
                                                   lambda port: [], size=size)):
        assert code == 0 and f"c10d p2p ok {rank}" in out, f"rank {rank}: {code}\n{out}\n{err}"


def test_a_script_that_ends_on_its_error_with_operations_in_flight_exits_with_it(ddp_env,
                                                                                 tmp_path):
    """Not "terminate called without an active exception" (SIGABRT) as the interpreter shuts down
    under the finisher threads still waiting on a send and an allreduce: the script's own error
    and status 1 (ReleaseGil in bindings/python/src/common.h)."""
    code, out, err = _ranks(ddp_env, tmp_path, "c10d_exit.py", lambda port: [])[0]
    assert code == 1 and "the script's own error" in err, f"{code}\n{out}\n{err}"
    assert "terminate called" not in err, err
