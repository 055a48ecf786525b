"""Horovod's smaller ddp.tensorflow helpers on N ranks: the rank/size ops eager and in a
tf.function (read when run), objects broadcast and gathered, variables broadcast in place, grouped
allgather and reducescatter with their gradients, and a process set added, used by size_op and removed. Prints "rank R: ok"."""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import ddp.tensorflow as hvd  # noqa: E402


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
