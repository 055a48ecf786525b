# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The operations that exchange between ranks: alltoall (split sizes exchanged first), send and
recv (from a rank or from any source), as a mixin of the backend's operations."""
from __future__ import annotations

from ... import _ops
from .. import _native
from .. import functions as _f
from . import checks as _checks
from . import groups as _groups
from . import tensors as tensors_
from .work import _TIMED_OUT, BackendError, _AnySourceWork


class Exchanges:
    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes,  # noqa: A002
                      opts=None):
        what = "all_to_all_single"
        _checks.dtypes([output], input.dtype, what)
        rows = input.shape[0] if input.dim() else 1
        out_rows = output.shape[0] if output.dim() else 1
        sends = _checks.splits(input_split_sizes, rows, self._size, what, "input")
        wants = _checks.splits(output_split_sizes, out_rows, self._size, what, "output")
        # Always with the ranks' splits, even where this rank's are even or not given: a rank
        # alone cannot know whether its peers' are, and all must take the same path.
        wants = wants or [out_rows // self._size] * self._size

        def finish(out, got):
            _checks.received(got, wants, what)
            output.copy_(out.reshape(output.shape))
        return self._alltoallv(tensors_.as_rows(input, rows),
                               sends or [rows // self._size] * self._size, [output], finish)

    def alltoall(self, outputs, inputs, opts=None):
        what = "all_to_all"
        _checks.count(inputs, self._size, what, "input tensors")
        _checks.count(outputs, self._size, what, "output tensors")
        _checks.dtypes(list(outputs) + list(inputs), inputs[0].dtype, what)

        def finish(out, got):
            _checks.received(got, [t.numel() for t in outputs], what)
            tensors_.copy_chunks(out.reshape(-1), outputs)
        return self._alltoallv(tensors_.flat(inputs).reshape(-1, 1), [t.numel() for t in inputs],
                               outputs, finish)

    def _alltoallv(self, rows, splits, result, finish):
        """An alltoall with split sizes: the ranks' splits are exchanged first (an allgather)
        and the rows after it, both on the group's finisher, so that the call returns at once;
        `finish(received rows, received splits)` copies into the caller's tensors there."""
        name = _ops.auto_name("alltoall", None, self._set)  # here: the ranks' call order
        on_callers_stream = _groups.callers_stream(rows)

        def run(_):
            with on_callers_stream():
                out, got = _f.alltoall_async(rows, splits=splits, name=name,
                                             process_set=self._set).wait()
            finish(out, [int(c) for c in got.tolist()])
        return self._submit([], result, finish=run)

    def send(self, tensors, dst, tag):
        """A broadcast from this rank in the group of the pair (groups.PointToPoint): it
        completes once the receiver has posted its recv, as NCCL's send does."""
        _checks.one(tensors, "send")
        handle, finisher = self._p2p.transfer(tensors[0], self._rank, dst, tag, "send",
                                              announce=self._any_source)
        return self._submit([handle], tensors, finisher=finisher)

    def recv(self, tensors, src, tag):
        _checks.one(tensors, "recv")
        handle, finisher = self._p2p.transfer(tensors[0], src, self._rank, tag, "recv")
        return self._submit([handle], tensors, finisher=finisher)

    def recv_anysource(self, tensors, tag):
        """The first send of `tag` to this rank that no recv has taken, from any rank
        (groups.PointToPoint.claim_any); the Work tells the sender once it is done."""
        if not self._any_source:
            raise NotImplementedError(
                f"torch.distributed backend 'ddp': recv without src= (from any source) needs "
                f"the backend's C++ part on torch 2 (torch asks the Work for the sender through "
                f"C++): {_native.missing}; or pass src=")
        _checks.one(tensors, "recv")
        tensor, source = tensors[0], []

        def timed_out(message):
            error = BackendError(f"{_TIMED_OUT}{message}")
            error.local = True  # nothing was taken: later recvs from any source may still work
            return error

        def wait():
            sender, sequence = self._p2p.claim_any(self._size, tag, timed_out)
            handle, _ = self._p2p.transfer(tensor, sender, self._rank, tag, "recv",
                                           sequence=sequence, finisher=False)
            handle.wait()
            source.append(sender)
        return _AnySourceWork(self._submit_future([], tensors, finish=lambda _: wait(),
                                                  finisher=self._p2p.any_finisher()), source)
