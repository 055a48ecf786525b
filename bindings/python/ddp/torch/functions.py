"""ddp's collectives on torch tensors (re-exported by ddp.torch)."""

import numpy as np
import torch

from .. import _ddp, _ops
from .._ops import ReduceOp, error

Average = ReduceOp.AVERAGE

_TORCH_CODES = {
    torch.float32: _ops.F32,
    torch.float64: _ops.F64,
    torch.float16: _ops.F16,
    torch.bfloat16: _ops.BF16,
    torch.int8: _ops.I8,
    torch.uint8: _ops.U8,
    torch.int32: _ops.I32,
    torch.int64: _ops.I64,
}
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
                        f"reduce (supported: float32, float64, float16, bfloat16, int8, uint8, "
                        f"int32, int64)")
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
            raise error(f"ddp.torch.allreduce: op {ReduceOp(ctx.op).name} has no gradient")
        reduced = _torch.allreduce(grad.contiguous(), op=ctx.op, prescale_factor=ctx.prescale,
                                   postscale_factor=ctx.postscale, process_set=ctx.process_set)
        return reduced, None, None, None, None, None


_fast_allreduce = _ddp.torch_allreduce


def allreduce_async(tensor, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=0, average=None):
    """Starts an allreduce into a new tensor; synchronize(handle) returns it. op defaults to
    Average; `average` is Horovod's deprecated flag (True: Average, False: Sum)."""
    if op is None or average is not None:
        op = _ops.resolve_op(op, average, "allreduce_async")
    # A dense contiguous CPU tensor goes straight to the engine (bindings/python/src/
    # tensor_path.cc); anything else, and every error, takes the general path.
    handle = _fast_allreduce(tensor, name, op, prescale_factor, postscale_factor, process_set,
                             False)
    if handle is NotImplemented:
        return _torch.allreduce_async(tensor, name, op, prescale_factor, postscale_factor,
                                      process_set)
    return handle


def allreduce_async_(tensor, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=0, average=None):
    """Starts an in-place allreduce of tensor; synchronize(handle) returns it."""
    if op is None or average is not None:
        op = _ops.resolve_op(op, average, "allreduce_async_")
    handle = _fast_allreduce(tensor, name, op, prescale_factor, postscale_factor, process_set,
                             True)
    if handle is NotImplemented:
        return _torch.allreduce_async_(tensor, name, op, prescale_factor, postscale_factor,
                                       process_set)
    return handle


def allreduce_(tensor, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=0, average=None):
    """In-place allreduce; returns tensor."""
    if op is None or average is not None:
        op = _ops.resolve_op(op, average, "allreduce_")
    return allreduce_async_(tensor, name, op, prescale_factor, postscale_factor,
                            process_set).wait()


grouped_allreduce = _torch.grouped_allreduce
grouped_allreduce_ = _torch.grouped_allreduce_
grouped_allreduce_async = _torch.grouped_allreduce_async
grouped_allreduce_async_ = _torch.grouped_allreduce_async_
reducescatter_async = _torch.reducescatter_async


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


def _allgather_async(tensor, name, process_set):
    if _moves_as_bytes(tensor):
        h = _torch.allgather_async(_to_bytes(tensor), name, process_set)
        dtype, tail = tensor.dtype, tuple(tensor.shape[1:])
        return _converted(h, lambda out: _from_bytes(out, dtype, tail))
    return _torch.allgather_async(tensor, name, process_set)


def allgather_async(tensor, name=None, process_set=0):
    """Starts an allgather; synchronize(handle) returns the concatenation along the first
    dimension."""
    return _allgather_async(tensor, name, process_set)


def allgather(tensor, name=None, process_set=0):
    """Every rank's tensor concatenated along the first dimension (which may differ by rank);
    differentiable (as in Horovod: the gradient is the average of the ranks' gradients of the
    whole result, this rank's rows of it)."""
    if _wants_grad(tensor):
        return _AllgatherFunction.apply(tensor, _ops.auto_name("allgather", name), process_set)
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
        return _BroadcastFunction.apply(tensor, root_rank, _ops.auto_name("broadcast", name),
                                        process_set)
    return _broadcast_async(tensor, root_rank, name, process_set, False).wait()


def broadcast_(tensor, root_rank, name=None, process_set=0):
    """Overwrites tensor with root_rank's; returns it."""
    return _broadcast_async(tensor, root_rank, name, process_set, True).wait()


