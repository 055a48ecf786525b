# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Every ddp.tensorflow module imports first, alone, in a fresh interpreter: tests/python's
check (test_imports.py) in TensorFlow's environment, where those modules can be imported."""
import importlib.util
import pathlib

_HERE = pathlib.Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("ddp_import_checks",
                                               _HERE.parent / "python" / "test_imports.py")
_checks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_checks)


def test_each_tensorflow_module_imports_first_in_a_fresh_interpreter(ddp_env):
    names = [m for m in _checks.MODULES if m.startswith("ddp.tensorflow")]
    assert _checks.import_each_first(names, ddp_env) == names  # all of them, here
