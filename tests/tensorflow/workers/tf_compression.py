# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The engine's codecs from TensorFlow (docs/compression.md): allreduce and grouped_allreduce
with Compression.bf16, .int8 and .powersgd, eager and in a tf.function, within the codec's error
of the exact sum and bitwise identical on every rank; PowerSGD's rank-1 sum found exactly and a
vector beside it in the group sent uncompressed, a vector alone refused; the bytes counted by
codec; Keras' DistributedOptimizer training with int8 and PowerSGD, the weights identical on
every rank; integers refused naming the tensor. Prints "rank R: ok"."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf
from keras_common import fail, same_everywhere

import ddp
import ddp.tensorflow as hvd
import ddp.tensorflow.keras as hvd_keras


def close(what, got, want, bound):
    got = np.asarray(got.numpy(), dtype=np.float64)
    if got.shape != want.shape or not np.all(np.abs(got - want) <= bound):
        fail(f"{what}: off by {np.max(np.abs(got - want))} (bound {bound})")
    same_everywhere(what, got)


def allreduces(r, n):
    rng = np.random.default_rng(5)
    values = rng.standard_normal((n, 3000)).astype(np.float32)
    x = tf.constant(values[r])
    exact = values.astype(np.float64).sum(0)
    largest = float(np.abs(values).max()) * n
    before = ddp.stats()["wire_bytes"]
    for codec, bound in ((hvd.Compression.bf16, largest * 2 ** -7),
                         (hvd.Compression.int8, largest / 127 * (n + 1))):
        name = codec.codec
        close(f"allreduce {name}", hvd.allreduce(x, op=hvd.Sum, compression=codec,
                                                 name=f"c.{name}"), exact, bound)
        graph = tf.function(lambda t, c=codec, k=name: hvd.allreduce(
            t, op=hvd.Sum, compression=c, name=f"c.{k}.graph"))
        close(f"allreduce {name} in a tf.function", graph(x), exact, bound)
    after = ddp.stats()["wire_bytes"]
    for name in ("bf16", "int8"):
        sent = after[name]["sent"] - before.get(name, {}).get("sent", 0)
        if n > 1 and sent <= 0:
            fail(f"no {name} bytes counted: {after}")

    # PowerSGD: a rank-1 sum found exactly; the vector of the same group goes uncompressed.
    m = tf.constant(np.outer(np.arange(40), np.ones(6)).astype(np.float32) * (r + 1))
    v = tf.constant(np.full(7, r + 0.5, dtype=np.float32))
    gm, gv = hvd.grouped_allreduce([m, v], op=hvd.Sum, compression=hvd.Compression.powersgd(1),
                                   name="c.psgd")
    want_m = np.outer(np.arange(40), np.ones(6)) * (n * (n + 1) / 2)
    close("powersgd matrix", gm, want_m, 1e-3 * (1 + want_m))
    close("powersgd's uncompressed vector", gv, np.full(7, n * n / 2), 0.0)

    # A direct call compresses as asked: PowerSGD on a vector is refused, naming it (the
    # optimizers send such gradients uncompressed).
    try:
        hvd.allreduce(v, op=hvd.Sum, compression=hvd.Compression.powersgd(1), name="c.vector")
        fail("powersgd on a vector was not refused")
    except (hvd.DDPError, tf.errors.OpError) as e:
        if "c.vector" not in str(e):
            fail(f"powersgd on a vector: {e}")
    try:
        hvd.allreduce(tf.constant([1, 2, 3]), op=hvd.Sum, compression=hvd.Compression.int8,
                      name="c.ints")
        fail("int8 on int32 was not refused")
    except (hvd.DDPError, tf.errors.OpError) as e:
        if "c.ints" not in str(e):
            fail(f"int8 on int32: {e}")


def keras_training(r, n):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64 * n, 12)).astype(np.float32)
    y = (x[:, :3].sum(1) > 0).astype(np.int64)
    for codec in (hvd.Compression.int8, hvd.Compression.powersgd(2)):
        keras.utils.set_random_seed(7)
        model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dense(2)])
        opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1), compression=codec)
        model.compile(opt, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        history = model.fit(x[r::n], y[r::n], batch_size=16, epochs=6, verbose=0,
                            callbacks=[hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0)])
        losses = history.history["loss"]
        if not losses[-1] < 0.8 * losses[0]:
            fail(f"keras with {codec.codec}: loss {losses}")
        same_everywhere(f"keras weights with {codec.codec}",
                        np.concatenate([w.numpy().ravel() for w in model.trainable_variables]))


def main():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    allreduces(r, n)
    keras_training(r, n)
    print(f"rank {r}: ok", flush=True)


if __name__ == "__main__":
    main()
