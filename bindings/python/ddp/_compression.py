# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Gradient compression, written once for every framework. Horovod's (`Compression.none`,
`Compression.fp16`): a compressor is a pair of static functions, compress(tensor) -> (tensor to
reduce, context) and decompress(tensor, context) -> tensor; a framework supplies only how to tell
a floating tensor and how to cast one (framework(...) below). libddp's own (`Compression.bf16`,
`Compression.int8`) run in the engine (docs/compression.md): their compress and decompress pass
the tensor through, and the allreduce takes their `codec`, which encodes the fused buffer on the
wire with error feedback."""


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


class EngineCompressor(NoneCompressor):
    """A codec of libddp's engine (`codec`): the tensor passes through compress and decompress
    as NoneCompressor's does, and the allreduce encodes it on the wire, its residual (what the
    encoding lost) kept for its name and added to its next contribution. For floating-point
    gradients, summed or averaged."""

    codec = "none"


class BF16Compressor(EngineCompressor):
    """bfloat16 on the wire (half the bytes), rounded to nearest even, with error feedback."""

    codec = "bf16"


class Int8Compressor(EngineCompressor):
    """int8 on the wire with a float32 scale per block of 256 values (about a quarter of the
    bytes), with error feedback."""

    codec = "int8"


class PowerSGDCompressor(EngineCompressor):
    """PowerSGD (Vogels et al., 2019) at `rank`: each matrix as a rank-r product P Q^T, only P and
    Q on the wire, with warm start and error feedback. For tensors of two or more dimensions
    whose rank allows it; DistributedOptimizer and the comm hooks send the others without
    compression."""

    codec = "powersgd"
    rank = 4

    @staticmethod
    def takes(shape) -> bool:
        """Whether a tensor of this shape is compressed (else it goes without compression)."""
        return False


def powersgd(rank: int = 4):
    """Compression.powersgd(rank=4): PowerSGD at that rank, as a compressor class."""
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise ValueError(f"Compression.powersgd: rank must be an int >= 1, got {rank!r}")

    def takes(shape) -> bool:
        shape = tuple(shape)
        if len(shape) < 2 or shape[0] == 0:
            return False
        cols = 1
        for d in shape[1:]:
            cols *= d
        return rank <= min(shape[0], cols)

    return type(f"PowerSGDCompressor{rank}", (PowerSGDCompressor,),
                {"rank": rank, "takes": staticmethod(takes), "__module__": __name__,
                 "__doc__": PowerSGDCompressor.__doc__})


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
        """Compression.none (default) and Compression.fp16 (Horovod's: a cast before the
        allreduce), and the engine's Compression.bf16, .int8 and .powersgd(rank=4)."""

        none = NoneCompressor
        fp16 = FP16Compressor
        bf16 = BF16Compressor
        int8 = Int8Compressor
        powersgd = staticmethod(powersgd)

    for cls in (FP16Compressor, Compression):
        cls.__module__, cls.__qualname__ = module, cls.__name__
    return FP16Compressor, Compression
