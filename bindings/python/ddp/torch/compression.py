# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Gradient compression for DistributedOptimizer (Horovod's interface, ddp/_compression.py)."""

import torch

from .._compression import Compressor, NoneCompressor, framework

FP16Compressor, Compression = framework(__name__, lambda t: t.is_floating_point(),
                                        lambda t, d: t.to(d), torch.float16)

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "Compression"]
