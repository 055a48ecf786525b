# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Every ddp.tensorflow operation against numpy, for every dtype, eager and inside tf.function,
on any number of ranks; then the errors: ranks that disagree on a shape, dtype or root
(FailedPreconditionError, as Horovod's; every rank's error names
the tensor), an unsupported dtype, a call before init. Prints "rank R: ok"."""
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

import ddp.tensorflow as hvd

DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int8, tf.uint8, tf.int32, tf.int64]


def fail(what):
    print(f"rank {hvd.rank()}: FAILED: {what}", flush=True)
    sys.exit(1)


def check(what, got, want):
    got = np.asarray(got.numpy() if hasattr(got, "numpy") else got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape or not np.array_equal(got, want):
        fail(f"{what}: got {got.tolist()}, want {want.tolist()}")


def data(rank, shape, dtype, offset=0):
    """Small integers (exact in every dtype, products included): rank-dependent."""
    n = int(np.prod(shape))
    values = (np.arange(n) % 3 + rank + 1 + offset).reshape(shape)
    return tf.cast(tf.constant(values, dtype=tf.float64), dtype), values.astype(np.float64)


def main():
    try:
        hvd.allreduce(tf.ones([2]))
        fail("an operation before init did not raise")
    except hvd.DDPError as e:
        if "before ddp.tensorflow.init()" not in str(e):
            fail(f"before init: {e}")
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    per_rank = [data(q, (2, 3), tf.float64)[1] for q in range(n)]

    for dtype in DTYPES:
        tag = dtype.name
        x, _ = data(r, (2, 3), dtype)
        stack = np.stack(per_rank)
        ops = [(hvd.Sum, stack.sum(0)), (hvd.Min, stack.min(0)), (hvd.Max, stack.max(0))]
        if dtype.is_floating:
            ops.append((hvd.Average, stack.mean(0)))
        if n <= 3 and dtype not in (tf.int8, tf.uint8):
            ops.append((hvd.Product, stack.prod(0)))
        for op, want in ops:
            check(f"allreduce {tag} {op.name}", hvd.allreduce(x, op=op, name=f"ar.{tag}.{op.name}"),
                  want)
        if dtype.is_floating:
            got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5,
                                name=f"ar.{tag}.scaled")
            check(f"allreduce {tag} scaled", got, stack.sum(0))
            got = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16,
                                name=f"ar.{tag}.fp16")
            if got.dtype != dtype:
                fail(f"fp16 compression returned {got.dtype.name} for {tag}")
            check(f"allreduce {tag} fp16", got, stack.sum(0))
        # Unnamed, eager: automatic names in the same order on every rank.
        check(f"allreduce {tag} unnamed", hvd.allreduce(x, op=hvd.Sum), stack.sum(0))

        # grouped: two shapes, one unit
        a, _ = data(r, (4,), dtype)
        b, _ = data(r, (1, 2), dtype, offset=1)
        ga, gb = hvd.grouped_allreduce([a, b], op=hvd.Sum, name=f"group.{tag}")
        check(f"grouped {tag} a", ga, sum(data(q, (4,), tf.float64)[1] for q in range(n)))
        check(f"grouped {tag} b", gb, sum(data(q, (1, 2), tf.float64, 1)[1] for q in range(n)))

        # allgather: rank q has q + 1 rows
        g, _ = data(r, (r + 1, 2), dtype)
        want = np.concatenate([data(q, (q + 1, 2), tf.float64)[1] for q in range(n)])
        check(f"allgather {tag}", hvd.allgather(g, name=f"ag.{tag}"), want)

        # broadcast from the last rank
        check(f"broadcast {tag}", hvd.broadcast(x, root_rank=n - 1, name=f"bc.{tag}"),
              per_rank[n - 1])

        # alltoall: block j (one row of 2) to rank j
        t, _ = data(r, (n, 2), dtype)
        got = hvd.alltoall(t, name=f"a2a.{tag}")
        want = np.stack([data(q, (n, 2), tf.float64)[1][r] for q in range(n)])
        check(f"alltoall {tag}", got, want)

        # alltoall with uneven splits: rank r sends j + 1 rows to rank j (values 10 r + j).
        rows = np.concatenate([np.full((j + 1, 2), 10 * r + j) for j in range(n)])
        got, got_splits = hvd.alltoall(tf.cast(rows, dtype), splits=[j + 1 for j in range(n)],
                                       name=f"a2av.{tag}")
        check(f"alltoall splits {tag}", got,
              np.concatenate([np.full((r + 1, 2), 10 * q + r) for q in range(n)]))
        check(f"alltoall received splits {tag}", got_splits, [r + 1] * n)

        # reducescatter: 2 rows per rank, summed
        s, _ = data(r, (2 * n, 3), dtype)
        total = sum(data(q, (2 * n, 3), tf.float64)[1] for q in range(n))
        check(f"reducescatter {tag}", hvd.reducescatter(s, op=hvd.Sum, name=f"rs.{tag}"),
              total[2 * r:2 * r + 2])

    # Inside tf.function: the graph's tensor names are the engine's names.
    @tf.function
    def step(t):
        return hvd.allreduce(t, op=hvd.Sum) + hvd.broadcast(t, root_rank=0)

    x, _ = data(r, (3,), tf.float32)
    for _ in range(3):
        check("tf.function", step(x), sum(data(q, (3,), tf.float64)[1] for q in range(n)) +
              data(0, (3,), tf.float64)[1])

    @tf.function
    def exchange(t):
        return hvd.alltoall(t, splits=tf.range(1, n + 1))

    rows = np.concatenate([np.full((j + 1, 3), 10 * r + j) for j in range(n)]).astype(np.float32)
    for _ in range(2):
        got, got_splits = exchange(tf.constant(rows))
        check("alltoall splits in tf.function", got,
              np.concatenate([np.full((r + 1, 3), 10 * q + r) for q in range(n)]))
        check("received splits in tf.function", got_splits, [r + 1] * n)

    # barrier, eager and in a tf.function: the last rank leaves a mark and then arrives late;
    # no rank passes the barrier before the mark is there.
    @tf.function
    def graph_barrier():
        hvd.barrier()
        return tf.constant(0)

    for k, wait in enumerate((hvd.barrier, graph_barrier)):
        mark = f"/tmp/ddp-tf-barrier-{os.getppid()}-{k}"
        if r == n - 1:
            time.sleep(0.3)
            open(mark, "w").close()
        wait()
        if not os.path.exists(mark):
            fail(f"barrier {k}: passed before rank {n - 1} arrived")
        hvd.allreduce(tf.zeros([1]), name=f"after.barrier.{k}")  # everyone has looked
        if r == n - 1:
            os.remove(mark)

    # Two operations on one tensor in one tf.function, unnamed and with one name reused: names
    # unique in the graph, so both are in flight at once without a clash.
    @tf.function
    def twice(t):
        a = hvd.allreduce(t, op=hvd.Sum)
        b = hvd.allreduce(t, op=hvd.Max)
        c = hvd.allreduce(t, op=hvd.Sum, name="same")
        d = hvd.allreduce(t, op=hvd.Min, name="same")
        return a, b, c, d

    t, _ = data(r, (5,), tf.float32)
    stack = np.stack([data(q, (5,), tf.float64)[1] for q in range(n)])
    for _ in range(2):
        a, b, c, d = twice(t)
        check("twice sum", a, stack.sum(0))
        check("twice max", b, stack.max(0))
        check("same name sum", c, stack.sum(0))
        check("same name min", d, stack.min(0))

    # Errors: ranks that disagree (a shape, a dtype, a root) fail on every rank, naming the
    # tensor (alone, no rank can), as Horovod's FailedPreconditionError; a bad argument of one
    # rank alone stays InvalidArgumentError.
    if n > 1:
        disagreements = {
            "shape": lambda: hvd.allreduce(tf.ones([r + 1]), name="grad.disagree"),
            "dtype": lambda: hvd.allgather(tf.ones([1], tf.float32 if r else tf.float64),
                                           name="grad.disagree"),
            "root": lambda: hvd.broadcast(tf.ones([1]), root_rank=r, name="grad.disagree"),
        }
        for field, call in disagreements.items():
            try:
                call()
                fail(f"ranks disagreeing on the {field} did not raise")
            except tf.errors.FailedPreconditionError as e:
                if "grad.disagree" not in e.message or field not in e.message:
                    fail(f"the {field} mismatch's message: {e.message}")
        try:
            hvd.alltoall(tf.ones([n + 1]), name="uneven")  # every rank: not a multiple of n
            fail("an uneven alltoall did not raise")
        except tf.errors.InvalidArgumentError as e:
            if "multiple" not in e.message:
                fail(f"the uneven alltoall's message: {e.message}")
    try:
        hvd.allreduce(tf.ones([2], dtype=tf.complex64), name="complex")
        fail("complex64 did not raise")
    except (tf.errors.InvalidArgumentError, TypeError) as e:
        if "complex64" not in str(e):
            fail(f"complex64's message: {e}")
    # The job goes on after both.
    check("after errors", hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="after"), [n, n])
    hvd.barrier()
    last = hvd.join()
    if not 0 <= int(last) < n:
        fail(f"join's last rank {last}")
    # ddp.shutdown() and init() again (as an elastic reset does): the ops follow the new job.
    import ddp
    ddp.shutdown()
    ddp.init()
    check("after re-init", hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="reinit"), [n, n])
    hvd.shutdown()
    print(f"rank {r}: ok", flush=True)


if __name__ == "__main__":
    main()
