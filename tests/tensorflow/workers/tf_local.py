# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Horovod's TensorFlow API around local state, on N ranks: SyncBatchNormalization (ranks'
batches of different sizes) against Keras' BatchNormalization on every rank's batch together, in
value, moving statistics and gradient; DistributedGradientTape.register_local_source and
PartialDistributedGradientTape; Keras' PartialDistributedOptimizer in fit and accumulating;
sparse_as_dense and sparse gradients accumulated; the accumulators after an overflow; the
broadcast callback with local variables; LearningRateScheduleCallback; broadcast_global_variables
in a TF1 graph and its refusal eagerly; broadcast_object_fn; the elastic states (sync, restore,
commit). What Horovod's own tests check with Keras-2-only APIs, on Keras 3. Prints "rank R: ok"."""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

import ddp.tensorflow as hvd
import ddp.tensorflow.keras as hk


def fail(what, detail):
    print(f"rank {hvd.rank()}: FAILED: {what}: {detail}", flush=True)
    sys.exit(1)


def close(what, got, want, tol=1e-5):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape or not np.allclose(got, want, rtol=tol, atol=tol):
        fail(what, f"got {str(got.tolist())[:300]}, want {str(want.tolist())[:300]}")


def batch_of(rank, channels=3):
    """Rank r's batch: r + 2 rows (sizes differ), values apart from the others'."""
    rng = np.random.default_rng(100 + rank)
    return (rng.normal(size=(rank + 2, channels)) * (rank + 1) + rank).astype(np.float32)


def check_sync_batch_norm(r, n):
    x = batch_of(r)
    whole = np.concatenate([batch_of(q) for q in range(n)])
    weights = np.random.default_rng(7).normal(size=whole.shape).astype(np.float32)
    mine = slice(sum(q + 2 for q in range(r)), sum(q + 2 for q in range(r + 1)))
    for mode in ("eager", "tf.function"):
        sync = hvd.SyncBatchNormalization(momentum=0.5)
        plain = keras.layers.BatchNormalization(momentum=0.5)
        sync.build(x.shape)  # the variables before the traced function is
        plain.build(whole.shape)
        xs = tf.Variable(x)
        xw = tf.Variable(whole)

        def run(layer, inputs, w):
            with tf.GradientTape() as tape:
                y = layer(inputs, training=True)
                loss = tf.reduce_sum(y * w)
            return y, tape.gradient(loss, inputs)

        if mode == "tf.function":
            run = tf.function(run)
        y, dx = run(sync, xs, weights[mine])
        y_all, dx_all = run(plain, xw, weights)
        close(f"SyncBatchNormalization {mode}: output", y, y_all.numpy()[mine])
        close(f"SyncBatchNormalization {mode}: moving mean", sync.moving_mean, plain.moving_mean)
        close(f"SyncBatchNormalization {mode}: moving variance", sync.moving_variance,
              plain.moving_variance)
        # Each rank's loss is its rows' part of one loss over the whole batch; the gradient of
        # that whole loss, for this rank's rows.
        close(f"SyncBatchNormalization {mode}: input gradient", dx, dx_all.numpy()[mine], 1e-4)
        close(f"SyncBatchNormalization {mode}: inference", sync(x, training=False),
              plain(x, training=False))
    if hvd.SyncBatchNormalization.from_config(sync.get_config()).name != sync.name:
        fail("SyncBatchNormalization", "from_config(get_config()) differs")
    try:
        hvd.SyncBatchNormalization(fused=True)
        fail("SyncBatchNormalization(fused=True)", "accepted")
    except ValueError:
        pass


def model_of(r):
    """Two Dense layers whose weights are the rank's number (different on every rank)."""
    init = keras.initializers.Constant(float(r + 1))
    model = keras.Sequential([keras.Input((3,)),
                              keras.layers.Dense(2, kernel_initializer=init, bias_initializer=init),
                              keras.layers.Dense(1, kernel_initializer=init,
                                                 bias_initializer=init)])
    return model


def data_of(r):
    rng = np.random.default_rng(r)
    return rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=(4, 1)).astype(np.float32)


