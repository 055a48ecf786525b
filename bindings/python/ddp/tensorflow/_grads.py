# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The ops' gradients, as Horovod's: each consumes its collective's result on every rank, so that
TensorFlow never prunes the collective on some ranks while others wait in it."""
import tensorflow as tf

from .. import _ddp, _ops
from .._ops import ReduceOp
from ._library import ops_lib
from ._names import grad_name, set_of


@tf.RegisterGradient("DdpAllreduce")
def _allreduce_grad(op, grad):
    code = op.get_attr("reduce_op")
    if code not in (int(ReduceOp.SUM), int(ReduceOp.AVERAGE)):
        raise _ops.error(f"ddp.tensorflow.allreduce: op {_ops.op_name(code)} has no gradient")
    return [ops_lib.ddp_allreduce(grad, grad_name("allreduce", op),
                                   reduce_op=code,
                                   prescale_factor=op.get_attr("prescale_factor"),
                                   postscale_factor=op.get_attr("postscale_factor"),
                                   process_set=set_of(op)),
            None]


@tf.RegisterGradient("DdpGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    code = op.get_attr("reduce_op")
    if code not in (int(ReduceOp.SUM), int(ReduceOp.AVERAGE)):
        raise _ops.error(f"ddp.tensorflow.grouped_allreduce: op {_ops.op_name(code)} has no "
                         f"gradient")
    grads = [tf.zeros_like(x) if g is None else g for g, x in zip(grads, op.inputs[:-1])]
    reduced = ops_lib.ddp_grouped_allreduce(
        grads, grad_name("grouped_allreduce", op), reduce_op=code,
        prescale_factor=op.get_attr("prescale_factor"),
        postscale_factor=op.get_attr("postscale_factor"), process_set=set_of(op))
    return list(reduced) + [None]


@tf.RegisterGradient("DdpAllgather")
def _allgather_grad(op, grad):
    process_set = set_of(op)
    reduced = ops_lib.ddp_allreduce(grad, grad_name("allgather", op),
                                     reduce_op=int(ReduceOp.AVERAGE), process_set=process_set)
    rows = tf.reshape(tf.shape(op.inputs[0], out_type=tf.int64)[0], [1])
    all_rows = ops_lib.ddp_allgather(rows, grad_name("allgather.rows", op),
                                      process_set=process_set)
    members = _ops.process_set_ranks(process_set)
    mine = members.index(_ddp.rank())
    # The number of pieces must be static (inside a tf.function the gathered shape is not).
    all_rows = tf.reshape(all_rows, [len(members)])
    return [tf.split(reduced, all_rows, num=len(members), axis=0)[mine], None]


@tf.RegisterGradient("DdpBroadcast")
def _broadcast_grad(op, grad):
    process_set = set_of(op)
    reduced = ops_lib.ddp_allreduce(grad, grad_name("broadcast", op),
                                     reduce_op=int(ReduceOp.AVERAGE), process_set=process_set)
    members = _ops.process_set_ranks(process_set)
    if members[op.get_attr("root_rank")] != _ddp.rank():
        # Zero through the result, never tf.zeros_like(reduced): in a graph TensorFlow folds a
        # zeros_like of a static shape into a constant, the allreduce then feeds nothing and is
        # pruned on these ranks, and the root waits for it for ever. A gradient must keep its
        # collective on every rank.
        reduced = reduced * tf.constant(0, dtype=reduced.dtype)
    return [reduced, None]


@tf.RegisterGradient("DdpAlltoall")
def _alltoall_grad(op, grad):
    process_set = set_of(op)
    return [ops_lib.ddp_alltoall(grad, grad_name("alltoall", op),
                                  process_set=process_set), None]


@tf.RegisterGradient("DdpReducescatter")
def _reducescatter_grad(op, grad):
    code = op.get_attr("reduce_op")
    if code not in (int(ReduceOp.SUM), int(ReduceOp.AVERAGE)):
        raise _ops.error(f"ddp.tensorflow.reducescatter: op {_ops.op_name(code)} has no "
                         f"gradient")
    process_set = set_of(op)
    scale = op.get_attr("prescale_factor") * op.get_attr("postscale_factor")
    if code == int(ReduceOp.SUM):
        scale *= len(_ops.process_set_ranks(process_set))
    if scale != 1.0:
        grad = grad * tf.cast(scale, grad.dtype)
    return [ops_lib.ddp_allgather(grad, grad_name("reducescatter", op),
                                   process_set=process_set), None]
