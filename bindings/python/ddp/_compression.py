# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Horovod's gradient compression (`Compression.none`, `Compression.fp16`), written once for every
framework: a compressor is a pair of static functions, compress(tensor) -> (tensor to reduce,
context) and decompress(tensor, context) -> tensor; a framework supplies only how to tell a
floating tensor and how to cast one (framework(...) below)."""


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


def framework(module, is_floating, cast, float16):
    """(FP16Compressor, Compression) for a framework, named as classes of MODULE:
    IS_FLOATING(tensor), CAST(tensor, dtype) and its FLOAT16 dtype."""

    class FP16Compressor(Compressor):
        """Reduces floating-point gradients as float16 (half the bytes on the wire), then casts
        the result back to the gradient's dtype. Other dtypes pass through unchanged."""

        @staticmethod
        def compress(tensor):
            if is_floating(tensor) and tensor.dtype != float16:
                return cast(tensor, float16), tensor.dtype
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor if ctx is None else cast(tensor, ctx)

    class Compression:
        """Compression.none (default) and Compression.fp16."""

        none = NoneCompressor
        fp16 = FP16Compressor

    for cls in (FP16Compressor, Compression):
        cls.__module__, cls.__qualname__ = module, cls.__name__
    return FP16Compressor, Compression
