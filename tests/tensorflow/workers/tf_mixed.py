# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""mixed_float16 with ddp.tensorflow.keras: DistributedOptimizer(LossScaleOptimizer(opt)) under
model.fit and in a custom tf.function step. The weights and the loss scale must come out
bit-identical on every rank and close (float16 rounding) to one process training on the whole
batches; a step whose gradients overflow on one rank only must be skipped by every rank, each
halving its scale, instead of leaving the others waiting: with the LossScaleOptimizer given to
DistributedOptimizer, and with the one Keras' compile wraps around a plain DistributedOptimizer.
Prints "rank R: ok"."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

import ddp.tensorflow as hvd_tf
import ddp.tensorflow.keras as hvd

import keras_common
from keras_common import (GLOBAL_BATCH, data, fail, flat, same_everywhere,
                          shard)


def make_model():
    return keras_common.make_model(output_dtype="float32")


def loss_scale_optimizer(lr):
    return keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(lr), initial_scale=2.0**10)


def fit_wrapped_by_keras(r, n, x, y):
    """A plain DistributedOptimizer under mixed_float16: Keras' compile puts its own
    LossScaleOptimizer around it. One batch overflows on the last rank only: every rank must
    skip it and halve the scale (without libddp's reduction before the overflow check, the rank
    that overflowed would skip the reduction and the others would wait for it)."""
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    opt = model.optimizer
    if not isinstance(opt, keras.optimizers.LossScaleOptimizer):
        fail(f"Keras did not wrap the optimizer under mixed_float16: {type(opt).__name__}")
    xs = shard(x, r, n)
    if r == n - 1:
        xs[GLOBAL_BATCH // n] = 1e5  # the second batch: past float16's range here only
    model.fit(xs, shard(y, r, n), batch_size=GLOBAL_BATCH // n, epochs=1, shuffle=False,
              verbose=0, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    same_everywhere("keras-wrapped.weights", flat(model))
    scale = float(opt.dynamic_scale.numpy())
    same_everywhere("keras-wrapped.scale", [scale])
    if scale > opt.initial_scale / 2:
        fail(f"the scale is {scale} after an overflow, from {opt.initial_scale}")


def fit(r, n, x, y):
    """model.fit with the distributed loss-scale optimizer; Keras must not wrap it again."""
    model = make_model()
    opt = hvd.DistributedOptimizer(loss_scale_optimizer(0.1))
    if not isinstance(opt, keras.optimizers.LossScaleOptimizer):
        fail(f"DistributedOptimizer(LossScaleOptimizer) is a {type(opt).__name__}")
    model.compile(optimizer=opt,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    if model.optimizer is not opt:
        fail("compile wrapped the distributed loss-scale optimizer in another")
    model.fit(shard(x, r, n), shard(y, r, n), batch_size=GLOBAL_BATCH // n, epochs=1,
              shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    same_everywhere("fit.weights", flat(model))
    same_everywhere("fit.scale", [opt.dynamic_scale.numpy()])
    return flat(model)


def one_process(x, y):
    """The same training in one process on the whole batches (no ddp)."""
    model = make_model()
    model.compile(optimizer=loss_scale_optimizer(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
    return flat(model)


def overflow_on_one_rank(r, n, x, y):
    """A custom step; at one step only the last rank's input overflows float16."""
    model = make_model()
    opt = hvd.DistributedOptimizer(loss_scale_optimizer(0.05))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    hvd_tf.broadcast_variables(model.variables, root_rank=0)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = opt.scale_loss(loss_fn(yb, model(xb, training=True)))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    xs, ys = shard(x, r, n), shard(y, r, n)
    per = GLOBAL_BATCH // n
    step(xs[:per], ys[:per])  # builds the optimizer
    before, scale = flat(model), float(opt.dynamic_scale.numpy())
    xb = xs[per:2 * per].copy()
    if r == n - 1:
        xb[0] = 1e5  # past float16's range (65504): inf and NaN in the gradients here only
    step(xb, ys[per:2 * per])
    if not np.array_equal(flat(model), before):
        fail("a step that overflowed on one rank was applied")
    if float(opt.dynamic_scale.numpy()) != scale / 2:
        fail(f"the scale after the overflow is {opt.dynamic_scale.numpy()}, not {scale / 2}")
    step(xs[2 * per:3 * per], ys[2 * per:3 * per])
    if np.array_equal(flat(model), before):
        fail("the step after the overflow was not applied")
    same_everywhere("overflow.weights", flat(model))
    same_everywhere("overflow.scale", [opt.dynamic_scale.numpy()])


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    x, y = data()
    fit_wrapped_by_keras(r, n, x, y)
    got = fit(r, n, x, y)
    want = one_process(x, y)
    if not np.allclose(got, want, rtol=1e-2, atol=2e-3):
        fail(f"fit: max difference {np.max(np.abs(got - want))} from one process's training")
    overflow_on_one_rank(r, n, x, y)
    print(f"rank {r}: ok", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
