# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Gradient compression for TensorFlow (ddp/_compression.py): Horovod's Compression.none and
Compression.fp16, and the engine's Compression.bf16, .int8 and .powersgd(rank=...), which the ops
pass on to the engine (docs/compression.md)."""
import tensorflow as tf

from .._compression import Compressor, NoneCompressor, framework

FP16Compressor, Compression = framework(__name__, lambda t: t.dtype.is_floating, tf.cast,
                                        tf.float16)

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "Compression"]
