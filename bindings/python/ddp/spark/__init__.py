# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Spark: libddp jobs on a Spark cluster's barrier tasks, with Horovod's `horovod.spark.run`."""
from ..run.cluster import require

require("pyspark", "pyspark", "ddp.spark")

from .runner import run  # noqa: E402 - after the check above

__all__ = ["run"]
