# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""torch's reduce ops in libddp's terms: SUM, AVG, PRODUCT, MIN and MAX map to the engine's ops,
PREMUL_SUM to SUM with its factor applied first, and the bitwise ops (BAND, BOR, BXOR), which
the engine does not reduce, to a fold of the gathered tensors."""
from __future__ import annotations

import torch
import torch.distributed as dist

from ... import _ops

# torch's reduce ops by name (RedOpType's), on every torch version.
_OPS = {"SUM": _ops.ReduceOp.SUM, "AVG": _ops.ReduceOp.AVERAGE, "PRODUCT": _ops.ReduceOp.PRODUCT,
        "MIN": _ops.ReduceOp.MIN, "MAX": _ops.ReduceOp.MAX}


# The bitwise ops, which libddp's engine does not reduce: the ranks' tensors are gathered and
# folded here (integer and bool tensors, as Gloo serves them on CPU).
_BITWISE = {"BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}


def op_name(reduce_op):
    kind = getattr(reduce_op, "op", reduce_op)  # a ReduceOp holds its RedOpType as .op
    return getattr(kind, "name", str(kind))


def op(reduce_op, what):
    """libddp's op for a torch ReduceOp (or its RedOpType); a clear error for those it lacks."""
    name = op_name(reduce_op)
    if name not in _OPS:
        raise ValueError(f"torch.distributed backend 'ddp': {what} with ReduceOp.{name} is not "
                         f"supported (SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM on torch 2, and "
                         f"BAND, BOR, BXOR on integer tensors are)")
    return _OPS[name]


def bitwise_fold(opts, tensor, what):
    """The fold of a bitwise op, or None for the others."""
    fold = _BITWISE.get(op_name(opts.reduceOp)) if opts is not None else None
    if fold is not None and (tensor.is_floating_point() or tensor.is_complex()):
        raise ValueError(f"torch.distributed backend 'ddp': {what} with "
                         f"ReduceOp.{op_name(opts.reduceOp)} needs an integer or bool tensor, "
                         f"not {tensor.dtype}")
    return fold


def premul_factor(reduce_op, tensor, what):
    """PREMUL_SUM's factor (a SUM of every rank's input times it; torch 2 makes such ops with
    dist._make_nccl_premul_sum), or None for the other ops."""
    if op_name(reduce_op) != "PREMUL_SUM":
        return None
    state = reduce_op.__getstate__() if hasattr(reduce_op, "__getstate__") else None
    factor = state[1] if isinstance(state, tuple) and len(state) > 1 else None
    if factor is None:
        raise ValueError(f"torch.distributed backend 'ddp': {what} with ReduceOp.PREMUL_SUM "
                         f"needs torch 2 (torch {torch.__version__} does not give a backend "
                         f"the op's factor)")
    if isinstance(factor, (list, tuple)):
        factor = factor[0] if len(factor) == 1 else None
    if isinstance(factor, torch.Tensor):
        factor = float(factor.item()) if factor.numel() == 1 else None
    if factor is None:
        raise ValueError(f"torch.distributed backend 'ddp': {what} with ReduceOp.PREMUL_SUM "
                         f"takes a scalar or one-element factor")
    if not tensor.is_floating_point():
        raise ValueError(f"torch.distributed backend 'ddp': {what} with ReduceOp.PREMUL_SUM "
                         f"needs a floating-point tensor, not {tensor.dtype}")
    return float(factor)


def scaled_op(opts, tensor, what):
    """libddp's op and the factor its inputs are multiplied by first (PREMUL_SUM's; else 1)."""
    reduce_op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
    factor = premul_factor(reduce_op, tensor, what)
    if factor is not None:
        return _ops.ReduceOp.SUM, factor
    return op(reduce_op, what), 1.0
