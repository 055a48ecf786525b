# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Fixtures shared by the Python tests."""
import os
import pathlib
import signal
import subprocess
import sys

import pytest

BINDINGS = pathlib.Path(__file__).resolve().parents[2] / "bindings" / "python"


def pytest_report_header(config):
    """Which torch and numpy this run tests (make test-python: Debian's 1.13 in .venv; make
    test-torch2: PyTorch 2 in .venv-torch2), read from their metadata, not imported."""
    import importlib.metadata as metadata

    def version(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "absent"
    return f"{sys.executable}: torch {version('torch')}, numpy {version('numpy')}"

@pytest.fixture(scope="session")
def ddp_env():
    """An environment for subprocesses that `import ddp`: the test's own, with bindings/python put
    first on PYTHONPATH unless `ddp` is importable already (installed in the venv)."""
    env = dict(os.environ)
    # A rank that dies of a signal (an abort at exit) prints every thread's Python stack.
    env.setdefault("PYTHONFAULTHANDLER", "1")
    probe = subprocess.run([sys.executable, "-c", "import ddp"], env=env, cwd=str(BINDINGS.root),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if probe.returncode != 0:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BINDINGS), env.get("PYTHONPATH")) if p)
    return env


WORKERS = pathlib.Path(__file__).resolve().parent / "workers"


@pytest.fixture
def run_job(ddp_env, tmp_path):
    """run_job(np, worker, *args, env=None, timeout=240, launcher_args=()) runs
    tests/python/workers/<worker> on np ranks with ddprun and returns the CompletedProcess
    (text). Workers assert per rank and exit non-zero on failure; a failed job fails the test
    with the launcher's whole output."""

    def run(np, worker, *args, env=None, timeout=240, check=True, launcher_args=()):
        job_env = dict(ddp_env, **(env or {}))
        command = [sys.executable, "-m", "ddp.run", "-np", str(np), *launcher_args, sys.executable,
                   str(WORKERS / worker), *map(str, args)]
        launcher = subprocess.Popen(command, env=job_env, cwd=str(tmp_path), text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            stdout, stderr = launcher.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # A hung job: Ctrl-C the launcher so that it stops its ranks (which run in their own
            # sessions) instead of leaving them behind, then fail with what they printed.
            launcher.send_signal(signal.SIGINT)
            try:
                stdout, stderr = launcher.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                launcher.kill()
                stdout, stderr = launcher.communicate()
            pytest.fail(f"{worker} on {np} ranks did not finish in {timeout} s\n--- stdout\n"
                        f"{stdout}\n--- stderr\n{stderr}")
        result = subprocess.CompletedProcess(command, launcher.returncode, stdout, stderr)
        if check and result.returncode != 0:
            pytest.fail(f"{worker} on {np} ranks exited {result.returncode}\n--- stdout\n"
                        f"{result.stdout}\n--- stderr\n{result.stderr}")
        return result

    return run
