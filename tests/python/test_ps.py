# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Parameter-server mode from Python: ddp.ps (numpy), ddp.torch.ParameterServerOptimizer, ddprun
--servers, mpirun with DDP_PS_SERVERS, worker deaths under ddprun, and the demo (make demo-ps)."""
import re
import shutil
import subprocess
import sys

import pytest

from conftest import WORKERS
from test_api import _mpirun_env

EXAMPLES = WORKERS.parents[2] / "examples" / "ps"


@pytest.mark.parametrize("np,servers", [(3, 2), (2, 0), (1, 1)],
                         ids=["3-workers-2-servers", "2-colocated", "1-worker-1-server"])
def test_numpy_api(run_job, np, servers):
    result = run_job(np, "ps_numpy.py", env={"DDP_PS_PARTITION_BYTES": "65536"},
                     launcher_args=("--servers", str(servers)) if servers else ())
    assert result.stdout.count(": ok") == np, result.stdout + result.stderr


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed")
def test_numpy_api_under_mpirun(ddp_env, tmp_path):
    """The same script on every rank; DDP_PS_SERVERS=1 makes the last one a server, which serves
    inside ps.init() and exits there."""
    result = subprocess.run(
        ["mpirun", "-np", "3", "-x", "PYTHONPATH", "-x", "DDP_PS_SERVERS",
         "-x", "DDP_PS_PARTITION_BYTES", sys.executable, str(WORKERS / "ps_numpy.py")],
        env=_mpirun_env(ddp_env, DDP_PS_SERVERS="1", DDP_PS_PARTITION_BYTES="65536"),
        cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(": ok") == 2, result.stdout + result.stderr


@pytest.mark.torch
def test_torch_sync_equals_sgd_on_the_whole_batch(run_job):
    result = run_job(3, "ps_torch.py", "sync", launcher_args=("--servers", "2"))
    assert result.stdout.count(": ok") == 3, result.stdout


@pytest.mark.once
@pytest.mark.torch
def test_torch_sync_accumulates_backward_passes_then_equals_sgd(run_job):
    result = run_job(2, "ps_torch.py", "sync2", launcher_args=("--servers", "1"))
    assert result.stdout.count(": ok") == 2, result.stdout


@pytest.mark.once
@pytest.mark.torch
def test_torch_int8_pushes_stay_near_sgd_with_the_same_weights_everywhere(run_job):
    result = run_job(3, "ps_torch.py", "int8", launcher_args=("--servers", "1"))
    digests = set(re.findall(r"digest (\S+)", result.stdout))
    assert result.stdout.count(": ok") == 3 and len(digests) == 1, result.stdout


@pytest.mark.once
@pytest.mark.torch
def test_torch_async_ends_with_the_same_weights_everywhere(run_job):
    result = run_job(3, "ps_torch.py", "async")  # colocated
    digests = set(re.findall(r"digest (\S+)", result.stdout))
    assert result.stdout.count(": ok") == 3 and len(digests) == 1, result.stdout


def test_a_dead_worker_does_not_stop_async_training_under_ddprun(run_job, tmp_path):
    """ddprun --servers tolerates a worker's death (the library decides what follows); the job's
    exit status still names it."""
    script = tmp_path / "die.py"
    script.write_text(
        "import os, signal, numpy as np, ddp.ps as ps\n"
        "ps.init()\n"
        "ps.register('w', np.zeros(100, np.float32), mode='async', optimizer='sum')\n"
        "for i in range(200):\n"
        "    ps.push_pull('w', np.ones(100, np.float32))\n"
        "    if ps.worker_index() == 1 and i == 20:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "print(f'worker {ps.worker_index()} finished with', ps.pull('w')[0], flush=True)\n"
        "ps.finish()\n")
    result = run_job(3, str(script), launcher_args=("--servers", "1"), check=False)
    assert result.returncode == 128 + 9, result.stdout + result.stderr
    assert "worker 0 finished" in result.stdout and "worker 2 finished" in result.stdout, \
        result.stdout + result.stderr
    assert "worker rank 1 was killed by signal 9" in result.stderr or \
        re.search(r"worker rank 1 .*9", result.stderr), result.stderr
    assert re.search(r"worker 1 \(rank 1.*died", result.stdout + result.stderr), \
        result.stdout + result.stderr


def test_ddprun_restart_servers_restarts_a_killed_server_and_training_goes_on(run_job,
                                                                             tmp_path):
    """--restart-servers: worker 0 kills the server mid-training (found by its rank and this
    job's rendezvous port); ddprun starts it again, it restores its checkpoint and rejoins, and
    both workers finish with exit status 0."""
    script = tmp_path / "kill_server.py"
    script.write_text(
        "import os, signal, numpy as np, ddp.ps as ps\n"
        "def server_pid():\n"
        "    want = {'DDP_RANK=' + str(int(os.environ['DDP_SIZE']) - 1),\n"
        "            'DDP_RENDEZVOUS_PORT=' + os.environ['DDP_RENDEZVOUS_PORT']}\n"
        "    for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "        try:\n"
        "            env = set(open(f'/proc/{pid}/environ', 'rb').read().decode().split('\\0'))\n"
        "        except OSError:\n"
        "            continue\n"
        "        if want <= env:\n"
        "            return int(pid)\n"
        "    raise SystemExit('no server process found')\n"
        "ps.init()\n"
        "ps.register('w', np.zeros(100, np.float32), mode='async', optimizer='sum')\n"
        "for i in range(120):\n"
        "    out = ps.push_pull('w', np.ones(100, np.float32))\n"
        "    if ps.worker_index() == 0 and i == 40:\n"
        "        os.kill(server_pid(), signal.SIGKILL)\n"
        "print(f'worker {ps.worker_index()} finished at', ps.pull('w')[0], flush=True)\n"
        "ps.finish()\n")
    result = run_job(2, str(script), launcher_args=("--servers", "1", "--restart-servers"),
                     env={"DDP_PS_CHECKPOINT_DIR": str(tmp_path),
                          "DDP_PS_CHECKPOINT_STEPS": "10"})
    both = result.stdout + result.stderr
    assert "worker 0 finished" in result.stdout and "worker 1 finished" in result.stdout, both
    assert re.search(r"server rank 2 was killed by signal SIGKILL \(9\); "
                     r"restarting it \(1 of 3\)", result.stderr), both
    assert "restored 1 partitions" in both and "is back: a new process took its place" in both, \
        both
    # At most one checkpoint interval lost: of the 240 pushes, at least 240 - 10 x 2 remain.
    final = max(float(v) for v in re.findall(r"finished at (\S+)", result.stdout))
    assert 220 <= final <= 240, both


def test_ddprun_restart_servers_arguments(run_job, monkeypatch):
    from ddp.run import main
    assert main(["-np", "2", "--restart-servers", "true"]) == 2
    assert main(["-np", "2", "--servers", "1", "--max-restarts", "-1", "true"]) == 2
    monkeypatch.setenv("DDP_TRANSPORT", "shm")
    assert main(["-np", "2", "--servers", "1", "--restart-servers", "true"]) == 2


def test_ddprun_servers_arguments(run_job):
    from ddp.run import main
    assert main(["-np", "2", "--servers", "-1", "true"]) == 2
    assert main(["-np", "2", "--servers", "1", "--nnodes", "1", "--node-rank", "0",
                 "--rendezvous", "127.0.0.1:1", "true"]) == 2


@pytest.mark.once
@pytest.mark.torch
def test_demo_ps_async_with_two_servers_reaches_97_percent(run_job):
    result = run_job(4, str(EXAMPLES / "train_digits_ps.py"), "--target-accuracy", "0.97",
                     launcher_args=("--servers", "2"), timeout=300)
    assert "final test accuracy" in result.stdout, result.stdout
