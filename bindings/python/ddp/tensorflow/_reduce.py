# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Gradients reduced over the ranks, for DistributedGradientTape and Keras' DistributedOptimizer:
dense ones an allreduce each or grouped, sparse ones gathered, eagerly through a traced
function so that the engine fuses them."""
import tensorflow as tf

from .. import _ops
from .._ops import ReduceOp
from ._library import on_unbind
from ._names import not_in_xla, op_code
from .collectives import _sparse_allreduce, allreduce, grouped_allreduce


def _group_indices(groups, num_groups, dense, variables, what):
    """Horovod's groups as lists of gradient indices: `groups` an int (that many groups, as
    num_groups), or lists of variables (matched by identity with `variables`) or of indices.
    Every dense gradient in no group is reduced alone (Horovod's rule)."""
    if isinstance(groups, int) and not isinstance(groups, bool):
        num_groups, groups = groups, None
    if groups is None:
        if not num_groups:
            return []
        k = max(1, min(num_groups, len(dense)))
        return [dense[j * len(dense) // k:(j + 1) * len(dense) // k] for j in range(k)]
    where = {id(v): i for i, v in enumerate(variables or [])}
    out = []
    for group in groups:
        members = []
        for x in group:
            if isinstance(x, int) and not isinstance(x, bool):
                members.append(x)
            elif id(x) in where:
                members.append(where[id(x)])
            else:
                raise _ops.error(f"ddp.tensorflow.{what}: groups holds {x!r}, which is neither a "
                                 f"gradient's index nor one of the variables being reduced")
        out.append(members)
    return out


# Eager reductions, traced: (configuration) -> tf.function. Emptied at shutdown.
_eager_reducers = {}
on_unbind.append(_eager_reducers.clear)  # process sets may be numbered anew in the next job


def _reduce_gradients(grads, op, compression, sparse_as_dense, predivide, num_groups, groups,
                      process_set, name, variables=None, what="DistributedGradientTape",
                      scale=1.0):
    """Gradients reduced over the ranks: dense ones an allreduce each, or in grouped allreduces
    (num_groups, groups), sparse ones (IndexedSlices) through allgather unless sparse_as_dense;
    None stays None (every rank must agree on which are None, as with Horovod). Sum and Average
    results are multiplied by `scale` (in the reduction's postscale).

    Eager, each op would wait for its result before the next starts, so the engine would
    negotiate and reduce the gradients one by one. As Horovod does, the reduction then runs as a
    tf.function (traced once per configuration and list of gradient shapes), whose ops
    TensorFlow starts together and the engine fuses."""
    if not tf.executing_eagerly():
        return _reduce_in_graph(grads, op, compression, sparse_as_dense, predivide, num_groups,
                                groups, process_set, name, variables, what, scale)
    if groups is not None and not isinstance(groups, int):
        # Variables as their indices: the traced function needs no variables.
        groups = tuple(tuple(g) for g in _group_indices(groups, 0, [], variables, what))
    key = (what, name, op, compression, sparse_as_dense, predivide, num_groups, groups,
           _ops.set_id(process_set), id(process_set), scale)
    try:
        hash(key)
    except TypeError:  # a compressor instance that cannot be hashed
        key = key[:3] + (id(compression),) + key[4:]
    reduce = _eager_reducers.get(key)
    if reduce is None:
        def traced(gs):
            return _reduce_in_graph(gs, op, compression, sparse_as_dense, predivide, num_groups,
                                    groups, process_set, name, None, what, scale)
        # reduce_retracing: sparse gradients (IndexedSlices) change their row count from step
        # to step; after a retrace the shapes generalize instead of tracing every step.
        reduce = _eager_reducers[key] = tf.function(traced, autograph=False,
                                                    reduce_retracing=True)
    return list(reduce(list(grads)))


def _reduce_in_graph(grads, op, compression, sparse_as_dense, predivide, num_groups, groups,
                     process_set, name, variables, what, scale):
    not_in_xla(what)
    grads = list(grads)
    for i, g in enumerate(grads):
        if isinstance(g, tf.IndexedSlices) and sparse_as_dense:
            grads[i] = tf.convert_to_tensor(g)
    dense = [i for i, g in enumerate(grads)
             if g is not None and not isinstance(g, tf.IndexedSlices)]
    out = list(grads)
    scaled = op in (ReduceOp.SUM, ReduceOp.AVERAGE)
    pre = 1.0 / predivide if scaled else 1.0
    post = predivide * scale if scaled else 1.0
    grouped = set()
    for k, members in enumerate(_group_indices(groups, num_groups, dense, variables, what)):
        members = [i for i in members if i in dense and i not in grouped]
        if not members:
            continue
        grouped.update(members)
        reduced = grouped_allreduce([grads[i] for i in members], op=op, compression=compression,
                                    prescale_factor=pre, postscale_factor=post,
                                    name=f"{name}.group{k}", process_set=process_set,
                                    ignore_name_scope=True)
        for i, r in zip(members, reduced):
            out[i] = r
    # The rest (all of them by default, as Horovod): an allreduce each, started as soon as
    # TensorFlow has computed the gradient; the engine fuses those that are ready together.
    for i in dense:
        if i not in grouped:
            out[i] = allreduce(grads[i], op=op,
                               compression=_ops.for_gradient(compression, grads[i].shape),
                               prescale_factor=pre,
                               postscale_factor=post, name=f"{name}.grad{i}",
                               process_set=process_set, ignore_name_scope=True)
    for i, g in enumerate(grads):
        if isinstance(g, tf.IndexedSlices):
            # The scale is the optimizer's (aggregation over steps), not a user's factor, which
            # sparse reductions refuse as Horovod's do: applied here, to the gathered values.
            r = _sparse_allreduce(g, op_code(op, None, what), 1.0, 1.0, f"{name}.sparse{i}",
                                  process_set, True, what)
            if scaled and scale != 1.0:
                r = tf.IndexedSlices(r.values * tf.cast(scale, r.values.dtype), r.indices,
                                     dense_shape=r.dense_shape)
            out[i] = r
    return out
