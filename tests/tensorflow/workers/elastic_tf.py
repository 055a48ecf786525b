# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""An elastic Keras job (ddp.tensorflow.keras.elastic) for tests/tensorflow/test_tensorflow.py.

A linear model learns a fixed target with model.fit and DistributedOptimizer, EPOCHS epochs of
batches of 4 per worker over the worker's shard of 96 samples, with the elastic callbacks
(commit after every batch). Scenario (argv): `fail HOST:SLOT`: that worker exits with status 1
at epoch 1, batch 2 of its first generation; the others' next allreduce fails (TensorFlow's
error), run() restores the last commit, re-forms the job and goes on. A custom loop
(TensorFlowKerasState, DistributedGradientTape in a tf.function) then trains one more epoch
on the re-formed job.

Every worker that finishes prints "done rank R size S generation G sizes A,B epochs E checksum C".
"""
import hashlib
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

import ddp.tensorflow as htf
import ddp.tensorflow.keras as hvd

SAMPLES, BATCH, EPOCHS = 96, 4, 3


class FailOnce(keras.callbacks.Callback):
    def __init__(self, state, who):
        super().__init__()
        self.state, self.who = state, who

    def on_train_batch_begin(self, batch, logs=None):
        if os.environ.get("DDP_ELASTIC_ID") == self.who and self.state.epoch == 1 and \
                batch == 2 and hvd.elastic.generation() == 0:
            os._exit(1)


def main():
    who = sys.argv[2]
    hvd.init()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(SAMPLES, 8)).astype(np.float32)
    y = x @ np.arange(1.0, 9.0, dtype=np.float32).reshape(8, 1)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
    state = hvd.elastic.KerasState(model, batch=0, epoch=0, sizes=[])

    @hvd.elastic.run
    def train(state):
        if not state.sizes or state.sizes[-1] != hvd.size():
            state.sizes.append(hvd.size())
        r, n = hvd.rank(), hvd.size()
        model.fit(x[r::n], y[r::n], batch_size=BATCH, epochs=EPOCHS - state.epoch, verbose=0,
                  shuffle=False,
                  callbacks=[FailOnce(state, who), hvd.elastic.UpdateEpochStateCallback(state),
                             hvd.elastic.UpdateBatchStateCallback(state),
                             hvd.elastic.CommitStateCallback(state)])

    train(state)

    # A custom loop on the re-formed job: TensorFlowKerasState, the tape in a tf.function.
    optimizer = keras.optimizers.SGD(0.01)
    loop = htf.elastic.TensorFlowKerasState(model, optimizer, steps=0)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb) - yb))
        tape = htf.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    @htf.elastic.run
    def more(loop):
        r, n = htf.rank(), htf.size()
        xs, ys = x[r::n], y[r::n]
        while loop.steps < len(xs) // BATCH:
            i = loop.steps * BATCH
            step(xs[i:i + BATCH], ys[i:i + BATCH])
            loop.steps += 1
            loop.commit()

    more(loop)
    weights = np.concatenate([w.ravel() for w in model.get_weights()])
    checksum = hashlib.sha256(weights.astype(np.float32).tobytes()).hexdigest()[:16]
    print(f"done rank {hvd.rank()} size {hvd.size()} generation {hvd.elastic.generation()} "
          f"sizes {','.join(map(str, state.sizes))} epochs {state.epoch} checksum {checksum}",
          flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
