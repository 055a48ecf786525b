# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Horovod's smaller `horovod.tensorflow` helpers: the rank and size as ops, picklable objects
through the job, broadcast in place, grouped allgather and reducescatter, and process sets.
Re-exported by ddp.tensorflow."""
import numpy as np
import tensorflow as tf

from .. import _ddp, _ops
from .._job import (ccl_built, ddl_built, dump_flight_recorder, engine_stats, flight_record,
                    gloo_built, gloo_enabled, mpi_built, mpi_enabled, mpi_threads_supported,
                    rocm_built, stats)
from .._objects import allgather_object as _allgather_object
from .._objects import broadcast_object as _broadcast_object
from .._ops import ProcessSet, add_process_set, global_process_set, remove_process_set
from .collectives import allgather, reducescatter
from .variables import broadcast_assigns


def _value_op(what, read, name):
    """An int32 scalar read when the op runs, not when a tf.function is traced: a graph kept
    across an elastic resize answers with the new job's values, as Horovod's ops do."""
    _ops.require_init(what)

    def value():
        return np.int32(read())

    out = tf.py_function(value, [], tf.int32, name=name or what)
    out.set_shape([])
    return out


def _set_size(process_set_id):
    return len(_ops.process_set_ranks(_ops.set_id(process_set_id, "size_op")))


def rank_op(name=None):
    """This process's rank in the job, as an op."""
    return _value_op("rank_op", _ddp.rank, name)


def local_rank_op(name=None):
    """This process's rank on its host, as an op."""
    return _value_op("local_rank_op", _ddp.local_rank, name)


def size_op(process_set_id=0, name=None):
    """The number of ranks of the job, or of a process set (its id or object), as an op."""
    _set_size(process_set_id)  # an unknown set fails here, at the call
    return _value_op("size_op", lambda: _set_size(process_set_id), name)


def local_size_op(name=None):
    """The number of ranks on this host, as an op."""
    return _value_op("local_size_op", _ddp.local_size, name)


def process_set_included_op(process_set_id=0, name=None):
    """1 if this rank is a member of the process set, else 0, as an op."""
    _ops.process_set_ranks(_ops.set_id(process_set_id, "process_set_included_op"))

    def included():
        return int(_ddp.rank() in _ops.process_set_ranks(_ops.set_id(process_set_id)))

    return _value_op("process_set_included_op", included, name)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=_ops.WORLD):
    """root_rank's picklable obj on every rank of the set (Horovod's signature; `session`, for
    TensorFlow 1's sessions, is not used)."""
    del session
    return _broadcast_object(obj, root_rank, name=name, process_set=process_set)


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=_ops.WORLD):
    """A function obj -> root_rank's obj (Horovod's, for TensorFlow 1's sessions; here
    broadcast_object with these arguments)."""
    del session

    def broadcast(obj):
        return _broadcast_object(obj, root_rank, name=name, process_set=process_set)

    return broadcast


def allgather_object(obj, session=None, name=None, process_set=_ops.WORLD):
    """Every rank's picklable obj, as a list in rank order (Horovod's signature)."""
    del session
    return _allgather_object(obj, name=name, process_set=process_set)


def broadcast_(variables, root_rank, name=None, process_set=_ops.WORLD):
    """Assigns root_rank's values to the variables on every rank, in place, and returns them
    (Horovod's in-place broadcast); in a graph, the assignments' new values (evaluating them
    broadcasts)."""
    variables = list(variables)
    assigns = broadcast_assigns(variables, root_rank, process_set, "broadcast_", name)
    return variables if tf.executing_eagerly() else assigns


def nccl_built():
    """False: the TensorFlow ops are CPU kernels; libddp's NCCL path serves ddp.torch (ddp's own
    build information, the rest of Horovod's, is re-exported as it is)."""
    return False


def cuda_built():
    """False, as nccl_built()."""
    return False


def _each(kind, tensors, name, run):
    tensors = list(tensors)
    if not tensors:
        raise _ops.error(f"ddp.tensorflow.{kind}: needs at least one tensor")
    return [run(t, None if name is None else f"{name}.{i}") for i, t in enumerate(tensors)]


def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=_ops.WORLD):
    """allgather of each tensor, each its own op (differentiable as allgather is): in a
    tf.function TensorFlow runs them together and the engine fuses them; eagerly they run one
    after the other."""
    return _each("grouped_allgather", tensors, name, lambda t, n: allgather(
        t, name=n, ignore_name_scope=ignore_name_scope, process_set=process_set))


def grouped_reducescatter(tensors, op=None, name=None, ignore_name_scope=False,
                          process_set=_ops.WORLD, prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter of each tensor (Average unless op=), each its own op, as grouped_allgather
    (differentiable as reducescatter is)."""
    return _each("grouped_reducescatter", tensors, name, lambda t, n: reducescatter(
        t, op=op, name=n, ignore_name_scope=ignore_name_scope, process_set=process_set,
        prescale_factor=prescale_factor, postscale_factor=postscale_factor))


__all__ = ["grouped_allgather", "grouped_reducescatter", "rank_op", "local_rank_op", "size_op",
           "local_size_op", "process_set_included_op", "broadcast_object", "broadcast_object_fn",
           "allgather_object", "broadcast_", "add_process_set", "remove_process_set",
           "ProcessSet", "global_process_set", "mpi_built", "mpi_enabled", "mpi_threads_supported",
           "gloo_built", "gloo_enabled", "nccl_built", "cuda_built", "rocm_built", "ddl_built",
           "ccl_built", "engine_stats", "stats", "flight_record", "dump_flight_recorder"]
