# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Keras training with ddp.tensorflow.keras: model.fit with DistributedOptimizer and the callbacks,
and a custom loop with DistributedGradientTape. Each rank trains on its part of every global
batch; the weights must come out bit-identical on every rank and equal (to float32 rounding) to
one process training on the whole batches. Prints "rank R: ok"."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

import ddp
import ddp.tensorflow as hvd_tf
import ddp.tensorflow.keras as hvd

from keras_common import (GLOBAL_BATCH, STEPS, data, fail, flat, make_model,
                          same_everywhere, shard)


def close(what, got, want):
    if not np.allclose(got, want, rtol=1e-5, atol=1e-6):
        fail(f"{what}: max difference {np.max(np.abs(got - want))} from one process's training")


def reference(x, y, lr, epochs=2):
    """One process, whole global batches: what the job must compute."""
    model = make_model()
    model.compile(optimizer=keras.optimizers.SGD(lr),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=epochs, shuffle=False, verbose=0)
    return flat(model)


def main():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    x, y = data()
    xs, ys = shard(x, r, n), shard(y, r, n)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    # model.fit: DistributedOptimizer + callbacks. Rank 1 starts from other weights: the broadcast
    # callback must give it rank 0's.
    model = make_model()
    if r == 1:
        for v in model.trainable_variables:
            v.assign(v + 1.0)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
    if type(opt).__name__ != "SGD" or not isinstance(opt, keras.optimizers.SGD):
        fail(f"DistributedOptimizer's class: {type(opt)}")
    model.compile(optimizer=opt, loss=loss_fn)
    history = model.fit(xs, ys, batch_size=GLOBAL_BATCH // n, epochs=2, shuffle=False, verbose=0,
                        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                   hvd.callbacks.MetricAverageCallback()])
    weights = flat(model)
    same_everywhere("fit", weights)
    close("fit", weights, reference(x, y, 0.1))
    # MetricAverageCallback: every rank logged the job's average loss.
    losses = np.array(history.history["loss"], dtype=np.float64)
    same_everywhere("averaged metrics", losses)

    # A custom loop with DistributedGradientTape, in a tf.function.
    model = make_model()
    sgd = keras.optimizers.SGD(0.1)
    per = GLOBAL_BATCH // n

    @tf.function
    def step(xb, yb):
        with hvd_tf.DistributedGradientTape(tf.GradientTape()) as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        sgd.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for _ in range(2):
        for b in range(STEPS):
            step(xs[b * per:(b + 1) * per], ys[b * per:(b + 1) * per])
    weights = flat(model)
    same_everywhere("tape", weights)
    close("tape", weights, reference(x, y, 0.1))

    # The same loop eagerly: the reduction runs as one traced function, whose allreduces start
    # together (not one op at a time), under the same names every step, which the engine's
    # response cache then knows.
    model = make_model()
    sgd = keras.optimizers.SGD(0.1)
    before = ddp.engine_stats()
    for _ in range(2):
        for b in range(STEPS):
            with hvd_tf.DistributedGradientTape(tf.GradientTape()) as tape:
                loss = loss_fn(ys[b * per:(b + 1) * per], model(xs[b * per:(b + 1) * per],
                                                                 training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            sgd.apply_gradients(zip(grads, model.trainable_variables))
    after = ddp.engine_stats()
    hits = after["cache_hits"] - before["cache_hits"]
    collectives = after["collectives"] - before["collectives"]
    weights = flat(model)
    same_everywhere("eager tape", weights)
    close("eager tape", weights, reference(x, y, 0.1))
    traced = [k for k in hvd_tf._reduce._eager_reducers if k[0] == "DistributedGradientTape"]
    if len(traced) != 1:
        fail(f"the eager reduction was traced for {len(traced)} configurations, not 1")
    grads_per_step = len(model.trainable_variables)
    if hits < (2 * STEPS - 1) * grads_per_step:
        fail(f"{hits} response-cache hits in {2 * STEPS} eager steps: the names change")
    # One op at a time would take exactly one collective per gradient; started together, the
    # engine fuses those that are ready at once (at least once in 12 steps).
    if collectives >= 2 * STEPS * grads_per_step:
        fail(f"{collectives} collectives for {2 * STEPS * grads_per_step} eager gradients: "
             f"never fused, reduced one by one")

    # Grouped allreduces (num_groups=2) instead of one per gradient: the same result.
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), num_groups=2),
                  loss=loss_fn)
    model.fit(xs, ys, batch_size=per, epochs=1, shuffle=False, verbose=0)
    weights = flat(model)
    same_everywhere("grouped", weights)
    close("grouped", weights, reference(x, y, 0.1, epochs=1))

    # Gradient accumulation: 2 local passes per update, then one reduction of their sum
    # (Horovod's default), or of their average (average_aggregated_gradients=True, Keras' own
    # accumulation): equal to one process applying the sum (an SGD of twice the rate on the
    # average) or the average of each pair of global batches.
    for average in (False, True):
        model = make_model()
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=2,
                                       average_aggregated_gradients=average)
        model.compile(optimizer=opt, loss=loss_fn)
        model.fit(xs, ys, batch_size=per, epochs=1, shuffle=False, verbose=0)
        weights = flat(model)
        same_everywhere(f"accumulated.{average}", weights)
        ref = make_model()
        ref.compile(optimizer=keras.optimizers.SGD(0.1 if average else 0.2,
                                                   gradient_accumulation_steps=2), loss=loss_fn)
        ref.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
        close(f"accumulated (average_aggregated_gradients={average})", weights, flat(ref))

    # Warmup: the rate ends at initial_lr after warmup_epochs.
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)), loss=loss_fn)
    warm = hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.05, warmup_epochs=2)
    hist = model.fit(xs, ys, batch_size=per, epochs=3, shuffle=False, verbose=0, callbacks=[warm])
    lrs = hist.history["lr"]
    if not (abs(lrs[-1] - 0.05) < 1e-9 and (n == 1 or lrs[0] < 0.05)):
        fail(f"warmup's rates {lrs}")
    # Momentum correction: each rate change scales the momentum buffers (SGD's, RMSprop's, also
    # inside a LossScaleOptimizer) by new / old rate; not with momentum_correction=False.
    cases = [(True, lambda: keras.optimizers.SGD(0.05, momentum=0.9), "momentums"),
             (False, lambda: keras.optimizers.SGD(0.05, momentum=0.9), "momentums"),
             (True, lambda: keras.optimizers.RMSprop(0.05, momentum=0.9), "_momentums"),
             (True, lambda: keras.optimizers.LossScaleOptimizer(
                 keras.optimizers.SGD(0.05, momentum=0.9)), "momentums")]
    for correct, make_opt, attribute in cases:
        model = make_model()
        opt = hvd.DistributedOptimizer(make_opt())
        model.compile(optimizer=opt, loss=loss_fn)
        model.fit(xs[:per], ys[:per], batch_size=per, epochs=1, shuffle=False, verbose=0)
        buffers = getattr(getattr(opt, "inner_optimizer", opt), attribute)
        if not buffers:
            fail(f"{type(opt).__name__} has no {attribute}")
        for m in buffers:
            m.assign(tf.ones_like(m))
        warm = hvd.callbacks.LearningRateWarmupCallback(
            initial_lr=0.05, warmup_epochs=2, momentum_correction=correct, steps_per_epoch=4)
        warm.set_model(model)
        warm.on_epoch_begin(0)
        warm.on_train_batch_begin(2)  # the rate becomes warm._rate(2), from 0.05
        want = warm._rate(2) / 0.05 if correct and n > 1 else 1.0
        got = [float(np.max(np.abs(m.numpy() - want))) for m in buffers]
        if max(got) > 1e-6:
            fail(f"momentum_correction={correct}, {type(opt).__name__}: buffers {want} "
                 f"expected, off by {max(got)}")
    hvd.shutdown()
    print(f"rank {r}: ok", flush=True)


if __name__ == "__main__":
    main()
