# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Ray: libddp jobs on a Ray cluster's actors, with Horovod's RayExecutor API (needs `ray`)."""
from ..run.cluster import require

require("ray", "'ray[train]'", "ddp.ray")

from .executor import ElasticRayExecutor, ElasticSettings, RayExecutor, Settings  # noqa: E402 - after the check

__all__ = ["RayExecutor", "Settings", "ElasticRayExecutor", "ElasticSettings"]
