#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Data-parallel Keras training of a small CNN on scikit-learn's handwritten digits, with libddp.

    ddprun -np 4 python examples/tensorflow/train_digits_keras.py      (make demo-tf)

The 1797 8x8 images ship with scikit-learn (no download). Every rank fits on its own shard of
the training set; BroadcastGlobalVariablesCallback gives every rank rank 0's initial weights,
DistributedOptimizer averages the gradients over the ranks at every step (one grouped
allreduce through libddp's engine), MetricAverageCallback makes the logged loss and accuracy
the job's, and LearningRateWarmupCallback ramps the learning rate, scaled by the number of
ranks, over the first epochs. The test accuracy is counted over the whole test set, each rank
scoring its shard.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

import ddp.tensorflow.keras as hvd


def load_data(seed):
    """The same shuffled 80/20 split on every rank, images scaled to [0, 1]."""
    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0)[..., None]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    x, y = x[order], y[order]
    n_test = len(y) // 5
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test])


def make_model():
    return keras.Sequential([
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dropout(0.25),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(10),
    ])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--lr", type=float, default=0.01, help="scaled by the number of ranks")
    parser.add_argument("--warmup-epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--target-accuracy", type=float, default=0.0,
                        help="exit with status 1 if the final test accuracy is below this")
    args = parser.parse_args()

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    # Ranks share the machine's cores: one intra-op thread each unless there are cores to spare.
    threads = max(1, (os.cpu_count() or 1) // hvd.local_size())
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    keras.utils.set_random_seed(args.seed + rank)  # weights come from rank 0 (the callback)

    (x_train, y_train), (x_test, y_test) = load_data(args.seed)
    x_shard, y_shard = x_train[rank::size], y_train[rank::size]
    steps = len(y_train) // size // args.batch_size  # the same on every rank
    x_shard, y_shard = x_shard[:steps * args.batch_size], y_shard[:steps * args.batch_size]

    lr = args.lr * size
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(lr, momentum=0.9)),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.MetricAverageCallback(),
                 hvd.callbacks.LearningRateWarmupCallback(lr, warmup_epochs=args.warmup_epochs,
                                                          steps_per_epoch=steps)]
    if rank == 0:
        print(f"training on {size} ranks: {len(y_train)} images ({len(y_shard)} on rank 0), "
              f"{steps} steps of {args.batch_size} per epoch", flush=True)
    model.fit(x_shard, y_shard, batch_size=args.batch_size, epochs=args.epochs, shuffle=True,
              callbacks=callbacks, verbose=2 if rank == 0 else 0)

    # Test accuracy over the whole test set: each rank scores its shard, the counts are summed.
    logits = model.predict(x_test[rank::size], verbose=0)
    correct = float(np.sum(np.argmax(logits, axis=1) == y_test[rank::size]))
    counts = hvd.allreduce(np.array([correct, len(y_test[rank::size])], dtype=np.float64),
                           op=hvd.Sum, name="eval.counts").numpy()
    accuracy = counts[0] / counts[1]
    if rank == 0:
        print(f"test accuracy: {100 * accuracy:.2f}% ({int(counts[0])}/{int(counts[1])})",
              flush=True)
    hvd.shutdown()
    if accuracy < args.target_accuracy:
        if rank == 0:
            print(f"below the target {100 * args.target_accuracy:.1f}%", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
