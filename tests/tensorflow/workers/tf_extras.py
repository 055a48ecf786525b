# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Horovod's smaller ddp.tensorflow helpers on N ranks: the rank/size ops eager and in a
tf.function (read when run), objects broadcast and gathered, variables broadcast in place, grouped
allgather and reducescatter with their gradients, sparse tensors as Horovod reduces them (in a
grouped allreduce too), dtypes libddp does not have moved as bytes, and a process set added, used
by size_op and removed. Prints "rank R: ok"."""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

import ddp.tensorflow as hvd


def expect(what, got, want):
    if got != want:
        print(f"rank {hvd.rank()}: FAILED: {what}: got {got!r}, want {want!r}", flush=True)
        sys.exit(1)


def main():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    ops = {"rank_op": (hvd.rank_op, r), "local_rank_op": (hvd.local_rank_op, hvd.local_rank()),
           "size_op": (hvd.size_op, n), "local_size_op": (hvd.local_size_op, hvd.local_size()),
           "process_set_included_op": (hvd.process_set_included_op, 1)}
    for what, (op, want) in ops.items():
        expect(f"{what} eager", int(op()), want)
        expect(f"{what} in tf.function", int(tf.function(lambda op=op: op())()), want)
        expect(f"{what} shape", op().shape, tf.TensorShape([]))

    expect("broadcast_object", hvd.broadcast_object({"from": r}, root_rank=n - 1), {"from": n - 1})
    expect("allgather_object", hvd.allgather_object(("r", r)), [("r", q) for q in range(n)])

    a = tf.Variable(tf.fill([3], float(r)))
    b = tf.Variable(tf.fill([2, 2], r + 10))
    out = hvd.broadcast_([a, b], root_rank=1)
    expect("broadcast_ returns the variables", [v is w for v, w in zip(out, [a, b])], [True] * 2)
    expect("broadcast_ a", a.numpy().tolist(), [1.0] * 3)
    expect("broadcast_ b", b.numpy().tolist(), [[11, 11], [11, 11]])

    # Grouped allgather and reducescatter: results and gradients as each tensor's own op.
    x = tf.Variable(tf.fill([r + 1, 2], float(r)))
    y = tf.Variable(tf.fill([2 * n, 3], float(r + 1)))
    with tf.GradientTape() as tape:
        gathered, scattered = hvd.grouped_allgather([x, 2.0 * x], name="gag")
        (reduced,) = hvd.grouped_reducescatter([y], op=hvd.Sum, name="grs")
        loss = tf.reduce_sum(gathered) + tf.reduce_sum(scattered) + tf.reduce_sum(reduced)
    rows = [float(q) for q in range(n) for _ in range(q + 1)]
    expect("grouped_allgather", gathered.numpy()[:, 0].tolist(), rows)
    expect("grouped_allgather second", scattered.numpy()[:, 0].tolist(), [2 * v for v in rows])
    expect("grouped_reducescatter", reduced.numpy().tolist(),
           [[float(n * (n + 1) // 2)] * 3] * 2)
    gx, gy = tape.gradient(loss, [x, y])
    # allgather's gradient: this rank's rows of the averaged gradient (1 + 2 from both tensors);
    # reducescatter's (Sum, Horovod's rule): the gathered gradient times the set's size.
    expect("grouped_allgather gradient", gx.numpy().tolist(), [[3.0, 3.0]] * (r + 1))
    expect("grouped_reducescatter gradient", gy.numpy().tolist(), [[float(n)] * 3] * (2 * n))

    # Sparse tensors (tf.IndexedSlices), Horovod's way: gathered; Average divides truly (an
    # integer's becomes a float); other ops and scale factors are NotImplementedError.
    sparse = tf.IndexedSlices(tf.fill([1, 2], r + 1), tf.constant([r]), tf.constant([n, 2]))
    summed = hvd.allreduce(sparse, op=hvd.Sum)
    expect("sparse Sum indices", summed.indices.numpy().tolist(), list(range(n)))
    expect("sparse Sum values", summed.values.numpy()[:, 0].tolist(), list(range(1, n + 1)))
    averaged = hvd.allreduce(sparse, op=hvd.Average)
    expect("sparse Average of integers", averaged.values.numpy()[:, 0].tolist(),
           [(q + 1) / n for q in range(n)])
    for what, call in (("Max", lambda: hvd.allreduce(sparse, op=hvd.Max)),
                       ("prescale", lambda: hvd.allreduce(sparse, op=hvd.Sum,
                                                          prescale_factor=2.0)),
                       ("grouped Min", lambda: hvd.grouped_allreduce([sparse], op=hvd.Min))):
        try:
            call()
        except NotImplementedError as e:
            expect(f"sparse {what} is a DDPError too", isinstance(e, hvd.DDPError), True)
        else:
            expect(f"sparse {what}", "no error", "NotImplementedError")
    dense = tf.fill([2], float(r))
    mixed = hvd.grouped_allreduce([sparse, dense, sparse], op=hvd.Sum, name="mixed")
    expect("grouped sparse", [type(m).__name__ for m in mixed],
           ["IndexedSlices", "EagerTensor", "IndexedSlices"])
    expect("grouped sparse values", mixed[2].values.numpy()[:, 1].tolist(),
           list(range(1, n + 1)))
    expect("grouped dense", mixed[1].numpy().tolist(), [float(n * (n - 1) // 2)] * 2)

    # Dtypes libddp does not reduce move as their bytes (allgather, broadcast, alltoall).
    for dtype in (tf.int16, tf.uint16, tf.bool, tf.complex64, tf.uint32):
        mine = tf.cast(tf.fill([r + 1, 2], r + 1), dtype)
        got = hvd.allgather(mine, name=f"bytes.ag.{dtype.name}")
        want = [[bool(q + 1) if dtype == tf.bool else q + 1] * 2 for q in range(n)
                for _ in range(q + 1)]
        expect(f"allgather {dtype.name}", (got.dtype, got.numpy().tolist()), (dtype, want))
        got = hvd.broadcast(tf.cast(tf.constant(r + 1), dtype), root_rank=n - 1,
                            name=f"bytes.bc.{dtype.name}")
        expect(f"broadcast {dtype.name} scalar", (got.shape, got.numpy().item()),
               (tf.TensorShape([]), True if dtype == tf.bool else n))
    in_function = tf.function(lambda: hvd.allgather(tf.cast(tf.fill([r + 1, 2], r), tf.int16)))
    expect("allgather int16 in tf.function", in_function().numpy()[:, 1].tolist(),
           [q for q in range(n) for _ in range(q + 1)])
    rows = tf.cast(tf.reshape(tf.range(2 * n) + 100 * r, [2 * n, 1]), tf.int16)
    got = hvd.alltoall(rows, name="bytes.a2a")
    expect("alltoall int16", got.numpy()[:, 0].tolist(),
           [100 * q + 2 * r + k for q in range(n) for k in range(2)])
    got, received = hvd.alltoall(tf.cast(tf.ones([n, 3]), tf.bool), splits=[1] * n,
                                 name="bytes.a2av")
    expect("alltoall bool with splits", (got.dtype, got.shape, received.numpy().tolist()),
           (tf.bool, tf.TensorShape([n, 3]), [1] * n))
    # alltoall without splits: each rank splits its own rows evenly, and the ranks' row counts
    # differ (Horovod's rule): eagerly, and in a tf.function.
    blocks = tf.constant([j for j in range(n) for _ in range(r + 1)], tf.int32)
    for how, run in (("eager", lambda: hvd.alltoall(blocks, name="even.rows")),
                     ("tf.function", tf.function(lambda: hvd.alltoall(blocks)))):
        got = run().numpy().tolist()
        expect(f"alltoall of differing row counts ({how})", got, [r] * (n * (n + 1) // 2))
    try:
        hvd.allgather(tf.constant(["a"]))
    except hvd.DDPError as e:
        expect("a string is refused", "fixed size" in str(e), True)
    else:
        expect("a string is refused", "no error", "DDPError")

    evens = hvd.add_process_set(hvd.ProcessSet(list(range(0, n, 2))))
    expect("size_op of a set", int(hvd.size_op(evens)), len(range(0, n, 2)))
    expect("included in a set", int(hvd.process_set_included_op(evens)), int(r % 2 == 0))
    removed = evens.process_set_id
    hvd.remove_process_set(evens)
    for gone in (evens, removed):
        try:
            hvd.size_op(gone)
        except hvd.DDPError:
            pass
        else:
            expect(f"size_op of removed set {gone!r}", "no error", "DDPError")
    hvd.shutdown()
    print(f"rank {r}: ok", flush=True)


if __name__ == "__main__":
    main()
