# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The optional packages that test_frameworks, test_ray, test_spark and test_torchft need
(installed into .venv-torch2 by `make torch2-frameworks`): absent, a test skips saying why, or
fails where DDP_REQUIRE_FRAMEWORKS=1 (make test-torch2) says they must be there."""
import importlib.util
import os
import sys

import pytest


def missing(why: str):
    """Skips the test for `why`, or fails it under DDP_REQUIRE_FRAMEWORKS=1."""
    if os.environ.get("DDP_REQUIRE_FRAMEWORKS") == "1":
        pytest.fail(why + "; DDP_REQUIRE_FRAMEWORKS=1")
    pytest.skip(why)


def need(module: str):
    """Goes on where `module` is installed, else missing()."""
    if importlib.util.find_spec(module) is None:
        missing(f"{module} is not installed in {sys.prefix} (make torch2-frameworks installs it "
                f"into .venv-torch2)")
