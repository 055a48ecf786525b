# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The operations that reduce: allreduce (dense, sparse, bitwise), its coalesced form, broadcast
and reduce, as a mixin of the backend's operations (operations.py gives _submit and the group)."""
from __future__ import annotations

import torch
import torch.distributed as dist

from .. import functions as _f
from . import checks as _checks
from . import reduce_ops
from . import tensors as tensors_


class Reductions:
    def allreduce(self, tensors, opts=None):
        if any(t.is_sparse for t in tensors):  # torch 1.13 sends sparse tensors here
            return self._allreduce_sparse(tensors, opts)
        if len(tensors) == 1 and reduce_ops.bitwise_fold(opts, tensors[0], "allreduce") is not None:
            return self._bitwise(tensors[0], opts, None, tensors)
        op, scale = reduce_ops.scaled_op(opts, tensors[0], "allreduce")
        return self._submit([_f.allreduce_async_(t, op=op, prescale_factor=scale,
                                                 process_set=self._set)
                             for t in tensors], tensors)

    def _allreduce_sparse(self, tensors, opts=None):
        """A sparse (COO) tensor's SUM or AVG, as Gloo's: every rank's indices and values are
        gathered (each rank may hold a different number), summed where indices meet, and the
        coalesced result replaces the tensor in place."""
        _checks.one(tensors, "a sparse allreduce")
        tensor = tensors[0]
        if not tensor.is_sparse:
            raise ValueError("torch.distributed backend 'ddp': allreduce_sparse needs a sparse "
                             "(COO) tensor")
        reduce_op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        if reduce_ops.op_name(reduce_op) not in ("SUM", "AVG"):
            raise ValueError(f"torch.distributed backend 'ddp': a sparse allreduce takes "
                             f"ReduceOp.SUM or AVG, not {reduce_ops.op_name(reduce_op)}")
        mine = tensor.coalesce()
        nnz = mine._nnz()  # noqa: SLF001 - torch's sparse tensors' count
        indices = _f.allgather_async(mine.indices().t().contiguous(), process_set=self._set)
        values = _f.allgather_async(tensors_.as_rows(mine.values().contiguous(), nnz),
                                    process_set=self._set)
        dense = tuple(mine.values().shape[1:])

        def finish(outs):
            rows = outs[1].reshape((outs[1].shape[0],) + dense)
            if reduce_ops.op_name(reduce_op) == "AVG":
                rows = rows / self._size if rows.is_floating_point() else rows // self._size
            total = torch.sparse_coo_tensor(outs[0].t(), rows, tensor.shape).coalesce()
            tensor.copy_(total)
        return self._submit([indices, values], tensors, finish)

    allreduce_sparse = _allreduce_sparse  # torch 2's name (profiled in operations.py; not this)

    def _bitwise(self, tensor, opts, root, result):
        """A bitwise allreduce (root None) or reduce: gathered, then folded in rank order."""
        fold = reduce_ops.bitwise_fold(opts, tensor, "allreduce")
        handle = _f.allgather_async(tensor.reshape(1, -1), process_set=self._set)

        def finish(outs):
            if root is None or self._rank == root:
                rows = outs[0]
                acc = rows[0].clone()
                for r in range(1, rows.shape[0]):
                    acc = fold(acc, rows[r])
                tensor.copy_(acc.view_as(tensor))
        return self._submit([handle], result, finish)

    def allreduce_coalesced(self, tensors, opts=None):
        op, scale = reduce_ops.scaled_op(opts, tensors[0], "allreduce_coalesced")
        return self._submit([_f.grouped_allreduce_async_(list(tensors), op=op,
                                                         prescale_factor=scale,
                                                         process_set=self._set)], tensors)

    def broadcast(self, tensors, opts):
        root = opts.rootRank
        return self._submit([_f.broadcast_async_(t, root, process_set=self._set)
                             for t in tensors], tensors)

    def reduce(self, tensors, opts):
        _checks.one(tensors, "reduce")
        root, tensor = opts.rootRank, tensors[0]
        if reduce_ops.bitwise_fold(opts, tensor, "reduce") is not None:
            return self._bitwise(tensor, opts, root, tensors)
        op, scale = reduce_ops.scaled_op(opts, tensor, "reduce")
        handle = _f.allreduce_async(tensor, op=op, prescale_factor=scale, process_set=self._set)

        def finish(outs):
            if self._rank == root:
                tensor.copy_(outs[0])
        return self._submit([handle], tensors, finish)
