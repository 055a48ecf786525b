# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Horovod's `horovod.tensorflow.util` helpers that scripts and Horovod's own tests import."""
import tensorflow as tf


def _executing_eagerly():
    """Whether TensorFlow runs eagerly here (False inside a tf.function or a TF1-style graph)."""
    return tf.executing_eagerly()


__all__ = ["_executing_eagerly"]
