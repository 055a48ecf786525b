# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Horovod's DistributedGradientTape and PartialDistributedGradientTape."""
import tensorflow as tf

from .. import _ops
from .._ops import Average
from .._generations import enabled as elastic_enabled
from .extras import size_op
from ._reduce import _reduce_gradients


class DistributedGradientTape:
    """Wraps a tf.GradientTape: gradient() returns the gradients reduced over the ranks (Average
    unless op=), Horovod's DistributedGradientTape. Dense gradients: an allreduce each (the
    engine fuses them), or grouped allreduces with num_groups or groups (lists of source
    indices); sparse ones (IndexedSlices) through allgather unless sparse_as_dense.

    register_local_source(variable): that variable's gradient is this rank's own (a model-
    parallel part: an embedding shard) and is not reduced; with scale_local_gradients (the
    default, as Horovod's) it is divided by the set's size, the scale the reduced ones carry."""

    def __init__(self, gradtape, device_dense="", device_sparse="", compression=None,
                 sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                 groups=None, process_set=_ops.WORLD, scale_local_gradients=True):
        del device_dense, device_sparse
        self._local = {}  # id -> the variable (kept, so that its id stays its own)
        self.scale_local_gradients = scale_local_gradients
        self._tape = gradtape
        self._op = _ops.check_op(op, "DistributedGradientTape")
        self._compression = compression
        self._sparse_as_dense = sparse_as_dense
        self._predivide = float(gradient_predivide_factor)
        self._num_groups = num_groups
        self._groups = groups
        self._process_set = process_set
        self._calls = 0

    def __getattr__(self, name):  # watch, stop_recording, ... as the wrapped tape's
        return getattr(self._tape, name)

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)

    def register_local_source(self, source):
        """This variable's gradient stays this rank's (not reduced over the ranks)."""
        self._local[id(source)] = source

    def _is_local(self, source):
        return id(source) in self._local

    def gradient(self, target, sources, output_gradients=None, **kwargs):
        grads = self._tape.gradient(target, sources, output_gradients, **kwargs)
        flat = tf.nest.flatten(grads)
        flat_sources = tf.nest.flatten(sources)
        local = {i for i, s in enumerate(flat_sources) if self._is_local(s)}
        if tf.executing_eagerly():
            # One reduction at a time (each waits for its result): one name for all of them, so
            # that the engine's response cache knows it from the second step on.
            name = "DistributedGradientTape"
        else:
            self._calls += 1
            name = f"DistributedGradientTape.{self._calls}"
        # Local gradients leave the reduction as None (which it passes through): every other
        # gradient keeps its index, which groups of indices refer to.
        shared = [None if i in local else g for i, g in enumerate(flat)]
        reduced = _reduce_gradients(shared, op=self._op, compression=self._compression,
                                    sparse_as_dense=self._sparse_as_dense,
                                    predivide=self._predivide, num_groups=self._num_groups,
                                    groups=self._groups, process_set=self._process_set,
                                    name=name, variables=flat_sources)
        for i in local:
            reduced[i] = _local_gradient(flat[i], self._process_set, 1.0,
                                         self.scale_local_gradients)
        return tf.nest.pack_sequence_as(grads, reduced)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None, **kwargs):
        """gradient(), split: ([(local source, its gradient)], [(source, reduced gradient)])."""
        grads = self.gradient(target, sources, output_gradients, **kwargs)
        local, shared = [], []
        for s, g in zip(tf.nest.flatten(sources), tf.nest.flatten(grads)):
            (local if self._is_local(s) else shared).append((s, g))
        return local, shared


def _local_gradient(grad, process_set, scale, over_size):
    """A local source's gradient with the scale the reduced ones carry: `scale` (a Keras
    optimizer's accumulation) and, with over_size (scale_local_gradients, Horovod's default),
    divided by the set's size."""
    if grad is None:
        return None
    values = grad.values if isinstance(grad, tf.IndexedSlices) else grad
    factor = tf.cast(scale, values.dtype)
    if over_size:
        factor = factor / tf.cast(_set_size(process_set), values.dtype)
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(values * factor, grad.indices, grad.dense_shape)
    return values * factor


def _set_size(process_set):
    """The set's size: read when the graph runs in an elastic job (a traced function outlives a
    resize), else a constant."""
    if elastic_enabled():
        return size_op(_ops.set_id(process_set))
    return len(_ops.process_set_ranks(_ops.set_id(process_set)))


def _local_variables(local_layers, what):
    """The trainable variables of Keras layers (one layer, a list, or None)."""
    import keras  # lazy: Keras only for local layers (import ddp.tensorflow stays free of it)
    if local_layers is None:
        return []
    if isinstance(local_layers, keras.layers.Layer):
        local_layers = [local_layers]
    local_layers = list(local_layers)
    if not all(isinstance(layer, keras.layers.Layer) for layer in local_layers):
        raise _ops.error(f"ddp.tensorflow.{what}: local_layers must be Keras layers")
    return [v for layer in local_layers for v in layer.trainable_weights]


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="", compression=None,  # noqa: N802 - Horovod's name
                                   sparse_as_dense=False, op=Average,
                                   gradient_predivide_factor=1.0, num_groups=0, groups=None,
                                   process_set=_ops.WORLD, local_layers=None,
                                   scale_local_gradients=True):
    """A DistributedGradientTape whose local_layers' (Keras layers) trainable variables are
    local sources: their gradients stay this rank's (divided by the set's size unless
    scale_local_gradients=False), as Horovod's."""
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients)
    for var in _local_variables(local_layers, "PartialDistributedGradientTape"):
        tape.register_local_source(var)
    return tape
