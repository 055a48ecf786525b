"""Horovod's smaller ddp.tensorflow helpers on N ranks: the rank/size ops eager and in a
tf.function (read when run), objects broadcast and gathered, variables broadcast in place, and a
process set added, used by size_op and removed. Prints "rank R: ok"."""
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
