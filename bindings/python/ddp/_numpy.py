# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The collectives on numpy arrays and on any object with the buffer protocol, without copies:
the adapter that turns them into what the engine takes and back (the same checks for ddp.ps),
and the functions `import ddp` exports, one implementation for every kind of tensor
(_ops.Ops)."""

import numpy as np

from . import _ops
from ._compression import framework
from ._ops import error

# ddp.Compression: none, fp16 (a cast), and the engine's bf16 and int8 (allreduce's compression=).
FP16Compressor, Compression = framework("ddp", lambda a: np.issubdtype(a.dtype, np.floating),
                                        lambda a, d: a.astype(d), np.float16)

# numpy's dtypes by libddp's code, from the one table (_ops.DTYPE_NAMES); numpy has no bfloat16.
_NUMPY_CODES = {np.dtype(name): code for code, name in enumerate(_ops.DTYPE_NAMES)
                if hasattr(np, name)}
_CODE_DTYPES = {code: dtype for dtype, code in _NUMPY_CODES.items()}


def _as_array(x, what, label):
    if isinstance(x, np.ndarray):
        return x
    try:
        return np.asarray(memoryview(x))  # any buffer-protocol object, viewed in place
    except TypeError:
        raise error(f"ddp.{what}: {label} is a {type(x).__name__}, not a numpy array or an "
                       f"object with the buffer protocol (for torch tensors use ddp.torch)"
                       ) from None


class NumpyAdapter:
    @staticmethod
    def describe(x, what, label, writable):
        array = _as_array(x, what, label)
        code = _NUMPY_CODES.get(array.dtype) if array.dtype.isnative else None
        if code is None:
            known = ", ".join(str(d) for d in _NUMPY_CODES)
            raise error(f"ddp.{what}: {label} has dtype {array.dtype}, which libddp does not "
                        f"reduce (supported: {known}; bfloat16 through ddp.torch)")
        if not array.flags.c_contiguous:
            raise error(f"ddp.{what}: {label} is not contiguous (shape {array.shape}, strides "
                        f"{array.strides}); pass numpy.ascontiguousarray(x)")
        if not array.flags.aligned:
            raise error(f"ddp.{what}: {label} is not aligned to its element size")
        if writable and not array.flags.writeable:
            raise error(f"ddp.{what}: {label} is read-only and this operation writes to it")
        # The array holds the buffer export: a bytearray cannot be resized while it is alive.
        return _ops.Buffer(array.__array_interface__["data"][0], code, array.shape, array)

    @staticmethod
    def empty_like(x):
        return np.empty_like(_as_array(x, "allreduce", "input"), order="C")

    @staticmethod
    def copy(x):
        return np.array(_as_array(x, "broadcast", "input"), order="C", copy=True)

    @staticmethod
    def view(native, code, shape):
        # Views the output (which owns the memory), not the handle: the handle keeps its result.
        return np.frombuffer(native.output, dtype=_CODE_DTYPES[code]).reshape(shape)

    @staticmethod
    def check(buffers, name):
        del buffers, name  # exported buffers cannot move

    @staticmethod
    def refuse_grad(xs, what):
        del xs, what  # numpy has no autograd


ops = _ops.Ops(NumpyAdapter)


# The collectives: one implementation for every kind of tensor (see _ops.Ops).
allreduce = ops.allreduce
allreduce_ = ops.allreduce_
allreduce_async = ops.allreduce_async
allreduce_async_ = ops.allreduce_async_
grouped_allreduce = ops.grouped_allreduce
grouped_allreduce_ = ops.grouped_allreduce_
grouped_allreduce_async = ops.grouped_allreduce_async
grouped_allreduce_async_ = ops.grouped_allreduce_async_
allgather = ops.allgather
allgather_async = ops.allgather_async
broadcast = ops.broadcast
broadcast_ = ops.broadcast_
broadcast_async = ops.broadcast_async
broadcast_async_ = ops.broadcast_async_
reducescatter = ops.reducescatter
reducescatter_async = ops.reducescatter_async
alltoall = ops.alltoall
alltoall_async = ops.alltoall_async
barrier = _ops.barrier
