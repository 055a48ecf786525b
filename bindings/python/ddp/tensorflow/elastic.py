# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Elastic training for TensorFlow, Horovod's `horovod.tensorflow.elastic`: `run`,
`TensorFlowState` (variables) and `TensorFlowKerasState` (a Keras model and its optimizer), with
`State`, `ObjectState` and `HostsUpdatedInterrupt`. How the job re-forms is told in
`ddp.elastic` (the same driver as PyTorch's); launch with
`ddprun --min-np/--max-np/--host-discovery-script`.

    state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...                 # steps with DistributedGradientTape
            state.commit()

    train(state)

TensorFlow 2's eager mode (what tf.function steps run from); TensorFlow 1's sessions are not
supported (ValueError)."""
from __future__ import annotations

import functools
import re

import numpy as np
import tensorflow as tf

from .. import _ddp, _ops
from ..elastic import HostsUpdatedInterrupt, ObjectState, State, generation, run_fn
from . import job as _job
from .job import rank
from .variables import broadcast_variables
from .extras import broadcast_object

# A ddp.tensorflow op's failure that a new generation of the job can get past: a rank died,
# stalled or left (libddp's codes for them); others (a bad argument, a disagreement) are the
# program's and raised as they are.
_RECOVERABLE = ("ABORTED", "UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "UNKNOWN",
                "INTERNAL")
_CODE_NAMES = {getattr(tf.errors, n): n for n in dir(tf.errors)
               if n.isupper() and isinstance(getattr(tf.errors, n), int)}
_DDP_OP = re.compile(r"\bDdp[A-Z][A-Za-z]*(_[0-9]+)?\b")


def _as_ddp_error(e: tf.errors.OpError):
    """The DDPError for a ddp.tensorflow op's recoverable failure, else None. The ops are named
    DdpAllreduce, ... in TensorFlow's message (eagerly "[Op:DdpAllreduce]", in a graph the node)."""
    code = _CODE_NAMES.get(e.error_code, "UNKNOWN")
    if code not in _RECOVERABLE or not _DDP_OP.search(str(e.message)):
        return None
    return _ops.error(e.message, code)


def _translated(func):
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except tf.errors.OpError as e:
            converted = _as_ddp_error(e)
            if converted is None:
                raise
            raise converted from e
    return wrapper


def run(func):
    """Decorates `func(state, ...)` to run elastically: after a failure of a libddp op (a rank
    died or stalled: TensorFlow's error for it) the state is put back to its last commit(), the
    job re-formed without the failed workers and every worker's state brought to rank 0's; after
    added hosts, the job re-formed with them. Other errors are the program's: raised."""
    return run_fn(_translated(func), _reset)


def _reset():
    """Leaves the job and joins its next generation, binding the ops to it at once: a traced
    function (Keras' train step) runs the ops without the Python that would bind them. The
    compressed tensors' residuals are carried over (docs/compression.md)."""
    _ddp.carry_compression_residuals()
    _job.shutdown()
    _job.init()


def _broadcast_object(obj):
    return broadcast_object(obj, root_rank=0)


def _eager(what):
    if not tf.executing_eagerly():
        raise ValueError(f"ddp.tensorflow.elastic.{what} needs eager execution (TensorFlow 2); "
                         f"TensorFlow 1's graphs and sessions are not supported")


class _Saved:
    """Copies of variables' values (what commit() saved), put back by restore()."""

    def __init__(self):
        self._pairs = []

    def save(self, variables):
        self._pairs = [(v, np.array(v)) for v in variables]  # copies, on the host

    def restore(self):
        for var, value in self._pairs:
            var.assign(value)


class TensorFlowState(ObjectState):
    """The state of a list of tf.Variables, and plain values as keyword arguments:
    `TensorFlowState(variables, epoch=0, batch=0)`. sync() assigns rank 0's values on every
    worker (Horovod's broadcasts them when the state is made, which a worker joining later never
    sees); commit() copies them; restore() puts the copies back."""

    def __init__(self, variables=None, session=None, **kwargs):
        _eager("TensorFlowState")
        if session is not None:
            raise ValueError("ddp.tensorflow.elastic.TensorFlowState: TensorFlow 1 sessions are "
                             "not supported")
        if not variables:
            raise ValueError("ddp.tensorflow.elastic.TensorFlowState: give the variables "
                             "(TensorFlow 2 keeps no global variables)")
        self.variables = list(variables)
        self._saved = _Saved()
        self._saved.save(self.variables)
        super().__init__(bcast_object=_broadcast_object, get_rank=rank, **kwargs)

    def save(self):
        self._saved.save(self.variables)
        super().save()

    def restore(self):
        self._saved.restore()
        super().restore()

    def sync(self):
        broadcast_variables(self.variables, root_rank=0, _kind="elastic.sync")
        self._saved.save(self.variables)
        super().sync()


class TensorFlowKerasState(ObjectState):
    """The state of a built Keras model and its optimizer (given, or the model's compiled one),
    and plain values as keyword arguments. sync() builds the optimizer where it is not yet
    (a worker that joins has not stepped), then assigns rank 0's model and optimizer variables
    on every worker."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        del backend  # TensorFlow 1's Keras backend: not used
        _eager("TensorFlowKerasState")
        if not getattr(model, "built", True):
            raise ValueError("ddp.tensorflow.elastic: the model must be built first "
                             "(model.build(input_shape))")
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self._saved = _Saved()
        self._save_model()
        super().__init__(bcast_object=_broadcast_object, get_rank=rank, **kwargs)

    def _variables(self):
        out = list(self.model.variables)
        if self.optimizer is not None and getattr(self.optimizer, "built", False):
            out += list(self.optimizer.variables)
        return out

    def _save_model(self):
        self._saved.save(self._variables())

    def save(self):
        self._save_model()
        super().save()

    def restore(self):
        self._saved.restore()
        super().restore()

    def sync(self):
        if self.optimizer is not None and not getattr(self.optimizer, "built", True):
            # Every worker's optimizer has the same variables before they are broadcast.
            self.optimizer.build(self.model.trainable_variables)
        broadcast_variables(self._variables(), root_rank=0, _kind="elastic.sync")
        self._save_model()
        super().sync()


__all__ = ["run", "State", "ObjectState", "TensorFlowState", "TensorFlowKerasState",
           "HostsUpdatedInterrupt", "generation"]
