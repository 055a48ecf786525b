# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Horovod's gradient compression for TensorFlow (ddp/_compression.py): Compression.none,
Compression.fp16."""
import tensorflow as tf

from .._compression import Compressor, NoneCompressor, framework

FP16Compressor, Compression = framework(__name__, lambda t: t.dtype.is_floating, tf.cast,
                                        tf.float16)

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "Compression"]