def check_local_tape(r, n):
    model = model_of(r)
    x, y = data_of(r)
    local = model.layers[0].trainable_variables
    for kind in ("register_local_source", "PartialDistributedGradientTape"):
        for mode in ("eager", "tf.function"):
            def step():
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(tf.square(model(x) - y))
                plain = tape.gradient(loss, model.trainable_variables)
                with tf.GradientTape() as tape2:
                    loss = tf.reduce_mean(tf.square(model(x) - y))
                if kind == "register_local_source":
                    dtape = hvd.DistributedGradientTape(tape2)
                    for v in local:
                        dtape.register_local_source(v)
                else:
                    dtape = hvd.PartialDistributedGradientTape(
                        tape2, local_layers=model.layers[0])
                return plain, dtape.gradient(loss, model.trainable_variables)

            plain, reduced = (tf.function(step) if mode == "tf.function" else step)()
            for i, (p, g) in enumerate(zip(plain, reduced)):
                if i < len(local):  # this rank's own, divided by the size
                    close(f"{kind} {mode}: local gradient {i}", g, p.numpy() / n)
                else:
                    every = hvd.allgather_object(p.numpy())
                    close(f"{kind} {mode}: reduced gradient {i}", g, np.mean(every, axis=0))
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    dtape = hvd.PartialDistributedGradientTape(tape, local_layers=[model.layers[0]],
                                               scale_local_gradients=False)
    mine, shared = dtape.get_local_and_global_gradients(loss, model.trainable_variables)
    if [id(v) for v, _ in mine] != [id(v) for v in local] or len(shared) != 2:
        fail("get_local_and_global_gradients", f"{len(mine)} local, {len(shared)} shared")


def check_partial_optimizer(r, n):
    model = model_of(r)
    x, y = data_of(r)
    opt = hk.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=model.layers[0])
    model.compile(optimizer=opt, loss="mse")
    with tf.GradientTape() as tape:
        loss = model.compute_loss(x=x, y=y, y_pred=model(x))
    grads = [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]
    before = [v.numpy() for v in model.trainable_variables]
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False)
    after = [v.numpy() for v in model.trainable_variables]
    for i, (b, a, g) in enumerate(zip(before, after, grads)):
        if i < 2:  # the local layer: this rank's gradient over the size
            close(f"PartialDistributedOptimizer: local variable {i}", a, b - 0.1 * g / n)
        else:
            close(f"PartialDistributedOptimizer: shared variable {i}", a,
                  b - 0.1 * np.mean(hvd.allgather_object(g), axis=0))


def check_partial_optimizer_accumulating(r, n):
    """backward_passes_per_step=2 with a local layer: after two passes the shared variables move
    by the sum of the passes' averaged gradients, the local ones by the sum of this rank's over the
    size (Horovod's aggregation with local variables)."""
    model = model_of(r)
    x, y = data_of(r)
    opt = hk.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=[model.layers[0]],
                                         backward_passes_per_step=2)
    before = [v.numpy() for v in model.trainable_variables]
    passes = []
    for k in range(2):
        xb, yb = x[2 * k:2 * k + 2], y[2 * k:2 * k + 2]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb) - yb))
        grads = tape.gradient(loss, model.trainable_variables)
        passes.append([g.numpy() for g in grads])
        opt.apply_gradients(zip(grads, model.trainable_variables))
        if k == 0:
            close("accumulating: no update after one pass", model.trainable_variables[0],
                  before[0])
    for i, b in enumerate(before):
        mine = passes[0][i] + passes[1][i]
        if i < 2:
            close(f"accumulating with a local layer: local variable {i}",
                  model.trainable_variables[i], b - 0.1 * mine / n)
        else:
            close(f"accumulating with a local layer: shared variable {i}",
                  model.trainable_variables[i],
                  b - 0.1 * np.mean(hvd.allgather_object(mine), axis=0))


def check_sparse_as_dense(r, n):
    """An Embedding's sparse gradient reduced as Horovod's (gathered) or as dense, alone and
    accumulated: the same weights on every rank, either way."""
    results = []
    for sparse_as_dense in (False, True):
        for passes in (1, 2):
            keras.utils.set_random_seed(3)
            model = keras.Sequential([keras.Input((4,), dtype="int32"),
                                      keras.layers.Embedding(50, 8)])
            # SGD: its sparse update is the dense one (RMSprop's moments of absent rows differ)
            opt = hk.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                          sparse_as_dense=sparse_as_dense,
                                          backward_passes_per_step=passes)
            model.compile(optimizer=opt, loss="mse")
            rng = np.random.default_rng(r)
            x = rng.integers(0, 50, size=(8, 4))
            target = rng.normal(size=(8, 4, 8)).astype(np.float32)
            for _ in range(3):
                model.train_on_batch(x, target)
            weights = model.get_weights()[0]
            every = hvd.allgather_object(weights)
            for q, w in enumerate(every):
                close(f"sparse_as_dense={sparse_as_dense}, {passes} passes: rank {q}'s weights",
                      w, weights)
            results.append(weights)
    close("sparse or dense reduction, one pass", results[0], results[2], 1e-4)
    close("sparse or dense reduction, accumulated", results[1], results[3], 1e-4)


def check_accumulators_reset_after_an_overflow():
    """An infinite gradient in one accumulation cycle does not reach the next: the accumulators
    are zeroed when the update is applied."""
    var = tf.Variable(0.0)
    opt = hk.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=2,
                                  sparse_as_dense=True)
    for grad in (float("inf"), float("inf"), 1.0):
        opt.apply_gradients([(tf.constant(grad), var)])
    pending = [a.numpy() for a in opt._accumulated_gradients]
    close("accumulator after an infinite cycle", pending, [1.0])