def _alltoall_async(tensor, name, process_set):
    if _moves_as_bytes(tensor):
        h = _torch.alltoall_async(_to_bytes(tensor), name, process_set)
        dtype, tail = tensor.dtype, tuple(tensor.shape[1:])
        return _converted(h, lambda out: _from_bytes(out, dtype, tail))
    return _torch.alltoall_async(tensor, name, process_set)


def alltoall_async(tensor, name=None, process_set=0):
    return _alltoall_async(tensor, name, process_set)


def alltoall(tensor, name=None, process_set=0):
    """Splits the first dimension into size() equal blocks, sends block j to rank j, returns the
    blocks received, rank 0's first; differentiable (the gradient goes back the same way)."""
    if _wants_grad(tensor):
        return _AlltoallFunction.apply(tensor, _ops.auto_name("alltoall", name), process_set)
    return _alltoall_async(tensor, name, process_set).wait()


def reducescatter(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                  process_set=0):
    """Reduces over ranks and returns this rank's rows of the first dimension; differentiable
    for Sum and Average (the gradient is the allgather of the ranks' gradients, scaled as the
    forward was)."""
    if _wants_grad(tensor):
        return _ReducescatterFunction.apply(tensor, _ops.auto_name("reducescatter", name), op,
                                            prescale_factor, postscale_factor, process_set)
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
        mine = members.index(_ddp.rank())
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
        if _ddp.rank() != ctx.root_rank:
            reduced.zero_()
        return reduced, None, None, None


class _AlltoallFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.process_set = process_set
        return _alltoall_async(tensor, name, process_set).wait()

    @staticmethod
    def backward(ctx, grad):
        return alltoall(grad.contiguous(), process_set=ctx.process_set), None, None


class _ReducescatterFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set):
        ctx.op, ctx.prescale, ctx.postscale = _ops.check_op(op, "reducescatter"), prescale, postscale
        ctx.process_set = process_set
        return _torch.reducescatter(tensor, op, name, prescale, postscale, process_set)

    @staticmethod
    def backward(ctx, grad):
        if ctx.op not in (ReduceOp.SUM, ReduceOp.AVERAGE):
            raise error(f"ddp.torch.reducescatter: op {ReduceOp(ctx.op).name} has no gradient")
        scale = float(ctx.prescale) * float(ctx.postscale)
        if ctx.op == ReduceOp.SUM:
            scale *= len(_ops.process_set_ranks(ctx.process_set))
        grad = grad.contiguous() * scale if scale != 1.0 else grad.contiguous()
        return allgather(grad, process_set=ctx.process_set), None, None, None, None, None


def _grouped_results(kind, tensors, name, submit):
    tensors = list(tensors)
    if not tensors:
        raise error(f"ddp.torch.{kind}: needs at least one tensor")
    name = _ops.auto_name(kind, name)
    handles = [submit(t, f"{name}.{i}") for i, t in enumerate(tensors)]
    return _ops.GroupHandle(handles, name)


def grouped_allgather_async(tensors, name=None, process_set=0):
    """Allgathers of several tensors submitted together; synchronize returns their list."""
    return _grouped_results("grouped_allgather", tensors, name,
                            lambda t, n: _allgather_async(t, n, process_set))


def grouped_allgather(tensors, name=None, process_set=0):
    return grouped_allgather_async(tensors, name, process_set).wait()


def grouped_reducescatter_async(tensors, name=None, op=Average, prescale_factor=1.0,
                                postscale_factor=1.0, process_set=0):
    """Reduce-scatters of several tensors submitted together; synchronize returns their list."""
    return _grouped_results("grouped_reducescatter", tensors, name,
                            lambda t, n: _torch.reducescatter_async(t, n, op, prescale_factor,
                                                                    postscale_factor,
                                                                    process_set))


def grouped_reducescatter(tensors, name=None, op=Average, prescale_factor=1.0,
                          postscale_factor=1.0, process_set=0):
    return grouped_reducescatter_async(tensors, name, op, prescale_factor, postscale_factor,
                                       process_set).wait()


def allreduce(tensor, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0,
              process_set=0, average=None):
    """op over ranks (Average by default), as a new tensor; differentiable for Sum and Average.
    `average` is Horovod's deprecated flag (True: Average, False: Sum)."""
    if op is None or average is not None:
        op = _ops.resolve_op(op, average, "allreduce")
    if isinstance(tensor, torch.Tensor) and tensor.requires_grad and torch.is_grad_enabled():
        return _AllreduceFunction.apply(tensor, _ops.auto_name("allreduce", name), op,
                                        prescale_factor, postscale_factor, process_set)
    return allreduce_async(tensor, name, op, prescale_factor, postscale_factor,
                           process_set).wait()
