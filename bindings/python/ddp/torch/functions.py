# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddp's collectives on torch tensors (re-exported by ddp.torch)."""

import numpy as np
import torch

from .. import _ddp, _ops
from .._ops import ReduceOp, error
from .compression import Compression

Average = ReduceOp.AVERAGE

# torch's dtypes by libddp's code: the names are the ones the fast path looks up too
# (bindings/python/src/torch_objects.cc), so both paths take the same dtypes.
_TORCH_CODES = {getattr(torch, name): code for code, name in enumerate(_ops.DTYPE_NAMES)}
_CODE_DTYPES = {code: dtype for dtype, code in _TORCH_CODES.items()}


def _storage(t):
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()


class _CudaOutput:
    """An engine-allocated GPU output as __cuda_array_interface__ bytes: torch.as_tensor views it
    without a copy and keeps this object (and so the output, which owns the memory) alive. The
    engine has waited for the operation, so no stream synchronisation is needed ("stream":
    None)."""

    def __init__(self, output):
        self._output = output
        self.__cuda_array_interface__ = {
            "shape": (output.bytes,), "typestr": "|u1", "strides": None,
            "data": (output.address, False), "version": 3, "stream": None,
        }


class _TorchAdapter:
    @staticmethod
    def describe(t, what, label, writable):
        del writable  # torch tensors are always writable
        if not isinstance(t, torch.Tensor):
            raise error(f"ddp.torch.{what}: {label} is a {type(t).__name__}, not a torch.Tensor "
                        f"(for numpy arrays use ddp)")
        if t.layout != torch.strided:
            raise error(f"ddp.torch.{what}: {label} is a {t.layout} tensor; only dense tensors "
                        f"are supported")
        if t.device.type not in ("cpu", "cuda"):
            raise error(f"ddp.torch.{what}: {label} is on {t.device}; libddp reduces CPU "
                        f"tensors (through its transports) and CUDA tensors (through NCCL)")
        code = _TORCH_CODES.get(t.dtype)
        if code is None:
            raise error(f"ddp.torch.{what}: {label} has dtype {t.dtype}, which libddp does not "
                        f"reduce (supported: {', '.join(_ops.DTYPE_NAMES)})")
        if not t.is_contiguous():
            raise error(f"ddp.torch.{what}: {label} is not contiguous (shape {tuple(t.shape)}, "
                        f"stride {t.stride()}); pass t.contiguous()")
        # The storage too: t.set_() during the operation must not free the memory in use.
        owner = (t, _storage(t))
        if t.device.type == "cuda":
            # The collective runs on the NCCL backend's stream once the work queued so far on
            # the current stream (which produced t) is done.
            device = t.device.index if t.device.index is not None else torch.cuda.current_device()
            stream = torch.cuda.current_stream(device).cuda_stream
            return _ops.Buffer(t.data_ptr(), code, tuple(t.shape), owner, device, stream)
        return _ops.Buffer(t.data_ptr(), code, tuple(t.shape), owner)

    @staticmethod
    def empty_like(t):
        return torch.empty_like(t, memory_format=torch.contiguous_format)

    @staticmethod
    def copy(t):
        return t.detach().clone(memory_format=torch.contiguous_format)

    @staticmethod
    def view(native, code, shape):
        if native.output_device >= 0:
            device = torch.device("cuda", native.output_device)
            if native.output_bytes == 0:
                return torch.empty(shape, dtype=_CODE_DTYPES[code], device=device)
            raw = torch.as_tensor(_CudaOutput(native.output), device=device)
        else:
            # The output owns the memory; viewing the handle would make a cycle (it keeps its
            # result).
            raw = torch.from_numpy(np.frombuffer(native.output, dtype=np.uint8))
        return raw.view(_CODE_DTYPES[code]).reshape(shape)

    @staticmethod
    def check(buffers, name):
        for buf in buffers:
            if buf.owner[0].data_ptr() != buf.address:
                raise error(f"ddp.torch: the memory of '{name}' was replaced (set_, resize_) while "
                            f"the operation ran; its result went to the old memory",
                            "FAILED_PRECONDITION")

    @staticmethod
    def refuse_grad(tensors, what):
        """Only allreduce is differentiable: refuse to cut the graph silently."""
        if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                           for t in tensors):
            raise error(f"ddp.torch.{what} is not differentiable (only allreduce is); pass a "
                        f"detached tensor (t.detach()) or call it under torch.no_grad()")


