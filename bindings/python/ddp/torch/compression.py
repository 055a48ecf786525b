"""Gradient compression for DistributedOptimizer (Horovod's interface)."""

import torch


class Compressor:
    """compress(tensor) -> (tensor to reduce, context); decompress(tensor, context) -> tensor."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Reduces gradients as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Reduces floating-point gradients as float16 (half the bytes on the wire), then casts the
    result back to the gradient's dtype. Other dtypes pass through unchanged."""

    @staticmethod
    def compress(tensor):
        if tensor.is_floating_point() and tensor.dtype != torch.float16:
            return tensor.to(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class Compression:
    """Compression.none (default) and Compression.fp16."""

    none = NoneCompressor
    fp16 = FP16Compressor
