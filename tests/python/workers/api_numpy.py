# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Every collective of the numpy API, every dtype and op, against numpy references computed from
every rank's (reproducible) inputs. Run on N ranks; exits non-zero on the first mismatch."""
import array
import sys
import threading
import time

import numpy as np

import ddp

DTYPES = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int32, np.int64]
OPS = [ddp.Sum, ddp.Average, ddp.Min, ddp.Max, ddp.Product]


def data(rank, dtype, op, count, salt=0):
    rng = np.random.default_rng([rank, DTYPES.index(dtype), int(op), count, salt])
    if op == ddp.Product:  # no overflow, exact in every dtype
        values = rng.integers(1, 3, count)
    elif np.issubdtype(dtype, np.unsignedinteger):
        values = rng.integers(0, 50, count)
    elif np.issubdtype(dtype, np.integer):
        values = rng.integers(-25, 25, count)
    else:
        values = rng.standard_normal(count) * 4
    return values.astype(dtype)


def reference(inputs, op, dtype):
    stack = np.stack([x.astype(np.float64) for x in inputs])
    if op == ddp.Sum:
        out = stack.sum(0)
    elif op == ddp.Average:
        out = stack.sum(0) / len(inputs)
        if np.issubdtype(dtype, np.integer):
            out = np.fix(out)  # integer averages truncate toward zero, like C
    elif op == ddp.Min:
        out = stack.min(0)
    elif op == ddp.Max:
        out = stack.max(0)
    else:
        out = stack.prod(0)
    return out


def check(name, got, want, dtype):
    got64 = np.asarray(got).astype(np.float64)
    if np.issubdtype(dtype, np.integer):
        ok = np.array_equal(got64, want)
    else:
        tol = {np.float16: 2e-2, np.float32: 1e-5, np.float64: 1e-12}[dtype]
        ok = np.allclose(got64, want, rtol=tol, atol=tol * 4)
    if not ok or np.asarray(got).dtype != dtype:
        sys.exit(f"rank {ddp.rank()}: {name}: got {got!r} ({np.asarray(got).dtype}), want "
                 f"{want!r}")


def expect_error(name, fn, *fragments, code=None):
    try:
        fn()
    except ddp.DDPError as e:
        for fragment in fragments:
            if fragment not in str(e):
                sys.exit(f"rank {ddp.rank()}: {name}: error {str(e)!r} lacks {fragment!r}")
        if code is not None and e.code != code:
            sys.exit(f"rank {ddp.rank()}: {name}: code {e.code}, want {code}")
        return e
    sys.exit(f"rank {ddp.rank()}: {name}: no DDPError raised")


