# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Reshaping helpers of the operations: tensors flattened into one, chunks copied back out, a
tensor seen as rows."""
from __future__ import annotations

import torch


def flat(tensors):
    return torch.cat([t.reshape(-1) for t in tensors]) if len(tensors) > 1 else \
        tensors[0].reshape(-1)


def copy_chunks(flat, outputs):
    offset = 0
    for out in outputs:
        n = out.numel()
        out.copy_(flat[offset:offset + n].view_as(out))
        offset += n


def as_rows(tensor, rows):
    """`tensor` as `rows` rows (zero rows included, which reshape(0, -1) refuses)."""
    if rows == 0:
        width = 1
        for d in tensor.shape[1:]:
            width *= d
        return tensor.reshape(0, width)
    return tensor.reshape(rows, -1)
