# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""How the ranks agree on an operation's name (given, from a graph's node names, or counted
eagerly), the checks every op makes first (not inside XLA), and reduce ops as codes."""
import re

import tensorflow as tf
from tensorflow.python.ops import control_flow_util

from .. import _ddp, _ops

def normalize(name):
    return re.sub(r"[^a-zA-Z0-9_.\-]", "_", name)


def graph_unique(name):
    """Inside a graph (tf.function): the name made unique in that graph, as TensorFlow makes node
    names unique (the same on every rank: a trace is deterministic), so that two operations of one
    graph never share a name while both are in flight."""
    return normalize(tf.compat.v1.get_default_graph().unique_name(name, mark_as_used=True))


def name_of(kind, tensor, name, process_set, ignore_name_scope=False):
    """The name the ranks agree on. Given: that name (under the graph's name scope unless
    ignore_name_scope, as in Horovod). Inside a graph (tf.function): from the tensor's own name,
    unique in the graph. Eager: `<kind>.noname.<n>`, counted per kind and process set like
    ddp.torch's."""
    set_id = _ops.set_id(process_set)
    eager = tf.executing_eagerly()
    if name is not None:
        if not isinstance(name, str) or not name:
            raise _ops.error(f"ddp.tensorflow.{kind}: name must be a non-empty string, got "
                             f"{name!r}")
        if eager:
            return normalize(name)
        if not ignore_name_scope:
            scope = tf.compat.v1.get_default_graph().get_name_scope()
            if scope:
                name = f"{scope}/{name}"
        return graph_unique(name)
    if not eager and getattr(tensor, "name", None):
        return graph_unique(f"{kind}.{tensor.name.replace(':', '_')}")
    return _ddp.auto_name(kind, set_id)


def set_of(op):
    return op.get_attr("process_set")


def grad_name(kind, op):
    """A gradient op's name: in a graph, from the forward op's node name (stable across traces
    and ranks, as Horovod's); eager, counted."""
    if tf.executing_eagerly():
        return _ddp.auto_name(f"{kind}.grad", set_of(op))
    # tf.function's gradient functions get a stand-in op without a name: the graph's own
    # uniquing still numbers them alike on every rank.
    label = getattr(op, "name", None)
    return graph_unique(f"{kind}.grad.{label}" if label else f"{kind}.grad")


def not_in_xla(what):
    """The ops have no XLA kernels: a step compiled with XLA (Keras 3 turns jit_compile on by
    itself where a GPU is) cannot contain them; say so instead of failing to compile."""
    if tf.executing_eagerly():
        return
    if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        raise _ops.error(f"ddp.tensorflow.{what}: the ops cannot run inside an XLA-compiled "
                         f"function; compile the model with jit_compile=False (Keras 3 turns "
                         f"it on by itself when a GPU is present)", "UNIMPLEMENTED")


def op_code(op, average, what):
    return int(_ops.check_op(_ops.resolve_op(op, average, what), what))
