# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The job from TensorFlow: init (the job joined, its context handed to the ops), shutdown,
and the ranks (as ddp's)."""
from .. import _job
from .._job import cross_rank, cross_size, is_initialized, local_rank, local_size, rank, size
from ._library import bind

__all__ = ["init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
           "cross_rank", "cross_size"]


def init(comm=None, process_sets=None):
    """Joins the job (as ddp.init) and hands its context to the TensorFlow ops."""
    _job.init(comm=comm, process_sets=process_sets)
    bind()


def shutdown():
    """Leaves the job; safe to call twice."""
    _job.shutdown()  # unbinds the ops first (_library.unbind, a shutdown hook)
