# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Gradients through the ddp.tensorflow ops under tf.GradientTape, against their closed forms
(Horovod's rules): allreduce's is the allreduce of the gradient; allgather's is this rank's rows
of the averaged gradient; broadcast's is the averaged gradient on the root and zero elsewhere;
alltoall's sends the gradient back; reducescatter's gathers it. Also inside tf.function.
Prints "rank R: ok"."""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

import ddp.tensorflow as hvd


def fail(what):
    print(f"rank {hvd.rank()}: FAILED: {what}", flush=True)
    sys.exit(1)


def check(what, got, want):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-6, atol=1e-6):
        fail(f"{what}: got {got.tolist()}, want {want.tolist()}")


def main():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    w = tf.Variable(tf.range(4, dtype=tf.float32) + r)
    coef = float(r + 1)
    sum_coef = sum(q + 1 for q in range(n))

    # loss = sum((r + 1) * op(w)): d/dw = (r + 1) reduced over ranks by the same op (and scales).
    for op, want in ((hvd.Sum, sum_coef), (hvd.Average, sum_coef / n)):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(coef * hvd.allreduce(w, op=op, name=f"g.ar.{op.name}"))
        check(f"allreduce {op.name}", tape.gradient(loss, w), np.full(4, want))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(coef * hvd.allreduce(w, op=hvd.Sum, prescale_factor=2.0,
                                                  postscale_factor=3.0, name="g.ar.scaled"))
    check("allreduce scaled", tape.gradient(loss, w), np.full(4, 6.0 * sum_coef))

    # allgather: rank q contributes q + 1 rows; loss weights row i by (r + 1) * (i + 1).
    v = tf.Variable(tf.ones([r + 1, 2]))
    total_rows = sum(q + 1 for q in range(n))
    with tf.GradientTape() as tape:
        g = hvd.allgather(v, name="g.ag")
        weights = tf.reshape(tf.range(1, total_rows + 1, dtype=tf.float32), [-1, 1])
        loss = coef * tf.reduce_sum(g * weights)
    offset = sum(q + 1 for q in range(r))
    rows = np.arange(offset + 1, offset + r + 2, dtype=np.float64)
    want_gather = (sum_coef / n) * np.repeat(rows[:, None], 2, axis=1)
    check("allgather", tape.gradient(loss, v), want_gather)

    # broadcast from rank 1 (or 0 alone)
    root = 1 if n > 1 else 0
    with tf.GradientTape() as tape:
        loss = coef * tf.reduce_sum(hvd.broadcast(w, root_rank=root, name="g.bc"))
    check("broadcast", tape.gradient(loss, w),
          np.full(4, sum_coef / n if r == root else 0.0))

    # alltoall: one row per rank; the gradient of row j comes back from rank j, who weighted it
    # by (j + 1).
    t = tf.Variable(tf.ones([n, 3]))
    with tf.GradientTape() as tape:
        loss = coef * tf.reduce_sum(hvd.alltoall(t, name="g.a2a"))
    check("alltoall", tape.gradient(loss, t),
          np.repeat(np.arange(1, n + 1, dtype=np.float64)[:, None], 3, axis=1))

    # alltoall with splits: rank r sends j + 1 rows to rank j, who weights them by (j + 1).
    u = tf.Variable(tf.ones([n * (n + 1) // 2, 2]))
    with tf.GradientTape() as tape:
        got, _ = hvd.alltoall(u, splits=[j + 1 for j in range(n)], name="g.a2av")
        loss = coef * tf.reduce_sum(got)
    check("alltoall with splits", tape.gradient(loss, u),
          np.concatenate([np.full((j + 1, 2), j + 1.0) for j in range(n)]))

    # reducescatter (Sum, 2 rows per rank): every input row is summed into some rank's rows, and
    # that rank weights its rows by (its rank + 1): input row i's gradient is (i // 2 + 1) * n.
    s = tf.Variable(tf.ones([2 * n, 2]))
    with tf.GradientTape() as tape:
        loss = coef * tf.reduce_sum(hvd.reducescatter(s, op=hvd.Sum, name="g.rs"))
    owner = np.arange(2 * n) // 2
    check("reducescatter", tape.gradient(loss, s),
          np.repeat(((owner + 1) * n).astype(np.float64)[:, None], 2, axis=1))

    # Inside tf.function: gradients traced once, run three times.
    @tf.function
    def grad_step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(coef * hvd.allreduce(w, op=hvd.Average))
        return tape.gradient(loss, w)

    for _ in range(3):
        check("tf.function gradient", grad_step(), np.full(4, sum_coef / n))

    # allgather's gradient inside a tf.function (the gathered row counts have no static shape).
    @tf.function
    def gather_step():
        with tf.GradientTape() as tape:
            g = hvd.allgather(v)
            loss = coef * tf.reduce_sum(g * weights)
        return tape.gradient(loss, v)

    for _ in range(2):
        check("allgather gradient in tf.function", gather_step(), want_gather)

    # broadcast's gradient inside a tf.function: the allreduce in it runs on every rank, the
    # non-roots (whose gradient is zero) included; a zeros_like of its result let TensorFlow fold
    # it away there, and the root waited for ever.
    @tf.function
    def broadcast_step():
        with tf.GradientTape() as tape:
            loss = coef * tf.reduce_sum(hvd.broadcast(w, root_rank=root, name="g.bc.fn"))
        return tape.gradient(loss, w)

    for _ in range(2):
        check("broadcast gradient in tf.function", broadcast_step(),
              np.full(4, sum_coef / n if r == root else 0.0))

    # A grouped allreduce's gradient.
    with tf.GradientTape() as tape:
        a, b = hvd.grouped_allreduce([w, 2.0 * w], op=hvd.Sum, name="g.grouped")
        loss = coef * (tf.reduce_sum(a) + tf.reduce_sum(b))
    check("grouped allreduce", tape.gradient(loss, w), np.full(4, 3.0 * sum_coef))

    # DistributedGradientTape with groups of variables: the variable in no group is reduced too.
    p1, p2, p3 = (tf.Variable(tf.ones([2]) * (r + 1)) for _ in range(3))
    with hvd.DistributedGradientTape(tf.GradientTape(), op=hvd.Sum, groups=[[p1, p3]]) as tape:
        loss = tf.reduce_sum(p1 * p1) + tf.reduce_sum(3.0 * p2) + tf.reduce_sum(p3)
    g1, g2, g3 = tape.gradient(loss, [p1, p2, p3])
    check("grouped tape p1", g1, np.full(2, sum(2.0 * (q + 1) for q in range(n))))
    check("ungrouped tape p2", g2, np.full(2, 3.0 * n))
    check("grouped tape p3", g3, np.full(2, float(n)))
    hvd.shutdown()
    print(f"rank {r}: ok", flush=True)


if __name__ == "__main__":
    main()
