# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The operations that gather and scatter: allgather (into a list, a tensor, coalesced), gather,
scatter, reduce_scatter (into a tensor, coalesced), as a mixin of the backend's operations."""
from __future__ import annotations

import torch

from .. import functions as _f
from . import checks as _checks
from . import reduce_ops
from . import tensors as tensors_


class Gathers:
    def allgather(self, output_lists, inputs, opts=None):
        _checks.one(inputs, "allgather")
        _checks.one(output_lists, "allgather")
        outputs = output_lists[0]
        _checks.like(outputs, self._size, inputs[0].numel(), inputs[0].dtype, "allgather")
        handle = _f.allgather_async(inputs[0].reshape(1, -1), process_set=self._set)
        return self._submit([handle], output_lists, lambda outs: tensors_.copy_chunks(
            outs[0].reshape(-1), outputs))

    def _allgather_base(self, output, input, opts=None):  # noqa: A002 - torch's name
        _checks.whole(output, input, self._size, "all_gather_into_tensor", "output", "input")
        if _f._into_fits(input, output):  # noqa: SLF001 - the package's own
            return self._submit([_f._allgather_into_async(  # noqa: SLF001
                input, output, process_set=self._set)], [output])
        handle = _f.allgather_async(input.reshape(1, -1), process_set=self._set)
        return self._submit([handle], [output], lambda outs: output.copy_(
            outs[0].reshape(output.shape)))

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        _checks.count(output_lists, self._size, "allgather_coalesced", "output lists")
        for outputs in output_lists:
            _checks.coalesced(outputs, inputs, 1, 1, "allgather_coalesced")
        flat = tensors_.flat(inputs)
        handle = _f.allgather_async(flat.reshape(1, -1), process_set=self._set)

        def finish(outs):
            rows = outs[0]
            for r in range(self._size):
                tensors_.copy_chunks(rows[r], output_lists[r])
        return self._submit([handle], output_lists, finish)

    def gather(self, output_lists, inputs, opts):
        _checks.one(inputs, "gather")
        root = opts.rootRank
        if self._rank == root:
            _checks.one(output_lists, "gather")
            _checks.like(output_lists[0], self._size, inputs[0].numel(), inputs[0].dtype,
                         "gather")
        handle = _f.allgather_async(inputs[0].reshape(1, -1), process_set=self._set)

        def finish(outs):
            if self._rank == root:
                tensors_.copy_chunks(outs[0].reshape(-1), output_lists[0])
        return self._submit([handle], output_lists, finish)

    def scatter(self, outputs, input_lists, opts):
        _checks.one(outputs, "scatter")
        root, out = opts.rootRank, outputs[0]
        if self._rank == root:
            _checks.one(input_lists, "scatter")
            _checks.like(input_lists[0], self._size, out.numel(), out.dtype, "scatter", "input")
            whole = tensors_.flat(input_lists[0]).clone()
        else:
            whole = torch.empty(out.numel() * self._size, dtype=out.dtype, device=out.device)
        handle = _f.broadcast_async_(whole, root, process_set=self._set)
        n = out.numel()
        return self._submit([handle], outputs, lambda _: out.copy_(
            whole[self._rank * n:(self._rank + 1) * n].view_as(out)))

    def reduce_scatter(self, outputs, input_lists, opts=None):
        _checks.one(outputs, "reduce_scatter")
        out, inputs = outputs[0], input_lists[0]
        op, scale = reduce_ops.scaled_op(opts, out, "reduce_scatter")
        if any(t.numel() != out.numel() for t in inputs) or len(inputs) != self._size:
            raise ValueError("torch.distributed backend 'ddp': reduce_scatter needs one input per "
                             "rank, each the size of the output")
        _checks.dtypes(inputs, out.dtype, "reduce_scatter")
        handle = _f.reducescatter_async(tensors_.as_rows(tensors_.flat(inputs), self._size), op=op,
                                        prescale_factor=scale, process_set=self._set)
        return self._submit([handle], outputs, lambda outs: out.copy_(outs[0].view_as(out)))

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002 - torch's name
        op, scale = reduce_ops.scaled_op(opts, output, "reduce_scatter")
        _checks.whole(input, output, self._size, "reduce_scatter_tensor", "input", "output")
        if _f._into_fits(input, output):  # noqa: SLF001 - the package's own
            return self._submit([_f._reducescatter_into_async(  # noqa: SLF001
                tensors_.as_rows(input, self._size), output, op, scale, self._set)], [output])
        handle = _f.reducescatter_async(tensors_.as_rows(input, self._size), op=op,
                                        prescale_factor=scale, process_set=self._set)
        return self._submit([handle], [output], lambda outs: output.copy_(
            outs[0].view_as(output)))

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        """FSDP's: several all_gather_into_tensor at once, in one allgather."""
        _checks.coalesced(outputs, inputs, self._size, self._size,
                          "all_gather_into_tensor (coalesced)")
        sizes = [t.numel() for t in inputs]
        handle = _f.allgather_async(tensors_.flat(inputs).reshape(1, -1), process_set=self._set)

        def finish(outs):
            rows = outs[0].reshape(self._size, -1)
            offset = 0
            for out, n in zip(outputs, sizes):
                out.view(self._size, n).copy_(rows[:, offset:offset + n])
                offset += n
        return self._submit([handle], outputs, finish)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        """FSDP's: several reduce_scatter_tensor at once, in one reduce-scatter."""
        op, scale = reduce_ops.scaled_op(opts, outputs[0], "reduce_scatter")
        _checks.coalesced(inputs, outputs, self._size, self._size,
                          "reduce_scatter_tensor (coalesced)")
        sizes = [t.numel() for t in outputs]
        rows = torch.cat([t.reshape(self._size, n) for t, n in zip(inputs, sizes)], dim=1)
        handle = _f.reducescatter_async(rows, op=op, prescale_factor=scale, process_set=self._set)
        return self._submit([handle], outputs, lambda outs: tensors_.copy_chunks(
            outs[0].reshape(-1), outputs))
