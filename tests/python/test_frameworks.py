# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The frameworks that take a torch.distributed backend name, each training the digits CNN on
`ddp` (examples/pytorch/{lightning,deepspeed,accelerate}_digits.py): Lightning's DDPStrategy,
started by Lightning itself and under ddprun; DeepSpeed's ZeRO stages 1 and 2 on CPU; Accelerate
on a group started first. Every rank of an example checks that torch's default group ran on
`ddp`, that the ranks' parameters are equal and the test accuracy (examples/pytorch/
framework_checks.py); the test reads those lines.

They run on PyTorch 2 (.venv-torch2, where `make torch2-frameworks` installs them; make
test-torch2 sets DDP_REQUIRE_FRAMEWORKS=1, so that a framework missing there fails instead of
skipping). On torch 1.13 (.venv) they skip, saying why."""
import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

from frameworks_needed import missing
from test_launchers import _clean, _torch_major

pytestmark = pytest.mark.torch
pytest.importorskip("torch")
EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "pytorch"
TARGET = "0.96"  # the examples reach 97-99% (docs/pytorch-distributed.md); a margin for seeds


def _need(module):
    if importlib.util.find_spec(module) is not None:
        return
    why = (f"{module} is not installed in {sys.prefix} (make torch2-frameworks installs it into "
           f".venv-torch2)")
    if _torch_major() < 2 and os.environ.get("DDP_REQUIRE_FRAMEWORKS") != "1":
        pytest.skip(f"{module} is tested on PyTorch 2 (make test-torch2): " + why)
    missing(why)


def _run(command, ddp_env, tmp_path, timeout=300):
    env = dict(_clean(ddp_env), OMP_NUM_THREADS="1")
    try:
        done = subprocess.run(command, env=env, cwd=str(tmp_path), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{command} did not finish in {timeout} s\n{e.stdout}\n{e.stderr}")
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"{command} exited {done.returncode}\n{out[-6000:]}"
    return out


def _ddprun(np, example, *args):
    return [sys.executable, "-m", "ddp.run", "-np", str(np), sys.executable,
            str(EXAMPLES / example), *args]


def _trained(out, what, np):
    """Every rank's line says ddp, equal parameters and an accuracy at least TARGET."""
    lines = [line for line in out.splitlines() if f"{what}: rank " in line and " of " in line]
    assert len(lines) == np, f"expected {np} ranks' lines for {what}\n{out[-6000:]}"
    for line in lines:
        assert "backend ddp, the same parameters on every rank: True" in line, line
        accuracy = float(line.rsplit("test accuracy ", 1)[1].rstrip("%")) / 100
        assert accuracy >= float(TARGET), line


@pytest.mark.parametrize("launcher", ["lightning", "ddprun"])
def test_lightning_ddp_strategy_on_ddp(ddp_env, tmp_path, launcher):
    """DDPStrategy(process_group_backend="ddp"): Lightning starting its 2 ranks itself (as a
    user runs `python script.py`), and taking the 2 that ddprun started."""
    _need("lightning")
    args = ["--devices", "2", "--target-accuracy", TARGET]
    command = ([sys.executable, str(EXAMPLES / "lightning_digits.py"), *args]
               if launcher == "lightning" else _ddprun(2, "lightning_digits.py", *args))
    _trained(_run(command, ddp_env, tmp_path), "lightning", 2)


@pytest.mark.parametrize("stage", [1, 2])
def test_deepspeed_zero_on_cpu_on_ddp(ddp_env, tmp_path, stage):
    """deepspeed.init_distributed(dist_backend="ddp"), ZeRO stage 1 and 2 on CPU, 2 ranks."""
    _need("deepspeed")
    out = _run(_ddprun(2, "deepspeed_digits.py", "--zero-stage", str(stage), "--epochs", "10",
                       "--target-accuracy", TARGET), ddp_env, tmp_path)
    _trained(out, f"deepspeed zero {stage}", 2)


def test_accelerate_on_a_ddp_group_started_first(ddp_env, tmp_path):
    """Accelerate's CPU path would start Gloo; on a group started with `ddp` first it keeps it."""
    _need("accelerate")
    out = _run(_ddprun(2, "accelerate_digits.py", "--target-accuracy", TARGET), ddp_env, tmp_path)
    _trained(out, "accelerate", 2)
