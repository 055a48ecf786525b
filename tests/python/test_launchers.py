# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Jobs started the way torchrun and srun start theirs: every rank with the launcher's variables
and no DDP_* identity (docs/launching.md). And every partial or contradictory launcher environment
an error naming the variables, never a job of one rank that trains alone."""
import socket
import subprocess
import sys

import pytest

from conftest import WORKERS

TIMEOUT = 180
# Everything that would tell a rank it belongs to another job.
_LAUNCHER_PREFIXES = ("DDP_", "OMPI_", "PMI_", "PMIX_", "SLURM_", "TORCHELASTIC_", "GROUP_",
                      "ROLE_", "HOROVOD_")
_LAUNCHER_NAMES = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                   "MASTER_PORT", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}


def _clean(ddp_env):
    env = {k: v for k, v in ddp_env.items()
           if not k.startswith(_LAUNCHER_PREFIXES) and k not in _LAUNCHER_NAMES}
    env.update(PYTHONUNBUFFERED="1", DDP_START_TIMEOUT_SECONDS="60")
    return env


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(envs, worker, args, cwd, timeout=TIMEOUT):
    """Starts tests/python/workers/<worker> once per environment (a launcher's job, one process
    per rank) and waits for all; returns (exit status, stdout, stderr) per rank."""
    procs = [subprocess.Popen([sys.executable, str(WORKERS / worker), *args], env=env,
                              cwd=str(cwd), text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for env in envs]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results


def _run_ranks(envs, args, cwd):
    return run_ranks(envs, "launched.py", args, cwd)


def _expect_ok(results):
    for rank, (code, out, err) in enumerate(results):
        assert code == 0 and " ok" in out, f"rank {rank} exited {code}\n{out}\n{err}"


def _torchrun_env(base, rank, size, port, agent):
    env = dict(base, RANK=str(rank), WORLD_SIZE=str(size), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port))
    if agent:  # all torchrun sets for a worker, as torchrun 1.13 and 2.x do
        env.update(LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(size), GROUP_RANK="0",
                   GROUP_WORLD_SIZE="1", ROLE_RANK=str(rank), ROLE_WORLD_SIZE=str(size),
                   ROLE_NAME="default", TORCHELASTIC_RUN_ID="test-run",
                   TORCHELASTIC_RESTART_COUNT="0", TORCHELASTIC_MAX_RESTARTS="0",
                   TORCHELASTIC_USE_AGENT_STORE="True")
    return env


def _torch_major():
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.__version__.split(".")[0])


@pytest.mark.torch
def test_torchruns_environment_with_its_agent_store_needs_nothing_else(ddp_env, tmp_path):
    """torchrun's worker environment exactly, its agent's store hosted here as torchrun's agent
    hosts it: the token and libddp's rendezvous go through that store; no DDP_* at all."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    port = _free_port()
    agent_store = TCPStore("127.0.0.1", port, None, True, timedelta(seconds=60))
    base = _clean(ddp_env)
    results = _run_ranks([_torchrun_env(base, r, 3, port, agent=True) for r in range(3)],
                         ["torchrun", "--torch"], tmp_path)
    del agent_store
    _expect_ok(results)
    assert "launched 2/3 local 2/3 ok" in results[2][1]


@pytest.mark.torch
@pytest.mark.skipif(_torch_major() < 2, reason="torch 1.13's torchrun does not start on Python "
                    "3.11; its workers' environment is tested above, and this test runs in "
                    ".venv-torch2 (make test-torch2)")