_torch = _ops.Ops(_TorchAdapter)


class _AllreduceFunction(torch.autograd.Function):
    """allreduce as an autograd op: the gradient of op=Sum/Average is the same reduction of the
    incoming gradients (as in Horovod)."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set):
        ctx.op, ctx.prescale, ctx.postscale, ctx.process_set = op, prescale, postscale, process_set
        return _torch.allreduce(tensor, name=name, op=op, prescale_factor=prescale,
                                postscale_factor=postscale, process_set=process_set)

    @staticmethod
    def backward(ctx, grad):
        if ctx.op not in (ReduceOp.SUM, ReduceOp.AVERAGE):
            raise error(f"ddp.torch.allreduce: op {_ops.op_name(ctx.op)} has no gradient")
        reduced = _torch.allreduce(grad.contiguous(), op=ctx.op, prescale_factor=ctx.prescale,
                                   postscale_factor=ctx.postscale, process_set=ctx.process_set)
        return reduced, None, None, None, None, None


_fast_allreduce = _ddp.torch_allreduce


def _op_of(average, op, what):
    """The op of a reduction called with Horovod's arguments: `average` (deprecated: True is
    Average, False Sum) or `op`; neither is Average. A ReduceOp where Horovod has `average`
    (allreduce(t, ddp.Sum), as torch.distributed users write it) is the op."""
    if isinstance(average, ReduceOp) and op is None:
        return average
    if op is None or average is not None:
        return _ops.resolve_op(op, average, what)
    return op


def _allreduce_start(what, inplace, tensor, average, name, op, prescale_factor,
                     postscale_factor, process_set):
    """allreduce_async and allreduce_async_ (the per-tensor path of DistributedOptimizer's
    hooks: checked inline)."""
    if op is None or average is not None:
        op = _op_of(average, op, what)
    if process_set.__class__ is not int:
        process_set = _ops.set_id(process_set)
    # A dense contiguous CPU or CUDA tensor goes straight to the engine (bindings/python/src/
    # tensor_path.cc); anything else, and every error, takes the general path.
    handle = _fast_allreduce(tensor, name, op, prescale_factor, postscale_factor, process_set,
                             inplace)
    if handle is NotImplemented:
        general = _torch.allreduce_async_ if inplace else _torch.allreduce_async
        return general(tensor, name, op, prescale_factor, postscale_factor, process_set)
    return handle


# The signatures are Horovod's (horovod.torch 0.28), positions included.
def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=0, compression=None):
    """Starts an allreduce into a new tensor; synchronize(handle) returns it. op defaults to
    Average; `average` is Horovod's deprecated flag (True: Average, False: Sum); `compression`
    (Compression.bf16, .int8, or their names) encodes it on the wire in the engine."""
    if compression is not None:
        return _torch.allreduce_async(tensor, name, _op_of(average, op, "allreduce_async"),
                                      prescale_factor, postscale_factor, process_set,
                                      compression=compression)
    return _allreduce_start("allreduce_async", False, tensor, average, name, op,
                            prescale_factor, postscale_factor, process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=0, compression=None):
    """Starts an in-place allreduce of tensor; synchronize(handle) returns it."""
    if compression is not None:
        return _torch.allreduce_async_(tensor, name, _op_of(average, op, "allreduce_async_"),
                                       prescale_factor, postscale_factor, process_set,
                                       compression=compression)
    return _allreduce_start("allreduce_async_", True, tensor, average, name, op,
                            prescale_factor, postscale_factor, process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=0):
    """In-place allreduce; returns tensor."""
    op = _op_of(average, op, "allreduce_")
    return allreduce_async_(tensor, None, name, op, prescale_factor, postscale_factor,
                            process_set).wait()


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=0, compression=None):
    """Reduces a list of same-dtype tensors as one unit (one negotiation, one fused collective)
    into new tensors; synchronize(handle) returns their list."""
    return _torch.grouped_allreduce_async(tensors, name, _op_of(average, op, "grouped_allreduce"),
                                          prescale_factor, postscale_factor, process_set,
                                          compression=compression)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=0, compression=None):
    return _torch.grouped_allreduce_async_(tensors, name,
                                           _op_of(average, op, "grouped_allreduce_"),
                                           prescale_factor, postscale_factor, process_set,
                                           compression=compression)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=0):
    return grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                    postscale_factor, process_set).wait()


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=0):
    """allreduce of each tensor, as one unit; differentiable for Sum and Average. `compression`
    (Compression.fp16) reduces them compressed and returns them decompressed."""
    op = _op_of(average, op, "grouped_allreduce")
    tensors = list(tensors)
    if any(_wants_grad(t) for t in tensors):
        name = _ops.auto_name("grouped_allreduce", name, process_set)
        return [allreduce(t, name=f"{name}.{i}", compression=compression, op=op,
                          prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                          process_set=process_set) for i, t in enumerate(tensors)]
    packed = [compression.compress(t) for t in tensors]
    reduced = _torch.grouped_allreduce(
        [c for c, _ in packed], op, name, prescale_factor, postscale_factor, process_set)
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, packed)]




def _wants_grad(t):
    return isinstance(t, torch.Tensor) and t.requires_grad and torch.is_grad_enabled()


# What only moves data (allgather, broadcast, alltoall) takes any fixed-size dtype, as Horovod
# does: a tensor of a dtype libddp does not reduce (int16, bool, complex64, ...) moves as its
# bytes, a uint8 view of shape (first dimension, bytes per row), and comes back as its dtype.
def _moves_as_bytes(t):
    return (isinstance(t, torch.Tensor) and t.dtype not in _TORCH_CODES
            and t.layout == torch.strided and t.is_contiguous())


def _to_bytes(t):
    rows = t.shape[0] if t.dim() > 0 else 1
    row_bytes = t.element_size() * int(np.prod(t.shape[1:], dtype=np.int64)) if t.dim() else \
        t.element_size()
    return t.reshape(-1).view(torch.uint8).view(rows, row_bytes)


def _from_bytes(b, dtype, tail):
    return b.reshape(-1).view(dtype).reshape(-1, *tail)


def _converted(handle, convert):
    return _ops.GroupHandle([handle], handle.name, lambda results: convert(results[0]))


def _rows_async(submit, tensor, name, process_set):
    """An operation that moves rows of the first dimension (allgather, alltoall): a dtype libddp
    does not reduce goes as bytes and comes back as its dtype."""
    if _moves_as_bytes(tensor):
        h = submit(_to_bytes(tensor), name, process_set)
        dtype, tail = tensor.dtype, tuple(tensor.shape[1:])
        return _converted(h, lambda out: _from_bytes(out, dtype, tail))
    return submit(tensor, name, process_set)


def _allgather_async(tensor, name, process_set):
    return _rows_async(_torch.allgather_async, tensor, name, process_set)


def _into_fits(tensor, output):
    """Whether a collective can write straight into `output` (torch.distributed's *_into_tensor):
    CPU tensors of one dtype, the output contiguous."""
    return (tensor.device.type == "cpu" and output.device.type == "cpu"
            and tensor.dtype == output.dtype and output.is_contiguous()
            and output.layout == torch.strided and tensor.layout == torch.strided)


def _allgather_into_async(tensor, output, process_set=0):
    """Every rank's `tensor` (one number of elements on every rank), in rank order, written into
    `output` (_into_fits); a dtype libddp does not reduce moves as its bytes."""
    rows = tensor.reshape(1, -1)
    if _moves_as_bytes(rows):
        rows, output = _to_bytes(rows), output.reshape(-1).view(torch.uint8)
    return _torch.allgather_into_async(rows, output, process_set=process_set)


def _reducescatter_into_async(rows, output, op, prescale_factor=1.0, process_set=0):
    """`rows` (one row per rank) reduced over ranks; this rank's row written into `output`
    (_into_fits)."""
    return _torch.reducescatter_into_async(rows, output, op=op, prescale_factor=prescale_factor,
                                           process_set=process_set)


def allgather_async(tensor, name=None, process_set=0):
    """Starts an allgather; synchronize(handle) returns the concatenation along the first
    dimension."""
    return _allgather_async(tensor, name, process_set)


def allgather(tensor, name=None, process_set=0):
    """Every rank's tensor concatenated along the first dimension (which may differ by rank);
    differentiable (as in Horovod: the gradient is the average of the ranks' gradients of the
    whole result, this rank's rows of it)."""
    if _wants_grad(tensor):
        return _AllgatherFunction.apply(tensor, _ops.auto_name("allgather", name, process_set),
                                         process_set)
    return _allgather_async(tensor, name, process_set).wait()


def _broadcast_async(tensor, root_rank, name, process_set, inplace):
    if _moves_as_bytes(tensor):
        target = tensor if inplace else tensor.clone(memory_format=torch.contiguous_format)
        h = _torch.broadcast_async_(_to_bytes(target), root_rank, name, process_set)
        return _converted(h, lambda _: target)
    if inplace:
        return _torch.broadcast_async_(tensor, root_rank, name, process_set)
    return _torch.broadcast_async(tensor, root_rank, name, process_set)


def broadcast_async(tensor, root_rank, name=None, process_set=0):
    return _broadcast_async(tensor, root_rank, name, process_set, False)


def broadcast_async_(tensor, root_rank, name=None, process_set=0):
    return _broadcast_async(tensor, root_rank, name, process_set, True)


def broadcast(tensor, root_rank, name=None, process_set=0):
    """root_rank's tensor, as a new tensor on every rank; differentiable (as in Horovod: the
    average of the ranks' gradients flows to the root, zero to the others)."""
    if _wants_grad(tensor):
        return _BroadcastFunction.apply(tensor, root_rank,
                                        _ops.auto_name("broadcast", name, process_set),
                                        process_set)
    return _broadcast_async(tensor, root_rank, name, process_set, False).wait()


def broadcast_(tensor, root_rank, name=None, process_set=0):
    """Overwrites tensor with root_rank's; returns it."""
    return _broadcast_async(tensor, root_rank, name, process_set, True).wait()


def _even_alltoall_async(tensor, name, process_set):
    return _rows_async(_torch.alltoall_async, tensor, name, process_set)


def _first_dims_disagree(e):
    return e.code == "INVALID_ARGUMENT" and "disagree on the shape" in str(e)


class _AlltoallHandle(_ops.GroupHandle):
    """alltoall without splits: each rank splits its first dimension evenly over the set, and
    Horovod lets ranks' first dimensions differ. The engine's alltoall moves equal shapes (no
    extra round); when the ranks' first dimensions differ, every rank gets that error from the
    same negotiation, and wait() redoes the call with the ranks' splits (alltoall with splits).
    `received_splits` is then what came from each rank, else None."""

    __slots__ = ("_retry", "received_splits")

    def __init__(self, handle, name, retry):
        super().__init__([handle], name, lambda results: results[0])
        self._retry = retry
        self.received_splits = None

    def wait(self, timeout=None):
        try:
            return super().wait(timeout)
        except _ddp.DDPError as e:
            if self._retry is None or not _first_dims_disagree(e):
                raise
        retry, self._retry = self._retry, None
        out, self.received_splits = retry()
        self._finish = lambda _: out
        self._handles = []
        return out


def _alltoall_async(tensor, name, process_set):
    process_set = _ops.set_id(process_set, "alltoall")
    name = _ops.auto_name("alltoall", name, process_set)
    handle = _even_alltoall_async(tensor, name, process_set)
    n = len(_ops.process_set_ranks(process_set))
    rows = tensor.shape[0] if isinstance(tensor, torch.Tensor) and tensor.dim() else 0
    even = [rows // n] * n

    def retry():
        return _alltoallv_async(tensor, torch.tensor(even, dtype=torch.int32),
                                f"{name}.uneven", process_set).wait()

    return _AlltoallHandle(handle, name, retry)


def _check_splits(tensor, splits, n, what):
    """Horovod's splits: how many rows of tensor's first dimension go to each rank of the set
    (n of them, non-negative integers summing to the first dimension)."""
    if not isinstance(splits, torch.Tensor):
        try:
            splits = torch.tensor(splits)
        except (TypeError, ValueError, RuntimeError):
            raise error(f"ddp.torch.{what}: splits must be a tensor or list of ints, got "
                        f"{splits!r}") from None
    if splits.is_floating_point() or splits.is_complex() or splits.dtype == torch.bool:
        raise error(f"ddp.torch.{what}: splits must hold integers, not {splits.dtype}")
    if splits.dim() != 1 or splits.numel() != n:
        raise error(f"ddp.torch.{what}: splits needs one entry per rank of the process set "
                    f"({n}), got shape {tuple(splits.shape)}")
    counts = [int(c) for c in splits.cpu().tolist()]
    rows = tensor.shape[0] if isinstance(tensor, torch.Tensor) and tensor.dim() else 0
    if any(c < 0 for c in counts) or sum(counts) != rows:
        raise error(f"ddp.torch.{what}: splits {counts} must be non-negative and add up to the "
                    f"first dimension of the tensor ({rows})")
    return splits, counts


def _alltoallv_async(tensor, splits, name, process_set):
    """alltoall with uneven splits: the ranks' splits are allgathered (so each knows what it
    receives), every block is padded to the largest, and one even alltoall moves them; the result
    is (received rows, received splits). The padding costs bandwidth when blocks differ a lot."""
    process_set = _ops.set_id(process_set, "alltoall")
    members = _ops.process_set_ranks(process_set)
    n = len(members)
    splits, counts = _check_splits(tensor, splits, n, "alltoall")
    if not isinstance(tensor, torch.Tensor):
        raise error(f"ddp.torch.alltoall: expected a torch.Tensor, got {type(tensor).__name__}")
    name = _ops.auto_name("alltoall", name, process_set)
    table = allgather(torch.tensor([counts], dtype=torch.int64), name=f"{name}.splits",
                      process_set=process_set)
    me = members.index(_ops.own_rank(process_set))
    received = [int(c) for c in table[:, me].tolist()]
    block = int(table.max())
    tail = tuple(tensor.shape[1:])
    padded = tensor.new_zeros((n * block,) + tail)
    offset = 0
    for j, c in enumerate(counts):
        padded[j * block:j * block + c] = tensor[offset:offset + c]
        offset += c
    received_splits = splits.new_tensor(received)
    if block == 0:
        empty = tensor.new_zeros((0,) + tail)
        return _ops.GroupHandle([], name, lambda _: (empty, received_splits))

    def unpad(out):
        out = out.reshape((n, block) + tail)
        return (torch.cat([out[j, :received[j]] for j in range(n)]), received_splits)

    return _converted(_even_alltoall_async(padded, name, process_set), unpad)


def alltoall_async(tensor, splits=None, name=None, process_set=0):
    """Starts an alltoall; synchronize(handle) returns the received rows or, with `splits`, the
    pair (received rows, received splits), as Horovod's alltoall() does."""
    if splits is not None:
        return _alltoallv_async(tensor, splits, name, process_set)
    return _alltoall_async(tensor, name, process_set)


def alltoall(tensor, splits=None, name=None, process_set=0):
    """Sends rows of the first dimension to each rank and returns what it received, rank 0's
    first. Without `splits` the first dimension splits evenly over the ranks of the set and the
    result is the received tensor; with `splits` (rows for each rank, Horovod's) it is the pair
    (received tensor, received splits). Differentiable (the gradient goes back the same way)."""
    if _wants_grad(tensor):
        return _AlltoallFunction.apply(tensor, splits,
                                       _ops.auto_name("alltoall", name, process_set), process_set)
    return alltoall_async(tensor, splits, name, process_set).wait()


def _reduction_args(name, op):
    """Horovod's reducescatter takes (tensor, name, ..., op); ddp's own order was (tensor, op,
    name): a ReduceOp where the name goes is the op."""
    if isinstance(name, ReduceOp):
        name, op = (op if isinstance(op, str) else None), name
    return name, Average if op is None else op


def reducescatter_async(tensor, name=None, op=Average, process_set=0, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts a reduce-scatter; synchronize(handle) returns this rank's rows."""
    name, op = _reduction_args(name, op)
    return _torch.reducescatter_async(tensor, name, op, prescale_factor, postscale_factor,
                                      process_set)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=0,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces over ranks and returns this rank's rows of the first dimension; differentiable
    for Sum and Average (the gradient is the allgather of the ranks' gradients, scaled as the
    forward was). `compression` reduces the tensor compressed, returns it decompressed."""
    name, op = _reduction_args(name, op)
    if compression is not Compression.none:
        compressed, ctx = compression.compress(tensor)
        return compression.decompress(
            reducescatter(compressed, name, Compression.none, op, process_set, prescale_factor,
                          postscale_factor), ctx)
    if _wants_grad(tensor):
        return _ReducescatterFunction.apply(
            tensor, _ops.auto_name("reducescatter", name, process_set), op, prescale_factor,
            postscale_factor, process_set)
    return _torch.reducescatter(tensor, op, name, prescale_factor, postscale_factor, process_set)


class _AllgatherFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows, ctx.process_set = tensor.shape[0] if tensor.dim() else 1, process_set
        return _allgather_async(tensor, name, process_set).wait()

    @staticmethod
    def backward(ctx, grad):
        reduced = allreduce(grad.contiguous(), op=Average, process_set=ctx.process_set)
        rows = allgather(torch.tensor([ctx.rows], dtype=torch.int64),
                         process_set=ctx.process_set)
        members = _ops.process_set_ranks(ctx.process_set)
        mine = members.index(_ops.own_rank(ctx.process_set))
        offset = int(rows[:mine].sum())
        return reduced.narrow(0, offset, ctx.rows), None, None


class _BroadcastFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return _broadcast_async(tensor, root_rank, name, process_set, False).wait()

    @staticmethod
    def backward(ctx, grad):
        reduced = allreduce(grad.contiguous(), op=Average, process_set=ctx.process_set)
        if _ops.own_rank(ctx.process_set) != ctx.root_rank:
            reduced.zero_()
        return reduced, None, None, None


class _AlltoallFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        ctx.process_set, ctx.uneven = process_set, splits is not None
        if splits is None:
            handle = _alltoall_async(tensor, name, process_set)
            out = handle.wait()
            if handle.received_splits is not None:  # the ranks' first dimensions differed
                ctx.uneven, ctx.received = True, handle.received_splits
            return out
        out, received = _alltoallv_async(tensor, splits, name, process_set).wait()
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, *unused):
        del unused  # the received splits have no gradient
        if ctx.uneven:
            back, _ = alltoall(grad.contiguous(), ctx.received, process_set=ctx.process_set)
        else:
            back = alltoall(grad.contiguous(), process_set=ctx.process_set)
        return back, None, None, None


class _ReducescatterFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set):
        ctx.op, ctx.prescale, ctx.postscale = op, prescale, postscale
        ctx.process_set = process_set
        return _torch.reducescatter(tensor, op, name, prescale, postscale, process_set)

    @staticmethod
    def backward(ctx, grad):
        if ctx.op not in (ReduceOp.SUM, ReduceOp.AVERAGE):
            raise error(f"ddp.torch.reducescatter: op {_ops.op_name(ctx.op)} has no gradient")
        scale = float(ctx.prescale) * float(ctx.postscale)
        if ctx.op == ReduceOp.SUM:
            scale *= len(_ops.process_set_ranks(ctx.process_set))
        grad = grad.contiguous() * scale if scale != 1.0 else grad.contiguous()
        return allgather(grad, process_set=ctx.process_set), None, None, None, None, None


def _grouped_results(kind, tensors, name, process_set, submit):
    tensors = list(tensors)
    if not tensors:
        raise error(f"ddp.torch.{kind}: needs at least one tensor")
    name = _ops.auto_name(kind, name, process_set)
    handles = [submit(t, f"{name}.{i}") for i, t in enumerate(tensors)]
    return _ops.GroupHandle(handles, name)


def grouped_allgather_async(tensors, name=None, process_set=0):
    """Allgathers of several tensors submitted together; synchronize returns their list."""
    return _grouped_results("grouped_allgather", tensors, name, process_set,
                            lambda t, n: _allgather_async(t, n, process_set))


def grouped_allgather(tensors, name=None, process_set=0):
    """allgather of each tensor, submitted together; differentiable."""
    tensors = list(tensors)
    if any(_wants_grad(t) for t in tensors):
        name = _ops.auto_name("grouped_allgather", name, process_set)
        return [allgather(t, f"{name}.{i}", process_set) for i, t in enumerate(tensors)]
    return grouped_allgather_async(tensors, name, process_set).wait()


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=0,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Reduce-scatters of several tensors submitted together; synchronize returns their list."""
    name, op = _reduction_args(name, op)
    return _grouped_results("grouped_reducescatter", tensors, name, process_set,
                            lambda t, n: _torch.reducescatter_async(t, n, op, prescale_factor,
                                                                    postscale_factor,
                                                                    process_set))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=0, prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter of each tensor, submitted together; differentiable for Sum and Average."""
    name, op = _reduction_args(name, op)
    tensors = list(tensors)
    if compression is not Compression.none or any(_wants_grad(t) for t in tensors):
        name = _ops.auto_name("grouped_reducescatter", name, process_set)
        return [reducescatter(t, f"{name}.{i}", compression, op, process_set, prescale_factor,
                              postscale_factor) for i, t in enumerate(tensors)]
    return grouped_reducescatter_async(tensors, name, op, process_set, prescale_factor,
                                       postscale_factor).wait()


class _SparseHandle(_ops.GroupHandle):
    """sparse_allreduce_async's handle: synchronize(handle), handle.wait() or, as in Horovod,
    handle() return the reduced sparse tensor."""

    __slots__ = ()

    def __call__(self):
        return self.wait()


def sparse_allreduce_async(tensor, name=None, op=Average, process_set=0):
    """Allreduce of a sparse COO tensor, as Horovod does it: the indices and values of every rank
    are allgathered (no densifying), and the result is their (uncoalesced) union, divided by the
    set's size for Average. Sum and Average only."""
    if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.sparse_coo:
        raise error("ddp.torch.sparse_allreduce_async: expected a sparse COO tensor (for dense "
                    "ones use allreduce_async)")
    op = _ops.check_op(op, "sparse_allreduce_async")
    if op not in (ReduceOp.SUM, ReduceOp.AVERAGE):
        raise error(f"ddp.torch.sparse_allreduce_async: op {_ops.op_name(op)} is not supported on "
                    f"sparse tensors (Sum and Average are)")
    process_set = _ops.set_id(process_set, "sparse_allreduce_async")
    name = _ops.auto_name("sparse_allreduce", name, process_set)
    t = tensor.coalesce() if not tensor.is_coalesced() else tensor
    indices = _allgather_async(t.indices().t().contiguous(), f"{name}.indices", process_set)
    values = _allgather_async(t.values().contiguous(), f"{name}.values", process_set)
    n = len(_ops.process_set_ranks(process_set))

    def finish(results):
        idx, vals = results
        if op == ReduceOp.AVERAGE:
            vals = vals / n if vals.is_floating_point() else vals // n
        return torch.sparse_coo_tensor(idx.t(), vals, tensor.shape)

    return _SparseHandle([indices, values], name, finish)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=0):
    """op over ranks (Average by default), as a new tensor; differentiable for Sum and Average.
    `average` is Horovod's deprecated flag (True: Average, False: Sum); `compression`
    (Compression.fp16) reduces the tensor compressed and returns it decompressed."""
    op = _op_of(average, op, "allreduce")
    if getattr(compression, "codec", None) is not None:  # the engine's (Compression.int8, ...)
        if torch.is_grad_enabled() and tensor.requires_grad:
            raise error(f"ddp.torch.allreduce with compression={compression.__name__} is not "
                        f"differentiable: it reduces gradients (DistributedOptimizer's, or a "
                        f"detached tensor); call it on t.detach() or under torch.no_grad()")
        return allreduce_async(tensor, None, name, op, prescale_factor, postscale_factor,
                               process_set, compression=compression).wait()
    if compression is not Compression.none:
        compressed, ctx = compression.compress(tensor)
        return compression.decompress(
            allreduce(compressed, None, name, Compression.none, op, prescale_factor,
                      postscale_factor, process_set), ctx)
    if isinstance(tensor, torch.Tensor) and tensor.requires_grad and torch.is_grad_enabled():
        return _AllreduceFunction.apply(tensor, _ops.auto_name("allreduce", name, process_set),
                                        op,
                                        prescale_factor, postscale_factor, process_set)
    return allreduce_async(tensor, None, name, op, prescale_factor, postscale_factor,
                           process_set).wait()
