# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Variables set to a root rank's values on every rank: broadcast_variables (eager and in a
graph) and TensorFlow 1's broadcast_global_variables."""
import tensorflow as tf

from .. import _ops
from ._names import normalize
from .collectives import broadcast

def broadcast_variables(variables, root_rank, process_set=_ops.WORLD, _kind="broadcast_variables",
                        _name=None):
    """Assigns root_rank's values to the variables on every rank. Eagerly it is done on return;
    in a graph it returns the op that does it (a tf.group of the assignments), as Horovod's."""
    assigns = broadcast_assigns(variables, root_rank, process_set, _kind, _name)
    return None if tf.executing_eagerly() else tf.group(*assigns)


def broadcast_assigns(variables, root_rank, process_set, kind, name):
    """Each variable assigned root_rank's value: the assignments (in a graph, their new values)."""
    assigns = []
    for i, var in enumerate(variables):
        # The index first: Keras 3's variable names ("kernel", "bias") repeat across layers.
        label = name or getattr(var, "path", None) or getattr(var, "name", "")
        assigns.append(var.assign(broadcast(var, root_rank, name=f"{kind}.{i}.{normalize(label)}",
                                            ignore_name_scope=True, process_set=process_set)))
    return assigns


def broadcast_global_variables(root_rank, process_set=_ops.WORLD):
    """TensorFlow 1's graphs: the op that assigns root_rank's values to every global variable
    (tf.compat.v1.global_variables()). Eager TensorFlow has no global variables: there, use
    broadcast_variables(model.variables, root_rank) (RuntimeError, as Horovod's)."""
    if tf.executing_eagerly():
        raise RuntimeError(
            "ddp.tensorflow.broadcast_global_variables() does not work in eager mode (TensorFlow "
            "2 keeps no global variables): use broadcast_variables(model.variables, root_rank), "
            "or the Keras callback BroadcastGlobalVariablesCallback")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank, process_set,
                              _kind="broadcast_global_variables")
