# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Spark: libddp jobs on a Spark cluster's barrier tasks, with Horovod's `horovod.spark.run`."""
from .runner import run

__all__ = ["run"]