def check_broadcast_callback_with_local_variables(r, n):
    root = n - 1
    model = model_of(r)
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
    local = list(model.layers[0].variables)
    callback = hk.callbacks.BroadcastGlobalVariablesCallback(root, local_variables=local)
    x, y = data_of(r)
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[callback])
    for v in model.variables:
        want = float(r + 1) if any(v is w for w in local) else float(root + 1)
        close(f"broadcast callback with local variables: {v.path}", v, np.full(v.shape, want))


def check_schedule_callback():
    model = model_of(0)
    model.compile(optimizer=keras.optimizers.SGD(1.0, momentum=0.9), loss="mse")
    x, y = data_of(hvd.rank())
    seen = []
    record = keras.callbacks.LambdaCallback(on_train_batch_begin=lambda b, logs: seen.append(
        round(float(model.optimizer.learning_rate.numpy()), 6)))
    schedule = hk.callbacks.LearningRateScheduleCallback(0.5, multiplier=0.1, start_epoch=1,
                                                         end_epoch=3)
    # the record callback after the schedule's: it sees the rate each batch runs with
    model.fit(x, y, batch_size=2, epochs=4, verbose=0, callbacks=[schedule, record])
    close("LearningRateScheduleCallback staircase", seen,
          [1.0, 1.0, 0.5, 0.5, 0.05, 0.05, 0.05, 0.05])
    smooth = hk.callbacks.LearningRateScheduleCallback(1.0, multiplier=lambda e: 1.0 / (1 + e),
                                                       staircase=False)
    seen.clear()
    model.fit(x, y, batch_size=2, epochs=1, verbose=0, callbacks=[smooth, record])
    close("LearningRateScheduleCallback per batch", seen, [1.0, round(1 / 1.5, 6)])


def check_graph_broadcast_and_objects(r, n):
    try:
        hvd.broadcast_global_variables(0)
        fail("broadcast_global_variables eagerly", "no RuntimeError")
    except RuntimeError:
        pass
    with tf.Graph().as_default():
        v = tf.compat.v1.get_variable("v", initializer=tf.constant([float(r)] * 3))
        op = hvd.broadcast_global_variables(n - 1)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(op)
            close("broadcast_global_variables in a graph", session.run(v), [float(n - 1)] * 3)
    bcast = hvd.broadcast_object_fn(root_rank=n - 1)
    if bcast({"r": r}) != {"r": n - 1}:
        fail("broadcast_object_fn", "not the root's object")
    if hvd.util._executing_eagerly() is not True or hvd._executing_eagerly() is not True:
        fail("util._executing_eagerly", "not True eagerly")


def check_elastic_states(r):
    v = 1.0 if r == 0 else 2.0
    variables = [tf.Variable(np.full((2, 2), v)), tf.Variable(np.full(2, v))]
    state = hvd.elastic.TensorFlowState(variables, batch=20 + r, epoch=10 + r)
    state.sync()
    close("TensorFlowState.sync", variables[0], np.ones((2, 2)))
    if (state.batch, state.epoch) != (20, 10):
        fail("TensorFlowState.sync", f"batch {state.batch}, epoch {state.epoch}")
    variables[0].assign(np.full((2, 2), 5.0))
    state.batch = 21
    state.restore()
    close("TensorFlowState.restore", variables[0], np.ones((2, 2)))
    if state.batch != 20:
        fail("TensorFlowState.restore", f"batch {state.batch}")
    variables[0].assign(np.full((2, 2), 5.0))
    state.commit()
    state.restore()
    close("TensorFlowState.commit", variables[0], np.full((2, 2), 5.0))

    model = model_of(r)
    opt = keras.optimizers.Adam(0.01)
    if r == 0:  # a worker that has stepped (its optimizer built) and one that has not
        opt.build(model.trainable_variables)
    state = hk.elastic.KerasState(model, opt, epoch=3 + r)
    state.sync()
    for w in model.get_weights():
        close("KerasState.sync", w, np.ones_like(w))
    if not opt.built or state.epoch != 3:
        fail("KerasState.sync", f"optimizer built {opt.built}, epoch {state.epoch}")
    model.set_weights([np.zeros_like(w) for w in model.get_weights()])
    state.restore()
    for w in model.get_weights():
        close("KerasState.restore", w, np.ones_like(w))


def main():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    check_sync_batch_norm(r, n)
    check_local_tape(r, n)
    check_partial_optimizer(r, n)
    check_partial_optimizer_accumulating(r, n)
    check_sparse_as_dense(r, n)
    check_accumulators_reset_after_an_overflow()
    check_broadcast_callback_with_local_variables(r, n)
    check_schedule_callback()
    check_graph_broadcast_and_objects(r, n)
    check_elastic_states(r)
    print(f"rank {r}: ok", flush=True)


if __name__ == "__main__":
    main()
