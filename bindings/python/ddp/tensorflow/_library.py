# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""TensorFlow and libddp's op library for it (ddp/tensorflow/_ops.so): the versions checked, the
library loaded (each collective's tensor input made unfoldable in graphs), and the job's context
handed to the ops (bound on first use, let go at shutdown)."""

import ctypes
import os
import re

from .. import _ddp, _job, _ops

_MIN_VERSION = (2, 13)

try:
    import tensorflow as tf
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "ddp.tensorflow needs TensorFlow 2 (>= 2.13): pip install tensorflow-cpu (or tensorflow); "
        f"it could not be imported: {e}") from e

_version = tuple(int(x) for x in re.findall(r"\d+", tf.__version__)[:2])
if _version < _MIN_VERSION:
    raise ImportError(f"ddp.tensorflow needs TensorFlow >= {'.'.join(map(str, _MIN_VERSION))}; "
                      f"this is {tf.__version__}")

_LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ops.so")
if not os.path.exists(_LIBRARY):
    raise ImportError(
        "ddp.tensorflow: this libddp was built without its TensorFlow ops (ddp/tensorflow/_ops.so "
        "is missing). Build them against the TensorFlow you run: `make build-tf`, or configure "
        "CMake with -DDDP_TENSORFLOW_PYTHON=<a python that imports tensorflow>")
try:
    _ops_lib = tf.load_op_library(_LIBRARY)
except tf.errors.NotFoundError as e:
    raise ImportError(
        f"ddp.tensorflow: {_LIBRARY} does not load into TensorFlow {tf.__version__} (it was built "
        f"against another TensorFlow; rebuild it with `make build-tf`): {e}") from e


def _unfoldable(tensor):
    """In a graph, `tensor` seen through a PlaceholderWithDefault (an identity that TensorFlow
    never evaluates ahead of time). The collectives are stateless ops, so that tf.function starts
    them together (stateful ones it chains in program order); but TensorFlow evaluates a
    stateless op whose inputs are constant while it builds the graph (when a shape function
    needs a value computed from its output, as a Pad's padding) and Grappler folds one: the
    collective would then run on one rank alone, outside the step, and the others would wait
    for it for ever. With a non-constant input it never does."""
    if tf.executing_eagerly():
        return tensor
    if isinstance(tensor, (list, tuple)):
        return [_unfoldable(t) for t in tensor]
    return tf.raw_ops.PlaceholderWithDefault(input=tensor, shape=tensor.shape)


class _GraphSafeOps:
    """The op library, each collective's tensor input (the first argument) made unfoldable."""

    def __init__(self, lib):
        self._lib = lib

    def __getattr__(self, name):
        op = getattr(self._lib, name)
        if name in ("ddp_join", "ddp_barrier"):  # no tensor input
            return op

        def call(tensor, *args, **kwargs):
            return op(_unfoldable(tensor), *args, **kwargs)

        setattr(self, name, call)  # made once: later calls find it without __getattr__
        return call


ops_lib = _GraphSafeOps(_ops_lib)
_c_lib = ctypes.CDLL(_LIBRARY)
_c_lib.ddp_tf_set_context.argtypes = [ctypes.c_size_t]
_c_lib.ddp_tf_set_context.restype = None

# Functions called when the ops let go of the job's context (what holds per-job state: the eager
# reducers, _reduce.py).
on_unbind = []
_bound = False


def bind():
    global _bound
    if not _bound:
        _c_lib.ddp_tf_set_context(_ddp._c_context())  # noqa: SLF001 - the extension's C handle
        _bound = True


def ready(what):
    """Before an operation: the job must exist; the ops get its context on first use (a script
    that called ddp.init() itself works too)."""
    if not _ddp.is_initialized():
        raise _ops.error(f"ddp.tensorflow.{what}() called before ddp.tensorflow.init() (or after "
                         f"shutdown())", "FAILED_PRECONDITION")
    bind()


def unbind():
    global _bound
    _c_lib.ddp_tf_set_context(0)
    _bound = False
    for forget in on_unbind:
        forget()


# ddp.shutdown() from anywhere (a script's own, elastic's reset) lets the ops go of the old
# context; the next operation binds the new one.
if unbind not in _job.shutdown_hooks:
    _job.shutdown_hooks.append(unbind)
