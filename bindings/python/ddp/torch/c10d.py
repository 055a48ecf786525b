"""The torch.distributed backend "ddp": `dist.init_process_group("ddp")` on libddp's engine.

`import ddp.torch` registers it. The backend is thin, as third-party backends are: operations
that submit to the same fusion engine as ddp.torch's (shared memory within a host, TCP, MPI or
libfabric between hosts, NCCL for CUDA tensors), and a Work per operation that wraps a torch
Future, which DDP's reducer chains its callbacks on. On torch 2 torch calls a C++ Backend built
for its torch (bindings/torch_native/backend.cc, in a ProcessGroup named "ddp"), which forwards
each operation here (_Forwarded); on torch 1.13, and on torch 2 without that module, torch calls
a Python ProcessGroup or Backend of this file. A thread per
process group finishes the operations in the order they were issued (the engine finishes them in
that order) and completes their futures, with torch's backend error (DistBackendError where the
version has it) when the job broke: the message names the ranks, host and tensor as DDPError
does, and the exception carries `ranks` and `tensor`.

Rendezvous goes through the store torch hands in (`env://`, `tcp://`, `file://` or `store=`):
rank 0 hosts libddp's own store and puts its address and the job token there (ddp/_launch.py);
`ddp://` (c10d_rendezvous.py) reads the launcher's variables instead. The default group is
libddp's job; every later group (new_group) is a libddp job of its own among its members
(_ddp.group_init), whose id the operations take as their process set.
docs/pytorch-distributed.md says what is served and where the backend differs from Gloo.
"""
from __future__ import annotations

import functools
import inspect
import threading
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist

from .. import _ddp, _launch, _ops
from . import _native, _shutdown
from . import c10d_checks as _checks
from . import c10d_finish as _finish
from . import c10d_groups as _groups
from . import c10d_monitored as _monitored
from . import c10d_profile as _profile
from . import c10d_rendezvous as _rendezvous
from .c10d_work import _TIMED_OUT, BackendError, _AnySourceWork, _EngineWork, _error, _work
from . import functions as _f

_C = torch._C._distributed_c10d
NAME = "ddp"

# torch's reduce ops by name (RedOpType's), on every torch version.
_OPS = {"SUM": _ops.ReduceOp.SUM, "AVG": _ops.ReduceOp.AVERAGE, "PRODUCT": _ops.ReduceOp.PRODUCT,
        "MIN": _ops.ReduceOp.MIN, "MAX": _ops.ReduceOp.MAX}


