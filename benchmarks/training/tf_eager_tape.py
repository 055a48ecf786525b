#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""An eager DistributedGradientTape loop (no tf.function): a 12-layer MLP's 22 gradients a step,
batch 16 per rank. Rank 0 prints the step time and what the engine did per step (collectives,
rounds, response-cache hits), which shows whether the gradients were reduced together or one
by one.

    .venv-tf/bin/ddprun -np 2 .venv-tf/bin/python benchmarks/training/tf_eager_tape.py [--steps 50]
"""
import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

import ddp
import ddp.tensorflow as hvd


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    hvd.init()
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((64,))] +
                             [keras.layers.Dense(64, activation="tanh") for _ in range(10)] +
                             [keras.layers.Dense(3)])
    rng = np.random.default_rng(hvd.rank())
    x = rng.standard_normal((16, 64)).astype(np.float32)
    y = np.zeros(16, np.int64)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    sgd = keras.optimizers.SGD(0.01)

    def step():
        with hvd.DistributedGradientTape(tf.GradientTape()) as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        sgd.apply_gradients(zip(grads, model.trainable_variables))

    for _ in range(args.warmup):
        step()
    before, start = ddp.engine_stats(), time.perf_counter()
    for _ in range(args.steps):
        step()
    took, after = time.perf_counter() - start, ddp.engine_stats()
    if hvd.rank() == 0:
        per = {k: (after[k] - before[k]) / args.steps for k in ("collectives", "cycles",
                                                                 "cache_hits")}
        print(f"RESULT ranks={hvd.size()} gradients={len(model.trainable_variables)} "
              f"step_ms={1e3 * took / args.steps:.2f} collectives={per['collectives']:.1f} "
              f"rounds={per['cycles']:.1f} cache_hits={per['cache_hits']:.1f}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
