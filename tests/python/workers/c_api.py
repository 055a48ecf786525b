# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The C API (ddp/c_api.h) from the process that the Python package started: a framework plugin's
view. ctypes loads the package's libddp.so, ddp._ddp._c_context() hands over a C reference to the
running context, and operations submitted through it go to the same engine as ddp's own (same
names, same negotiation); errors come back as codes with messages. Prints "rank R: ok"."""
import ctypes
import glob
import os
import sys

import numpy as np

import ddp
from ddp import _ddp

DDP_FLOAT32, DDP_INT64 = 0, 7
DDP_SUM, DDP_AVERAGE = 0, 1
DDP_CPU = -1


def load():
    libs = sorted(glob.glob(os.path.join(os.path.dirname(ddp.__file__), "libddp.so*")))
    lib = ctypes.CDLL(libs[0])
    vp, i64p = ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)
    lib.ddp_rank.argtypes = lib.ddp_size.argtypes = [vp]
    lib.ddp_allreduce_async.restype = vp
    lib.ddp_allreduce_async.argtypes = [vp, ctypes.c_char_p, vp, vp, ctypes.c_int, i64p,
                                        ctypes.c_int, ctypes.c_int, ctypes.c_double,
                                        ctypes.c_double, ctypes.c_int, ctypes.c_int, vp]
    lib.ddp_allgather_async.restype = vp
    lib.ddp_allgather_async.argtypes = [vp, ctypes.c_char_p, vp, ctypes.c_int, i64p,
                                        ctypes.c_int, ctypes.c_int, ctypes.c_int, vp]
    lib.ddp_handle_wait.argtypes = [vp]
    lib.ddp_handle_message.argtypes = [vp]
    lib.ddp_handle_message.restype = ctypes.c_char_p
    lib.ddp_handle_output.argtypes = [vp]
    lib.ddp_handle_output.restype = vp
    lib.ddp_handle_output_bytes.argtypes = [vp]
    lib.ddp_handle_output_bytes.restype = ctypes.c_size_t
    lib.ddp_handle_release.argtypes = [vp]
    lib.ddp_context_release.argtypes = [vp]
    return lib


def shape_of(array):
    return (ctypes.c_int64 * array.ndim)(*array.shape), array.ndim


def check(cond, what):
    if not cond:
        print(f"rank {ddp.rank()}: FAILED: {what}", flush=True)
        sys.exit(1)


def main():
    ddp.init()
    rank, size = ddp.rank(), ddp.size()
    lib = load()
    c = _ddp._c_context()
    check(lib.ddp_rank(c) == rank and lib.ddp_size(c) == size, "rank and size through C")

    # Through the C API: an average of float32 rows, in place.
    x = np.arange(12, dtype=np.float32).reshape(3, 4) * (rank + 1)
    dims, ndim = shape_of(x)
    h = lib.ddp_allreduce_async(c, b"c.grad", x.ctypes.data, x.ctypes.data, DDP_FLOAT32, dims,
                                ndim, DDP_AVERAGE, 1.0, 1.0, 0, DDP_CPU, None)
    code = lib.ddp_handle_wait(h)
    check(code == 0, f"allreduce through C: {code} {lib.ddp_handle_message(h)}")
    lib.ddp_handle_release(h)
    mean = sum(r + 1 for r in range(size)) / size
    check(np.array_equal(x, np.arange(12, dtype=np.float32).reshape(3, 4) * mean), "the average")

    # The same engine as the package's own calls: one submitted through Python, one through C,
    # both in flight at once.
    a = np.full(5, rank + 1, dtype=np.int64)
    handle = ddp.allreduce_async(a, name="py.side", op=ddp.Sum)
    g = np.full((rank + 1, 2), rank, dtype=np.int64)
    dims, ndim = shape_of(g)
    h = lib.ddp_allgather_async(c, b"c.gather", g.ctypes.data, DDP_INT64, dims, ndim, 0, DDP_CPU,
                                None)
    out = ddp.synchronize(handle)
    check(np.all(out == sum(range(1, size + 1))), "the Python-side allreduce")
    check(lib.ddp_handle_wait(h) == 0, "allgather through C")
    nbytes = lib.ddp_handle_output_bytes(h)
    got = np.frombuffer(ctypes.string_at(lib.ddp_handle_output(h), nbytes), dtype=np.int64)
    want = np.concatenate([np.full((r + 1) * 2, r, dtype=np.int64) for r in range(size)])
    check(np.array_equal(got, want), f"allgather through C: {got}")
    lib.ddp_handle_release(h)

    # A shape the ranks disagree on: every rank's handle fails, naming the tensor.
    y = np.ones(4 if rank == 0 else 2, dtype=np.float32)
    dims, ndim = shape_of(y)
    h = lib.ddp_allreduce_async(c, b"c.disagree", y.ctypes.data, y.ctypes.data, DDP_FLOAT32, dims,
                                ndim, DDP_SUM, 1.0, 1.0, 0, DDP_CPU, None)
    code = lib.ddp_handle_wait(h)
    message = lib.ddp_handle_message(h).decode()
    check(code != 0 and "c.disagree" in message, f"a shape mismatch: {code} {message}")
    lib.ddp_handle_release(h)

    lib.ddp_context_release(c)  # the package's context goes on
    ddp.barrier()
    ddp.shutdown()
    print(f"rank {rank}: ok", flush=True)


if __name__ == "__main__":
    main()
