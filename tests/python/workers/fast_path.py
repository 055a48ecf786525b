# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddp.torch's fast path (bindings/python/src/tensor_path.cc) against the general one: the same
handles, results, names and errors, whichever path a call takes, even when ranks take different
paths for the same call."""

import sys
import time
import weakref

import numpy as np
import torch

import ddp as ddp_numpy
import ddp.torch as ddp


def fail(what):
    sys.exit(f"rank {ddp.rank()}: {what}")


def check_handle_type(rank):
    """ddp.Handle (a plain CPython type) as its users see it: wait's arguments, a timeout that
    expires and a wait that then succeeds, weak references, and the buffer protocol over an
    engine-allocated output."""
    if rank != 0:
        time.sleep(0.5)  # rank 0's short wait below times out, naming the operation
    h = ddp.allreduce_async_(torch.ones(10), name="fast.late", op=ddp.Sum)
    for bad, args, kwargs in (("two arguments", (1, 2), {}), ("unknown keyword", (), {"t": 1}),
                              ("both ways", (1,), {"timeout": 1}), ("not a number", ("x",), {})):
        try:
            h.wait(*args, **kwargs)
            fail(f"wait with {bad}: no error")
        except TypeError:
            pass
    if rank == 0:
        try:
            h.wait(0.05)
            fail("no TimeoutError")
        except TimeoutError as e:
            if "fast.late" not in str(e):
                fail(f"timeout message: {e}")
        if h.poll():
            fail("finished before rank 1 submitted")
        # Its output before it is done: an error naming it, through the buffer protocol too.
        # (Readers of a handle given, not closures over h: nothing may keep h alive below.)
        for what, read in (("buffer", lambda handle: np.frombuffer(handle, dtype=np.float32)),
                           ("output", lambda handle: handle.output)):
            try:
                read(h)
                fail(f"the {what} of an unfinished handle: no error")
            except ddp.DDPError as e:
                if "fast.late" not in str(e) or "not ready" not in str(e):
                    fail(f"the {what} of an unfinished handle: {e}")
    result = h.wait(timeout=None)
    if not torch.all(result == ddp.size()):
        fail(f"late sum {result}")
    ref = weakref.ref(h)
    if ref() is not h:
        fail("weak reference")
    del h
    if ref() is not None:
        fail("a finished handle outlived its last reference")
    # An engine-allocated output (allgather), read through the handle's own buffer.
    g = ddp_numpy.allgather_async(np.full((2,), float(rank), np.float32), name="fast.gather")
    gathered = g.wait()
    raw = np.frombuffer(g, dtype=np.float32)
    if not np.array_equal(raw, gathered) or not np.array_equal(
            raw, np.repeat(np.arange(ddp.size(), dtype=np.float32), 2)):
        fail(f"handle buffer {raw} against {gathered}")


def main():
    ddp.init()
    rank, size = ddp.rank(), ddp.size()

    # The handle: ddp.Handle, named, polled, waited with a timeout, repr'd; in place returns the
    # tensor itself, out of place a new one (the input untouched).
    t = torch.full((1000,), float(rank + 1))
    h = ddp.allreduce_async_(t, name="fast.inplace", op=ddp.Sum)
    if type(h) is not ddp.Handle or h.name != "fast.inplace":
        fail(f"in-place handle {type(h).__name__} {h.name!r}")
    if h.wait(timeout=30) is not t or ddp.synchronize(h) is not t or not h.poll():
        fail("in-place result is not the tensor")
    if "done" not in repr(h) or "fast.inplace" not in repr(h):
        fail(f"repr {h!r}")
    total = size * (size + 1) / 2
    if not torch.all(t == total):
        fail(f"in-place sum {t[:3]}")
    check_handle_type(rank)
    x = torch.full((3, 5), 2.0)
    out = ddp.synchronize(ddp.allreduce_async(x, name="fast.out"))  # Average
    if out is x or out.shape != (3, 5) or not torch.all(out == 2.0) or not torch.all(x == 2.0):
        fail("out-of-place result")

    # Unnamed calls draw from one counter on either path: each rank alternates the paths in the
    # opposite order (a numpy integer for the op or a numpy float for a scale sends a call down
    # the general path), and every call still meets its partner.
    for i in range(6):
        general = (i + rank) % 2 == 1
        v = torch.full((7,), float(i))
        if general:
            got = ddp.allreduce(v, op=np.int64(int(ddp.Sum)), prescale_factor=np.float32(1.0))
        else:
            got = ddp.allreduce(v, op=ddp.Sum)
        if not torch.all(got == i * size):
            fail(f"unnamed call {i} ({'general' if general else 'fast'}): {got}")

    # A tensor whose memory is replaced (set_) while its operation waits for the others: the
    # wait says so instead of returning a result that went to the old memory.
    y = torch.ones(64)
    if rank == 0:
        h = ddp.allreduce_async_(y, name="fast.replaced")
        y.set_(torch.zeros(64))
        try:
            h.wait()
            fail("no error for replaced memory")
        except ddp.DDPError as e:
            if "was replaced" not in str(e) or "fast.replaced" not in str(e):
                fail(f"replaced memory: {e}")
    else:
        time.sleep(0.3)  # rank 0 replaces its memory while the operation waits for this rank
        ddp.allreduce_(y, name="fast.replaced")
        if not torch.all(y == 1.0):
            fail(f"partner of the replaced tensor: {y[:3]}")

    # What the fast path does not take goes the general way with the same errors.
    for what, tensor in (("non-contiguous", torch.ones(3, 4).t()),
                         ("meta", torch.ones(2, device="meta"))):
        try:
            ddp.allreduce_async_(tensor, name=f"fast.{what}")
            fail(f"{what}: no error")
        except ddp.DDPError as e:
            if "ddp.torch.allreduce_" not in str(e):
                fail(f"{what}: {e}")
    ddp.barrier()
    ddp.shutdown()
    print(f"rank {rank}: ok")


if __name__ == "__main__":
    main()