def main():
    expect_error("before init", lambda: ddp.allreduce(np.ones(2)), "before ddp.init()",
                 code="FAILED_PRECONDITION")
    assert not ddp.is_initialized()
    ddp.init()
    assert ddp.is_initialized()
    rank, size = ddp.rank(), ddp.size()
    assert 0 <= ddp.local_rank() < ddp.local_size() and ddp.cross_size() >= 1

    # allreduce: sync, in place, async; every dtype x op; empty, scalar, odd and fused sizes.
    for dtype in DTYPES:
        for op in OPS:
            for count in (0, 1, 17, 1000, 70001):
                inputs = [data(r, dtype, op, count) for r in range(size)]
                want = reference(inputs, op, dtype)
                mine = inputs[rank].copy()
                tag = f"{np.dtype(dtype).name}.{op.name}.{count}"
                check(f"allreduce {tag}", ddp.allreduce(mine, op=op, name=f"a.{tag}"), want, dtype)
                assert np.array_equal(mine, inputs[rank]), "allreduce modified its input"
                h = ddp.allreduce_async_(mine, name=f"b.{tag}", op=op)
                out = ddp.synchronize(h)
                assert out is mine and ddp.poll(h)
                check(f"allreduce_ {tag}", mine, want, dtype)
    # Scalars (0-d) and multi-dimensional shapes keep their shape.
    got = ddp.allreduce(np.float64(rank + 1) * np.ones(()), op=ddp.Sum)
    assert got.shape == () and got == size * (size + 1) / 2, got
    got = ddp.allreduce(np.full((3, 4, 5), rank, np.int32), op=ddp.Max)
    assert got.shape == (3, 4, 5) and (got == size - 1).all()

    # Many async tensors in flight at once, submitted in a different order on every rank.
    names = [f"many.{i}" for i in range(40)]
    order = np.random.default_rng(rank).permutation(len(names))
    arrays = {n: np.full(100 + i, float(i + rank), np.float32) for i, n in enumerate(names)}
    handles = {names[i]: ddp.allreduce_async(arrays[names[i]], name=names[i], op=ddp.Sum)
               for i in order}
    for i, n in enumerate(names):
        check(n, ddp.synchronize(handles[n]), np.full(100 + i, size * i + size * (size - 1) / 2),
              np.float32)

    # The GIL is released while waiting: rank 0 waits for "gil" in a thread, and rank 1 only
    # submits "gil" after rank 0's main thread (which needs the GIL) has run Python code and
    # broadcast "go". Holding the GIL while waiting would deadlock this (the job then times out).
    if size > 1:
        waiting = threading.Event()
        result = {}

        def waiter():
            handle = ddp.allreduce_async(np.ones(3), name="gil", op=ddp.Sum)
            waiting.set()
            result["gil"] = ddp.synchronize(handle)

        if rank == 0:
            thread = threading.Thread(target=waiter)
            thread.start()
            waiting.wait()
            time.sleep(0.2)  # the thread is inside synchronize() by now
            busy = sum(i * i for i in range(200000))  # Python work on the main thread
            ddp.broadcast(np.array([busy], np.int64), 0, name="go")
            thread.join()
            check("gil", result["gil"], np.full(3, size), np.float64)
        else:
            ddp.broadcast(np.zeros(1, np.int64), 0, name="go")
            check("gil", ddp.allreduce(np.ones(3), name="gil", op=ddp.Sum), np.full(3, size),
                  np.float64)

    # Scale factors.
    got = ddp.allreduce(np.ones(5, np.float32), op=ddp.Sum, prescale_factor=2.0,
                        postscale_factor=0.25)
    check("scaled", got, np.full(5, size * 0.5), np.float32)

    # Buffers without copies: array.array, bytearray and memoryview are reduced in place.
    buf = array.array("d", [rank, 1.0])
    ddp.allreduce_(buf, op=ddp.Sum)
    assert list(buf) == [size * (size - 1) / 2, size], buf
    raw = bytearray([rank + 1] * 8)
    ddp.allreduce_(memoryview(raw), op=ddp.Max)
    assert raw == bytearray([size] * 8), raw
    view = np.arange(10, dtype=np.float32)
    window = view[2:6]  # a contiguous view into a bigger array is fine and stays a view
    ddp.allreduce_(window, op=ddp.Sum)
    check("view", view[2:6], np.arange(2, 6) * size, np.float32)
    check("outside view", view[6:], np.arange(6, 10), np.float32)

    # grouped allreduce
    group = [np.full(7, rank, np.float64), np.full((2, 3), 1.0, np.float64)]
    outs = ddp.grouped_allreduce(group, op=ddp.Sum, name="group")
    check("group.0", outs[0], np.full(7, size * (size - 1) / 2), np.float64)
    check("group.1", outs[1], np.full((2, 3), size), np.float64)

    for dtype in DTYPES:
        tag = np.dtype(dtype).name
        # allgather with a first dimension that differs by rank
        mine = np.full((rank + 1, 3), rank, dtype)
        got = ddp.allgather(mine, name=f"gather.{tag}")
        want = np.concatenate([np.full((r + 1, 3), r, np.float64) for r in range(size)])
        check(f"allgather {tag}", got, want, dtype)
        # broadcast from every root, copy and in place
        for root in range(size):
            x = data(rank, dtype, ddp.Sum, 33, salt=root)
            want = data(root, dtype, ddp.Sum, 33, salt=root).astype(np.float64)
            check(f"broadcast {tag} {root}", ddp.broadcast(x, root, name=f"bc.{tag}.{root}"),
                  want, dtype)
            ddp.broadcast_(x, root_rank=root, name=f"bc_.{tag}.{root}")
            check(f"broadcast_ {tag} {root}", x, want, dtype)
        # reducescatter: uneven rows (the first rows % size ranks get one more)
        rows = 2 * size + 1
        inputs = [data(r, dtype, ddp.Sum, rows * 2).reshape(rows, 2) for r in range(size)]
        full = reference(inputs, ddp.Sum, dtype)
        counts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
        start = sum(counts[:rank])
        got = ddp.reducescatter(inputs[rank], op=ddp.Sum, name=f"rs.{tag}")
        check(f"reducescatter {tag}", got, full[start:start + counts[rank]], dtype)
        # alltoall: block j goes to rank j
        mine = np.array([[rank * 100 + j] * 2 for j in range(size)], dtype=np.int64)
        got = ddp.alltoall(mine.astype(dtype) if dtype != np.int8 and dtype != np.uint8
                           else (mine % 100).astype(dtype), name=f"a2a.{tag}")
        want = np.array([[r * 100 + rank] * 2 for r in range(size)], np.float64)
        if dtype in (np.int8, np.uint8):
            want = want % 100
        if dtype == np.float16:
            want = want.astype(np.float16).astype(np.float64)
        check(f"alltoall {tag}", got, want, dtype)

    # Python objects
    obj = ddp.broadcast_object({"from": rank, "payload": list(range(rank * 10))},
                               root_rank=size - 1)
    assert obj == {"from": size - 1, "payload": list(range((size - 1) * 10))}, obj
    gathered = ddp.allgather_object(("rank", rank, "x" * rank))
    assert gathered == [("rank", r, "x" * r) for r in range(size)], gathered
    ddp.barrier()

    # Clear errors, and the job goes on after each.
    e = expect_error("dtype", lambda: ddp.allreduce(np.ones(3, np.complex64)), "complex64",
                     "does not reduce", code="INVALID_ARGUMENT")
    assert e.ranks == [] and e.tensor is None, (e.ranks, e.tensor)  # nobody to blame
    expect_error("bool", lambda: ddp.allreduce(np.ones(3, bool)), "bool")
    expect_error("non-contiguous", lambda: ddp.allreduce(np.ones((4, 4))[:, 1]), "not contiguous")
    expect_error("root", lambda: ddp.broadcast(np.ones(3), size), f"root rank {size}",
                 "out of range")
    expect_error("root type", lambda: ddp.broadcast(np.ones(3), "0"), "root_rank must be an int")
    readonly = np.ones(3)
    readonly.flags.writeable = False
    expect_error("read-only", lambda: ddp.allreduce_(readonly), "read-only")
    ddp.allreduce(readonly)  # reading a read-only array is fine
    expect_error("not a buffer", lambda: ddp.allreduce([1.0, 2.0]), "list", "buffer protocol")
    expect_error("op", lambda: ddp.allreduce(np.ones(2), op=7), "unknown reduce op 7")
    expect_error("scalar gather", lambda: ddp.allgather(np.ones(())), "at least one dimension")
    if size > 1:
        expect_error("alltoall split", lambda: ddp.alltoall(np.ones(size + 1)), "alltoall")
    expect_error("handle", lambda: ddp.synchronize(42), "expected a ddp handle")
    # The same name twice while the first is in flight: rank 0 submits it twice (the second
    # fails at once) before the others submit it at all, so the first cannot have finished.
    if rank == 0:
        first = ddp.allreduce_async(np.ones(4), name="dup", op=ddp.Sum)
        if size > 1:
            expect_error("duplicate", lambda: ddp.allreduce(np.ones(4), name="dup"), "dup")
        ddp.broadcast(np.zeros(1), 0, name="dup.tried")
    else:
        ddp.broadcast(np.zeros(1), 0, name="dup.tried")
        first = ddp.allreduce_async(np.ones(4), name="dup", op=ddp.Sum)
    check("dup first", ddp.synchronize(first), np.full(4, size), np.float64)
    # Ranks that disagree on a tensor's shape all get an error naming the ranks.
    if size > 1:
        e = expect_error("shape mismatch",
                         lambda: ddp.allreduce(np.ones(3 + (rank == 1)), name="mismatch"),
                         "mismatch", "rank")
        assert "shape" in str(e), str(e)
        # Who and what, as data: the rank that differs, and the tensor.
        assert e.code == "INVALID_ARGUMENT" and e.ranks == [1] and e.tensor == "mismatch", (
            e.code, e.ranks, e.tensor)
    # Still usable afterwards.
    check("after errors", ddp.allreduce(np.ones(2), op=ddp.Sum), np.full(2, size), np.float64)

    # join: rank r does r extra allreduces; the joined ranks count in the average with zeros
    # (Horovod's rule; DDP_JOIN_AVERAGE=contributors would divide by the active ranks only).
    for step in range(rank):
        got = ddp.allreduce(np.full(3, 10.0 * (rank + 1)), name=f"uneven.{step}")
        active = [r for r in range(size) if r > step]
        check(f"join step {step}", got, np.full(3, sum(10.0 * (r + 1) for r in active) / size),
              np.float64)
    last = ddp.join()
    assert last == size - 1 if size > 1 else last == 0, last

    ddp.shutdown()
    assert not ddp.is_initialized()
    ddp.shutdown()  # twice is fine
    print(f"rank {rank}: ok")


if __name__ == "__main__":
    main()
