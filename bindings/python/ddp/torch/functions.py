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
allgather = _torch.allgather
allgather_async = _torch.allgather_async
broadcast = _torch.broadcast
broadcast_ = _torch.broadcast_
broadcast_async = _torch.broadcast_async
broadcast_async_ = _torch.broadcast_async_
reducescatter = _torch.reducescatter
reducescatter_async = _torch.reducescatter_async
alltoall = _torch.alltoall
alltoall_async = _torch.alltoall_async


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
