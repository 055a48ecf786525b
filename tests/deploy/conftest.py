# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
import os
import pathlib
import shutil
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import deploycheck


@pytest.fixture
def copy_of(tmp_path):
    """copy_of('k8s') copies that folder of the repository under tmp_path (same relative place,
    so relative references still hold) and returns the copy's path."""
    def copy(relative):
        target = tmp_path / relative
        shutil.copytree(deploycheck.ROOT / relative, target)
        return target
    return copy


def needs(command):
    """Skips without the tool, but fails under `make test-deploy`, which installs it
    (DDP_REQUIRE_DEPLOY_TOOLS=1): a check that CI thinks ran must run."""
    if deploycheck.tool(command) is None:
        why = f"{command} is not installed here (make test-deploy installs it)"
        if os.environ.get("DDP_REQUIRE_DEPLOY_TOOLS") == "1":
            pytest.fail(why)
        pytest.skip(why)
