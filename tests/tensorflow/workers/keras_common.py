# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""What the Keras workers (tf_keras.py, tf_mixed.py) share: the model, the data and its sharding
over the ranks, and the checks. Each rank trains on its part of every global batch."""
import sys

import keras
import numpy as np
import tensorflow as tf

import ddp.tensorflow as hvd

GLOBAL_BATCH = 24
STEPS = 6


def fail(what):
    print(f"rank {hvd.rank()}: FAILED: {what}", flush=True)
    sys.exit(1)


def make_model(output_dtype=None):
    """The same small MLP, the same initial weights, every time (output_dtype: its last layer's,
    e.g. float32 under mixed_float16)."""
    keras.utils.set_random_seed(7)
    return keras.Sequential([keras.Input((10,)), keras.layers.Dense(16, activation="tanh"),
                             keras.layers.Dense(3, dtype=output_dtype)])


def data():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((GLOBAL_BATCH * STEPS, 10)).astype(np.float32)
    y = rng.integers(0, 3, size=GLOBAL_BATCH * STEPS)
    return x, y


def shard(a, r, n):
    """Rank r's part of every global batch (contiguous within the batch, in batch order)."""
    per = GLOBAL_BATCH // n
    return np.concatenate([a[b * GLOBAL_BATCH + r * per:b * GLOBAL_BATCH + (r + 1) * per]
                           for b in range(STEPS)])


def flat(model):
    return np.concatenate([v.numpy().ravel() for v in model.trainable_variables])


def same_everywhere(what, values):
    """Fails unless every rank holds bit-identical `values`."""
    values = np.asarray(values).ravel()
    everyone = hvd.allgather(tf.constant(values[None, :]), name=f"check.{what}").numpy()
    if not all(np.array_equal(everyone[0], row) for row in everyone):
        fail(f"{what}: differs between the ranks")