# The bitwise ops, which libddp's engine does not reduce: the ranks' tensors are gathered and
# folded here (integer and bool tensors, as Gloo serves them on CPU).
_BITWISE = {"BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}


def _op_name(reduce_op):
    kind = getattr(reduce_op, "op", reduce_op)  # a ReduceOp holds its RedOpType as .op
    return getattr(kind, "name", str(kind))


def _op(reduce_op, what):
    """libddp's op for a torch ReduceOp (or its RedOpType); a clear error for those it lacks."""
    name = _op_name(reduce_op)
    if name not in _OPS:
        raise ValueError(f"torch.distributed backend 'ddp': {what} with ReduceOp.{name} is not "
                         f"supported (SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM on torch 2, and "
                         f"BAND, BOR, BXOR on integer tensors are)")
    return _OPS[name]


def _bitwise_fold(opts, tensor, what):
    """The fold of a bitwise op, or None for the others."""
    fold = _BITWISE.get(_op_name(opts.reduceOp)) if opts is not None else None
    if fold is not None and (tensor.is_floating_point() or tensor.is_complex()):
        raise ValueError(f"torch.distributed backend 'ddp': {what} with "
                         f"ReduceOp.{_op_name(opts.reduceOp)} needs an integer or bool tensor, "
                         f"not {tensor.dtype}")
    return fold


def _premul_factor(reduce_op, tensor, what):
    """PREMUL_SUM's factor (a SUM of every rank's input times it; torch 2 makes such ops with
    dist._make_nccl_premul_sum), or None for the other ops."""
    if _op_name(reduce_op) != "PREMUL_SUM":
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


def _scaled_op(opts, tensor, what):
    """libddp's op and the factor its inputs are multiplied by first (PREMUL_SUM's; else 1)."""
    reduce_op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
    factor = _premul_factor(reduce_op, tensor, what)
    if factor is not None:
        return _ops.ReduceOp.SUM, factor
    return _op(reduce_op, what), 1.0


# The operation being called on this thread, for _submit: its profiler event (c10d_profile).
_calling = threading.local()


def _operation(method, title, inputs_of):
    """An operation of the backend: its profiler event ("ddp:<title>" reading `inputs_of(*args)`,
    closed when it finishes), and torch's error when its submission fails (the job broke before
    it). No autograd, as in Gloo and NCCL: a tensor that requires grad (a Parameter) moves as
    data (torch.distributed.nn has the differentiable forms). Once a failure of libddp's broke
    the job (every rank has its error), every later operation raises it before it submits
    anything, whose own error would be a later symptom (a peer that has left since). A failure of
    this rank's own part that torch 1.13 keeps for the next operation (its Work cannot raise) is
    raised after the submission (_submit_future), so that the peers' operation still completes."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        failed = getattr(getattr(self, "_finisher", None), "failed", None)
        if failed is not None and _finish.breaks_the_job(failed, wait_raises=True):
            raise failed
        _calling.event = _profile.begin(title, inputs_of, args)
        try:
            with torch.no_grad():
                return method(self, *args, **kwargs)
        except _ddp.DDPError as e:
            error = _error(e, bad_input_stays=True)
            if error is e:
                raise
            raise error from e
        finally:
            _profile.end(_calling.event)  # still here: the operation was never submitted
            _calling.event = None
    return wrapper


def _flat(tensors):
    return torch.cat([t.reshape(-1) for t in tensors]) if len(tensors) > 1 else \
        tensors[0].reshape(-1)


def _copy_chunks(flat, outputs):
    offset = 0
    for out in outputs:
        n = out.numel()
        out.copy_(flat[offset:offset + n].view_as(out))
        offset += n


def _as_rows(tensor, rows):
    """`tensor` as `rows` rows (zero rows included, which reshape(0, -1) refuses)."""
    if rows == 0:
        width = 1
        for d in tensor.shape[1:]:
            width *= d
        return tensor.reshape(0, width)
    return tensor.reshape(rows, -1)


class _Operations:
    """The operations, shared by the torch 2 Backend and the torch 1.13 ProcessGroup below (both
    are pybind11 classes whose C++ side calls these Python methods by name)."""

    def _start(self, store, rank, size, timeout, any_source):
        """The default group runs on libddp's job (joined here through torch's store unless
        ddp.init() joined it); every later group (new_group) on a group of its own, a libddp job
        among its members alone (as Gloo gives each process group its own connections).
        `any_source`: whether torch can ask this backend's Work for a recv's sender (torch 1.13,
        and torch 2 through the C++ Backend): then recv from any source is served, and every
        send announces itself for it (c10d_groups.PointToPoint)."""
        self._rank, self._size, self._any_source = rank, size, any_source
        self._store, self._monitored = store, 0
        if not _ddp.is_initialized() or not dist.is_initialized():
            _join(store, rank, size, timeout)
            self._set, name = _ops.WORLD, "default"
        else:
            self._set = _groups.make(store, rank, size, timeout)
            name = f"group{self._set - _ddp.FIRST_GROUP}"
        self._finisher = _finish.Finisher(name, _error)
        self._finisher.start()
        self._p2p = _groups.PointToPoint(store, rank, timeout, self._finisher)

    def getBackendName(self):  # noqa: N802 - torch's name
        return NAME

    # Operations -----------------------------------------------------------------------------

    # Whether torch's C++ Backend (backend.cc) may complete an operation from libddp's engine
    # itself (_Forwarded's): then an operation whose result needs no Python step skips the
    # finisher and its completers (two hops between Python threads, most of a small allreduce).
    _engine_completes = False

    def _submit(self, handles, result, finish=None, finisher=None, wait_here=False):
        if (self._engine_completes and finish is None and finisher is None and handles and
                getattr(_calling, "event", None) is None and  # a profiler's event ends here
                all(type(h) is _ddp.Handle and h.completes_without_python for h in handles) and
                all(t.device.type == "cpu" for t in result)):
            if self._finisher.failed is not None:
                raise self._finisher.failed
            return _EngineWork(self, handles, result)
        future = self._submit_future(handles, result, finish, finisher)
        if wait_here:
            future.wait()  # raises the operation's error
        return _work(future, chained=not self._engine_completes)

    def _submit_future(self, handles, result, finish=None, finisher=None):
        """Hands the operation to its finisher; returns the future its completion sets."""
        finisher = finisher or self._finisher
        if finisher.failed is not None:
            raise finisher.failed

        def wait():
            outs = [h.wait() for h in handles]
            if finish is not None:
                with _shutdown.torch_call(), torch.no_grad():  # copies into the caller's
                    finish(outs)
        event, _calling.event = getattr(_calling, "event", None), None
        return finisher.submit(wait, result, event)

    def allreduce(self, tensors, opts=None):
        if any(t.is_sparse for t in tensors):  # torch 1.13 sends sparse tensors here
            return self._allreduce_sparse(tensors, opts)
        if len(tensors) == 1 and _bitwise_fold(opts, tensors[0], "allreduce") is not None:
            return self._bitwise(tensors[0], opts, None, tensors)
        op, scale = _scaled_op(opts, tensors[0], "allreduce")
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
        if _op_name(reduce_op) not in ("SUM", "AVG"):
            raise ValueError(f"torch.distributed backend 'ddp': a sparse allreduce takes "
                             f"ReduceOp.SUM or AVG, not {_op_name(reduce_op)}")
        mine = tensor.coalesce()
        nnz = mine._nnz()
        indices = _f.allgather_async(mine.indices().t().contiguous(), process_set=self._set)
        values = _f.allgather_async(_as_rows(mine.values().contiguous(), nnz),
                                    process_set=self._set)
        dense = tuple(mine.values().shape[1:])

        def finish(outs):
            rows = outs[1].reshape((outs[1].shape[0],) + dense)
            if _op_name(reduce_op) == "AVG":
                rows = rows / self._size if rows.is_floating_point() else rows // self._size
            total = torch.sparse_coo_tensor(outs[0].t(), rows, tensor.shape).coalesce()
            tensor.copy_(total)
        return self._submit([indices, values], tensors, finish)

    allreduce_sparse = _allreduce_sparse  # torch 2's name (profiled below; not the above)

    def _bitwise(self, tensor, opts, root, result):
        """A bitwise allreduce (root None) or reduce: gathered, then folded in rank order."""
        fold = _bitwise_fold(opts, tensor, "allreduce")
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
        op, scale = _scaled_op(opts, tensors[0], "allreduce_coalesced")
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
        if _bitwise_fold(opts, tensor, "reduce") is not None:
            return self._bitwise(tensor, opts, root, tensors)
        op, scale = _scaled_op(opts, tensor, "reduce")
        handle = _f.allreduce_async(tensor, op=op, prescale_factor=scale, process_set=self._set)

        def finish(outs):
            if self._rank == root:
                tensor.copy_(outs[0])
        return self._submit([handle], tensors, finish)

    def allgather(self, output_lists, inputs, opts=None):
        _checks.one(inputs, "allgather")
        _checks.one(output_lists, "allgather")
        outputs = output_lists[0]
        _checks.like(outputs, self._size, inputs[0].numel(), inputs[0].dtype, "allgather")
        handle = _f.allgather_async(inputs[0].reshape(1, -1), process_set=self._set)
        return self._submit([handle], output_lists, lambda outs: _copy_chunks(
            outs[0].reshape(-1), outputs))

    def _allgather_base(self, output, input, opts=None):  # noqa: A002 - torch's name
        if output.numel() != input.numel() * self._size:
            raise ValueError(f"torch.distributed backend 'ddp': all_gather_into_tensor's output "
                             f"has {output.numel()} elements, not {self._size} x the input's "
                             f"{input.numel()}")
        _checks.dtypes([output], input.dtype, "all_gather_into_tensor")
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
        flat = _flat(inputs)
        handle = _f.allgather_async(flat.reshape(1, -1), process_set=self._set)

        def finish(outs):
            rows = outs[0]
            for r in range(self._size):
                _copy_chunks(rows[r], output_lists[r])
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
                _copy_chunks(outs[0].reshape(-1), output_lists[0])
        return self._submit([handle], output_lists, finish)

    def scatter(self, outputs, input_lists, opts):
        _checks.one(outputs, "scatter")
        root, out = opts.rootRank, outputs[0]
        if self._rank == root:
            _checks.one(input_lists, "scatter")
            _checks.like(input_lists[0], self._size, out.numel(), out.dtype, "scatter", "input")
            whole = _flat(input_lists[0]).clone()
        else:
            whole = torch.empty(out.numel() * self._size, dtype=out.dtype, device=out.device)
        handle = _f.broadcast_async_(whole, root, process_set=self._set)
        n = out.numel()
        return self._submit([handle], outputs, lambda _: out.copy_(
            whole[self._rank * n:(self._rank + 1) * n].view_as(out)))

    def reduce_scatter(self, outputs, input_lists, opts=None):
        _checks.one(outputs, "reduce_scatter")
        out, inputs = outputs[0], input_lists[0]
        op, scale = _scaled_op(opts, out, "reduce_scatter")
        if any(t.numel() != out.numel() for t in inputs) or len(inputs) != self._size:
            raise ValueError("torch.distributed backend 'ddp': reduce_scatter needs one input per "
                             "rank, each the size of the output")
        _checks.dtypes(inputs, out.dtype, "reduce_scatter")
        handle = _f.reducescatter_async(_as_rows(_flat(inputs), self._size), op=op,
                                        prescale_factor=scale, process_set=self._set)
        return self._submit([handle], outputs, lambda outs: out.copy_(outs[0].view_as(out)))

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002 - torch's name
        op, scale = _scaled_op(opts, output, "reduce_scatter")
        if input.numel() != output.numel() * self._size:
            raise ValueError(f"torch.distributed backend 'ddp': reduce_scatter_tensor's input "
                             f"has {input.numel()} elements, not {self._size} x the output's "
                             f"{output.numel()}")
        _checks.dtypes([input], output.dtype, "reduce_scatter_tensor")
        if _f._into_fits(input, output):  # noqa: SLF001 - the package's own
            return self._submit([_f._reducescatter_into_async(  # noqa: SLF001
                _as_rows(input, self._size), output, op, scale, self._set)], [output])
        handle = _f.reducescatter_async(_as_rows(input, self._size), op=op,
                                        prescale_factor=scale, process_set=self._set)
        return self._submit([handle], [output], lambda outs: output.copy_(
            outs[0].view_as(output)))

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        """FSDP's: several all_gather_into_tensor at once, in one allgather."""
        _checks.coalesced(outputs, inputs, self._size, self._size,
                          "all_gather_into_tensor (coalesced)")
        sizes = [t.numel() for t in inputs]
        handle = _f.allgather_async(_flat(inputs).reshape(1, -1), process_set=self._set)

        def finish(outs):
            rows = outs[0].reshape(self._size, -1)
            offset = 0
            for out, n in zip(outputs, sizes):
                out.view(self._size, n).copy_(rows[:, offset:offset + n])
                offset += n
        return self._submit([handle], outputs, finish)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        """FSDP's: several reduce_scatter_tensor at once, in one reduce-scatter."""
        op, scale = _scaled_op(opts, outputs[0], "reduce_scatter")
        _checks.coalesced(inputs, outputs, self._size, self._size,
                          "reduce_scatter_tensor (coalesced)")
        sizes = [t.numel() for t in outputs]
        rows = torch.cat([t.reshape(self._size, n) for t, n in zip(inputs, sizes)], dim=1)
        handle = _f.reducescatter_async(rows, op=op, prescale_factor=scale, process_set=self._set)
        return self._submit([handle], outputs, lambda outs: _copy_chunks(
            outs[0].reshape(-1), outputs))

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
        return self._alltoallv(_as_rows(input, rows),
                               sends or [rows // self._size] * self._size, [output], finish)

    def alltoall(self, outputs, inputs, opts=None):
        what = "all_to_all"
        _checks.count(inputs, self._size, what, "input tensors")
        _checks.count(outputs, self._size, what, "output tensors")
        _checks.dtypes(list(outputs) + list(inputs), inputs[0].dtype, what)

        def finish(out, got):
            _checks.received(got, [t.numel() for t in outputs], what)
            _copy_chunks(out.reshape(-1), outputs)
        return self._alltoallv(_flat(inputs).reshape(-1, 1), [t.numel() for t in inputs],
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

    def barrier(self, opts=None):
        token = torch.zeros(1)
        # torch 1.13's Work cannot raise (_work): there the barrier is waited for in the call, so
        # that a rank that never comes fails it (after the group's timeout) instead of passing.
        return self._submit([_f.allreduce_async_(token, op=_ops.ReduceOp.SUM,
                                                 process_set=self._set)], [],
                            wait_here=not hasattr(_C, "Backend"))

    def monitored_barrier(self, opts=None, wait_all_ranks=False):
        """Gloo's monitored barrier (c10d_monitored): rank 0 names the ranks that do not come
        within the timeout (opts: torch 2's BarrierOptions, torch 1.13's timedelta)."""
        number = _monitored.sequence(self._store, self._rank, self._monitored)
        self._monitored = number + 1
        _monitored.run(self._store, self._rank, self._size, number,
                       opts if opts is not None else timedelta(minutes=30), wait_all_ranks,
                       BackendError)

    def send(self, tensors, dst, tag):
        """A broadcast from this rank in the group of the pair (c10d_groups.PointToPoint): it
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
        (c10d_groups.PointToPoint.claim_any); the Work tells the sender once it is done."""
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

    def shutdown(self):
        self._finisher.stop()
        self._p2p.close()
        if self._set != _ops.WORLD:
            _groups.close(self._set)


def _first_arg(tensors, *_):
    return tensors


def _second_arg(_, inputs, *__):
    return inputs


# Each operation's profiler event: Gloo's title for it, and the tensors it reads (what Gloo
# records, and PyTorch's own suite checks: the coalesced forms are one event under the plain name).
_PROFILED = {
    "allreduce": ("all_reduce", _first_arg),
    "allreduce_coalesced": ("all_reduce", _first_arg),
    "allreduce_sparse": ("all_reduce", _first_arg),
    "broadcast": ("broadcast", _first_arg),
    "reduce": ("reduce", _first_arg),
    "allgather": ("all_gather", _second_arg),
    "_allgather_base": ("all_gather_into_tensor", lambda out, inp, *_: [inp]),
    "allgather_coalesced": ("all_gather", _second_arg),
    "gather": ("gather", _second_arg),
    "scatter": ("scatter", lambda outs, lists, *_: lists[0] if lists else []),
    "reduce_scatter": ("reduce_scatter", lambda outs, lists, *_: lists[0] if lists else []),
    "_reduce_scatter_base": ("reduce_scatter_tensor", lambda out, inp, *_: [inp]),
    "all_gather_single_coalesced": ("all_gather_into_tensor_coalesced", _second_arg),
    "reduce_scatter_single_coalesced": ("reduce_scatter_tensor_coalesced", _second_arg),
    "alltoall_base": ("all_to_all", lambda out, inp, *_: [inp]),
    "alltoall": ("all_to_all", _second_arg),
    "barrier": ("barrier", lambda *_: []),
    "send": ("send", _first_arg),
    "recv": ("recv", _first_arg),
    "recv_anysource": ("recvAnySource", _first_arg),
}
for _name, (_title, _inputs_of) in _PROFILED.items():
    setattr(_Operations, _name, _operation(getattr(_Operations, _name), _title, _inputs_of))
# torch 2's names for the same operations.
for _alias, _name in (("all_gather_single", "_allgather_base"),
                      ("reduce_scatter_single", "_reduce_scatter_base"),
                      ("all_to_all_single", "alltoall_base"),
                      ("allgather_into_tensor_coalesced", "all_gather_single_coalesced"),
                      ("reduce_scatter_tensor_coalesced", "reduce_scatter_single_coalesced")):
    setattr(_Operations, _alias, getattr(_Operations, _name))


if hasattr(_C, "Backend"):
    class BackendDDP(_Operations, _C.Backend):
        """torch 2: the backend of a torch ProcessGroup, for CPU and CUDA tensors."""

        # Read by torch's Python (batch_isend_irecv, split_group): inherited, these properties
        # would ask the C++ side, which asks back here without end.
        supports_coalescing = False
        supports_splitting = False

        def __init__(self, store, rank, size, timeout):
            _C.Backend.__init__(self, rank, size)
            self._start(store, rank, size, timeout, any_source=False)


class _Forwarded(_Operations):
    """torch 2: the operations behind the C++ Backend (bindings/torch_native/backend.cc), which
    torch calls and which forwards each operation here."""

    _engine_completes = True

    def __init__(self, store, rank, size, timeout):
        self._start(store, rank, size, timeout, any_source=True)


class ProcessGroupDDP(_Operations, dist.ProcessGroup):
    """torch 1.13 (which has no Backend class), and torch 2 releases whose Backend cannot be made
    from Python: a ProcessGroup of its own."""

    def __init__(self, store, rank, size, timeout):
        dist.ProcessGroup.__init__(self, rank, size)
        self._start(store, rank, size, timeout, any_source=not hasattr(_C, "Backend"))


def _first(out):
    """alltoall's handle gives (output, received splits) or the output alone."""
    return out[0] if isinstance(out, tuple) else out


def _join(store, rank, size, timeout):
    """Joins libddp's job through torch's store, or checks that the one joined already is it."""
    if _ddp.is_initialized():
        if (_ddp.rank(), _ddp.size()) != (rank, size):
            raise ValueError(f"torch.distributed backend 'ddp': this process is rank "
                             f"{_ddp.rank()} of {_ddp.size()} in libddp's job (ddp.init()), but "
                             f"init_process_group says rank {rank} of {size}")
        return
    overrides = _groups.launcher_unset()  # torch named the rank and size
    overrides.update(_launch.through_store(store, rank, size, timeout))
    _ddp.init(overrides)


def _create(store, rank, size, timeout):
    """torch 1.13's creator: the process group itself."""
    return ProcessGroupDDP(store, rank, size, timeout)


# Whether torch's Backend can be made from Python: torch 2.15's can; some torch 2 releases (2.11)
# bind no constructor for it, and their creators may return a whole ProcessGroup instead, which
# torch then uses as the group. Learned at the first group made.
_backend_constructible = True


def _ddp_alone(options):
    """Whether the group torch is making runs ddp on every device. torch hands a creator no
    backend string: this reads the backend map of torch's helper that called it (its local
    `backend_config`), and says False where it cannot tell (torch then registers the backend in
    its own group, named "custom")."""
    torchs = getattr(options, "process_group", None)
    if torchs is None or list(getattr(torchs, "_device_types", [])):
        return False  # no group to stand in for, or another backend is in it already
    frame = inspect.currentframe()
    try:
        while frame is not None:
            config = frame.f_locals.get("backend_config")
            if hasattr(config, "get_device_backend_map"):
                return set(config.get_device_backend_map().values()) == {NAME}
            frame = frame.f_back
        return False
    finally:
        del frame


def _named_group(options, backend):
    """The process group torch uses for the C++ backend: torch's own, named "ddp" (torch names a
    plugin's group "custom"), with the backend for CPU and CUDA tensors. Under
    TORCH_DISTRIBUTED_DEBUG=DETAIL the backend is wrapped in torch's checking wrapper, as torch
    wraps Gloo's and NCCL's."""
    # torch gives the backend the group's store under a device prefix ("cpu/"); the group's own is
    # the one under it.
    store = getattr(options.store, "underlying_store", options.store)
    group = _native.module.NamedProcessGroup(store, options.group_rank, options.group_size)
    kind = dist.ProcessGroup.BackendType.CUSTOM
    group._set_default_backend(kind)  # noqa: SLF001 - torch's own set-up of a group
    torchs = getattr(options, "process_group", None)
    if getattr(torchs, "bound_device_id", None) is not None:
        group.bound_device_id = torchs.bound_device_id
    c10d = dist.distributed_c10d
    if (hasattr(c10d, "_create_process_group_wrapper") and dist.is_gloo_available() and
            c10d.get_debug_level() == c10d.DebugLevel.DETAIL):
        backend = c10d._create_process_group_wrapper(  # noqa: SLF001 - what torch does here
            wrapped_pg=backend, store_prefix=str(getattr(options, "group_id", "ddp")),
            store=options.store, rank=options.group_rank, world_size=options.group_size,
            timeout=options.timeout)
    for device in ("cpu", "cuda"):
        group._register_backend(torch.device(device), kind, backend)  # noqa: SLF001
    return group


_warned_python_only = False


def _python_only():
    """Says once that torch 2's backend runs without its C++ part, and what that leaves out."""
    global _warned_python_only
    if not _warned_python_only:
        _warned_python_only = True
        warnings.warn(f"ddp.torch: the torch.distributed backend 'ddp' runs through torch's "
                      f"Python trampolines on torch {torch.__version__}, without recv from any "
                      f"source, Work.is_completed() and its name in torch's reports: "
                      f"{_native.missing}", RuntimeWarning, stacklevel=3)


def create_extended(options, backend_options=None):
    """torch 2's creator (extended API): the C++ Backend (the module built for this torch) over
    the Python operations; without that module, a Backend written in Python or, where torch
    cannot make one from Python, a ProcessGroup of its own (as on torch 1.13)."""
    global _backend_constructible
    args = (options.store, options.group_rank, options.group_size, options.timeout)
    forwarding = getattr(_native.module, "ForwardingBackend", None)
    if forwarding is not None:
        end = _native.module.end_completions
        if end not in _shutdown._native_ends:  # noqa: SLF001 - this package's own
            _shutdown._native_ends.append(end)  # noqa: SLF001
        backend = forwarding(_Forwarded(*args), options.group_rank, options.group_size,
                             options.timeout)
        # A group of ddp alone gets the group named "ddp"; in a group of several backends
        # ("cpu:ddp,cuda:nccl") torch registers this one beside the others.
        return _named_group(options, backend) if _ddp_alone(options) else backend
    _python_only()
    if _backend_constructible:
        try:
            return BackendDDP(*args)
        except TypeError as e:
            if "No constructor defined" not in str(e):
                raise
            _backend_constructible = False
    return ProcessGroupDDP(*args)


def register():
    """Registers the backend and the ddp:// init method (idempotent); `import ddp.torch` calls
    it."""
    _rendezvous.register()
    if not hasattr(_C, "Backend"):
        _monitored.extend_torch_113(NAME)
    if hasattr(dist.Backend, NAME.upper()):
        return
    params = inspect.signature(dist.Backend.register_backend).parameters
    if hasattr(_C, "Backend") and "extended_api" in params:
        dist.Backend.register_backend(NAME, create_extended, extended_api=True,
                                      devices=["cpu", "cuda"])
    else:
        dist.Backend.register_backend(NAME, _create)
