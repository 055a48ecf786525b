# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Horovod's gradient compression for TensorFlow (ddp/_compression.py): Compression.none,
Compression.fp16. (The engine's codecs, Compression.bf16 and .int8, are not passed on by the
TensorFlow ops yet: docs/compression.md.)"""
import tensorflow as tf

from .._compression import Compressor, NoneCompressor, framework

FP16Compressor, Compression = framework(__name__, lambda t: t.dtype.is_floating, tf.cast,
                                        tf.float16, engine_codecs=False)

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "Compression"]