def test_a_real_torchrun_job(ddp_env, tmp_path):
    """`torchrun --standalone --nproc-per-node 2 script`, as a PyTorch user types it."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", "2", str(WORKERS / "launched.py"), "torchrun", "--torch"]
    done = subprocess.run(command, env=_clean(ddp_env), cwd=str(tmp_path), text=True,
                          capture_output=True, timeout=TIMEOUT)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert done.stdout.count(" ok") == 2, done.stdout
    assert "launched 1/2 local 1/2 ok" in done.stdout


def test_torchruns_variables_by_hand_with_a_token(ddp_env, tmp_path):
    """RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT alone (torch's env://, Kubeflow's PyTorchJob):
    no agent store, so the token comes from DDP_JOB_TOKEN, and rank 0 hosts libddp's store next
    to MASTER_PORT."""
    base = dict(_clean(ddp_env), DDP_JOB_TOKEN="by-hand-0123456789")
    port = _free_port()
    _expect_ok(_run_ranks([_torchrun_env(base, r, 2, port, agent=False) for r in range(2)],
                          ["torchrun"], tmp_path))


def test_torchruns_variables_by_hand_without_a_token_say_what_to_set(ddp_env, tmp_path):
    port = _free_port()
    results = _run_ranks([_torchrun_env(_clean(ddp_env), r, 2, port, agent=False)
                          for r in range(2)], ["torchrun"], tmp_path)
    for code, out, err in results:
        assert code != 0, out
        assert "DDP_JOB_TOKEN" in err and "torchrun" in err, err


def _srun_env(base, rank, size, job_id):
    return dict(base, SLURM_PROCID=str(rank), SLURM_STEP_NUM_TASKS=str(size),
                SLURM_NTASKS=str(size), SLURM_LOCALID=str(rank), SLURM_NODEID="0",
                SLURM_STEP_TASKS_PER_NODE=str(size), SLURM_STEP_NODELIST="localhost",
                SLURM_JOB_NODELIST="localhost", SLURM_JOB_ID=str(job_id), SLURM_STEP_ID="0",
                SLURM_NNODES="1")


def test_sruns_environment(ddp_env, tmp_path):
    """srun's variables, with the token that the batch script exports (srun passes it on): the
    rendezvous is on the step's first node, at a port both tasks derive from the job's id."""
    base = dict(_clean(ddp_env), DDP_JOB_TOKEN="batch-script-0123456789")
    job_id = _free_port()  # a job id whose derived port differs from run to run
    _expect_ok(_run_ranks([_srun_env(base, r, 2, job_id) for r in range(2)], ["slurm"], tmp_path))


def test_sruns_environment_without_a_token_says_what_to_set(ddp_env, tmp_path):
    results = _run_ranks([_srun_env(_clean(ddp_env), r, 2, 7) for r in range(2)], ["slurm"],
                         tmp_path)
    for code, out, err in results:
        assert code != 0, out
        assert "DDP_JOB_TOKEN" in err and "srun" in err, err


@pytest.mark.parametrize("variables,named", [
    ({"RANK": "1"}, ["RANK", "WORLD_SIZE"]),
    ({"WORLD_SIZE": "2"}, ["RANK", "WORLD_SIZE"]),
    ({"LOCAL_RANK": "0"}, ["LOCAL_RANK", "WORLD_SIZE"]),
    ({"TORCHELASTIC_RUN_ID": "x", "GROUP_RANK": "0"}, ["GROUP_RANK", "WORLD_SIZE"]),
    ({"RANK": "1", "WORLD_SIZE": "2"}, ["MASTER_ADDR"]),
    ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, ["RANK=2"]),
    ({"DDP_RANK": "0", "DDP_SIZE": "1", "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h",
      "MASTER_PORT": "1"}, ["DDP_RANK=0", "WORLD_SIZE=2"]),
    ({"DDP_RANK": "1"}, ["DDP_RANK", "DDP_SIZE"]),
    ({"SLURM_STEP_NUM_TASKS": "2"}, ["SLURM_PROCID"]),
    ({"OMPI_COMM_WORLD_RANK": "1"}, ["OMPI_COMM_WORLD_SIZE"]),
], ids=["rank-alone", "size-alone", "local-rank-alone", "marks-no-size", "no-master",
        "rank-out-of-range", "stale-ddp", "ddp-rank-alone", "srun-no-procid", "ompi-no-size"])
def test_a_partial_or_contradictory_launcher_environment_is_an_error(ddp_env, variables, named):
    code = "import ddp\ntry:\n    ddp.init()\nexcept ddp.DDPError as e:\n    print(e)\n" \
           "    raise SystemExit(3)\nprint('size', ddp.size())"
    done = subprocess.run([sys.executable, "-c", code], env=dict(_clean(ddp_env), **variables),
                          text=True, capture_output=True, timeout=60)
    assert done.returncode == 3, f"{done.stdout}\n{done.stderr}"
    for name in named:
        assert name in done.stdout, done.stdout
