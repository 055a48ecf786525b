# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Ray: libddp jobs on a Ray cluster's actors, with Horovod's RayExecutor API (needs `ray`)."""
from .executor import ElasticRayExecutor, ElasticSettings, RayExecutor, Settings

__all__ = ["RayExecutor", "Settings", "ElasticRayExecutor", "ElasticSettings"]
