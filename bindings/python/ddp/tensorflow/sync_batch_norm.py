# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Horovod's SyncBatchNormalization for Keras 3: batch normalization whose training statistics
are the whole job's batch, not this rank's."""
import keras
import tensorflow as tf

from .. import _ops
from .._ops import Sum
from .collectives import allreduce


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """keras.layers.BatchNormalization whose mean and variance, in training, are those of every
    rank's batch together (one allreduce per call, inside the layer's graph); the moving
    statistics, and so inference, follow them alike on every rank.

    Ranks' batches may differ in size (and in masked elements): each rank contributes its count
    with its sums, where Horovod's averages the ranks' means as if the batches were equal. The
    gradient flows through the reduction (the allreduce's, a sum over the ranks, as Horovod's).
    `fused` is Horovod's argument (Keras 3 has no fused kernel: only False or omitted is taken);
    `synchronized` is Keras' own for tf.distribute, which this layer replaces."""

    def __init__(self, fused=False, process_set=_ops.WORLD, **kwargs):
        if fused:
            raise ValueError("SyncBatchNormalization does not support fused=True")
        if kwargs.get("synchronized"):
            raise ValueError("SyncBatchNormalization synchronizes through libddp; Keras' "
                             "synchronized=True (tf.distribute) cannot be combined with it")
        kwargs.pop("synchronized", None)
        if not kwargs.get("name"):
            kwargs["name"] = "sync_batch_normalization"
        super().__init__(**kwargs)
        self._process_set = process_set

    def _moments(self, inputs, mask):
        mean, variance = super()._moments(inputs, mask)
        if len(_ops.process_set_ranks(_ops.set_id(self._process_set))) == 1:
            return mean, variance
        if mask is None:  # the elements per channel: the reduced axes' extent
            shape = tf.shape(inputs)
            count = tf.reduce_prod([shape[a] for a in self._reduction_axes])
        else:
            count = tf.reduce_sum(tf.cast(mask, tf.int64))
        count = tf.reshape(tf.cast(count, mean.dtype), [1])
        m, v = tf.reshape(mean, [-1]), tf.reshape(variance, [-1])
        # sum x = n m and sum x^2 = n (v + m^2) over the ranks, with n: one allreduce.
        total = allreduce(tf.concat([count * m, count * (v + tf.square(m)), count], axis=0),
                          op=Sum, process_set=self._process_set)
        k = tf.size(m)
        n = total[2 * k]
        group_mean = total[:k] / n
        group_variance = tf.maximum(total[k:2 * k] / n - tf.square(group_mean), 0.0)
        return (tf.reshape(group_mean, tf.shape(mean)),
                tf.reshape(group_variance, tf.shape(variance)))

    def get_config(self):
        config = super().get_config()
        config.pop("synchronized", None)
        return config


__all__ = ["SyncBatchNormalization"]
