"""Fixtures shared by the Python tests."""
import os
import pathlib
import subprocess
import sys

import pytest

BINDINGS = pathlib.Path(__file__).resolve().parents[2] / "bindings" / "python"


@pytest.fixture(scope="session")
def ddp_env():
    """An environment for subprocesses that `import ddp`: the test's own, with bindings/python put
    first on PYTHONPATH unless `ddp` is importable already (installed in the venv)."""
    env = dict(os.environ)
    probe = subprocess.run([sys.executable, "-c", "import ddp"], env=env, cwd=str(BINDINGS.root),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if probe.returncode != 0:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BINDINGS), env.get("PYTHONPATH")) if p)
    return env
