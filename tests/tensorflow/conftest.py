# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The TensorFlow tests run in TensorFlow's own environment (.venv-tf, `make test-tf`) with the
fixtures of tests/python (ddp_env, run_job), whose workers are taken from
tests/tensorflow/workers."""
import importlib.util
import pathlib

_HERE = pathlib.Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("ddp_python_fixtures",
                                               _HERE.parent / "python" / "conftest.py")
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)
_fixtures.WORKERS = _HERE / "workers"

ddp_env = _fixtures.ddp_env
run_job = _fixtures.run_job
WORKERS = _fixtures.WORKERS


def pytest_configure(config):
    # tests/python's marker, which test_imports.py (shared with tests/python) carries.
    config.addinivalue_line("markers", "torch: runs ddp.torch or torch (tests/python/pytest.ini)")
