# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The backend's operations, shared by torch 2's Backend and torch 1.13's ProcessGroup (both
pybind11 classes whose C++ side calls these Python methods by name): the group's start (the
default group on libddp's job, every later one a libddp job of its own), the submission of an
operation to the engine and its completion (the group's finisher, or the engine itself under
torch 2's C++ Backend), barriers, and the shutdown; the operations themselves are the mixins'
(reductions, gathers, exchanges). Each is wrapped here with its profiler event and torch's
error."""
from __future__ import annotations

import functools
import threading
from datetime import timedelta

import torch
import torch.distributed as dist

from ... import _ddp, _ops
from .. import _shutdown
from .. import functions as _f
from . import finish as _finish
from . import groups as _groups
from . import monitored as _monitored
from . import profile as _profile
from .exchanges import Exchanges
from .gathers import Gathers
from .reductions import Reductions
from .work import BackendError, _EngineWork, _error, _work

_C = torch._C._distributed_c10d  # noqa: SLF001 - torch's own
NAME = "ddp"

# The operation being called on this thread, for _submit: its profiler event (profile.py).
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


class Operations(Reductions, Gathers, Exchanges):
    """The operations, shared by the torch 2 Backend and the torch 1.13 ProcessGroup
    (backend.py)."""

    def _start(self, store, rank, size, timeout, any_source, own_job=False):
        """The default group runs on libddp's job (joined here through torch's store unless
        ddp.init() joined it); every later group (new_group) on a group of its own, a libddp job
        among its members alone (as Gloo gives each process group its own connections), as does
        every group made with `own_job` (backend.own_group: torchft's, re-formed at each quorum,
        whatever else the process runs). `any_source`: whether torch can ask this backend's Work
        for a recv's sender (torch 1.13, and torch 2 through the C++ Backend): then recv from any
        source is served, and every send announces itself for it (groups.PointToPoint)."""
        self._rank, self._size, self._any_source = rank, size, any_source
        self._store, self._monitored = store, 0
        if not own_job and (not _ddp.is_initialized() or not dist.is_initialized()):
            _groups.join_default(store, rank, size, timeout)
            self._set, name = _ops.WORLD, "default"
        else:
            self._set = _groups.make(store, rank, size, timeout)
            name = f"group{self._set - _ddp.FIRST_GROUP}"
        _groups.name_for_flight_records(self._set, size)
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

    def barrier(self, opts=None):
        token = torch.zeros(1)
        # torch 1.13's Work cannot raise (_work): there the barrier is waited for in the call, so
        # that a rank that never comes fails it (after the group's timeout) instead of passing.
        return self._submit([_f.allreduce_async_(token, op=_ops.ReduceOp.SUM,
                                                 process_set=self._set)], [],
                            wait_here=not hasattr(_C, "Backend"))

    def monitored_barrier(self, opts=None, wait_all_ranks=False):
        """Gloo's monitored barrier (monitored.py): rank 0 names the ranks that do not come
        within the timeout (opts: torch 2's BarrierOptions, torch 1.13's timedelta)."""
        number = _monitored.sequence(self._store, self._rank, self._monitored)
        self._monitored = number + 1
        _monitored.run(self._store, self._rank, self._size, number,
                       opts if opts is not None else timedelta(minutes=30), wait_all_ranks,
                       BackendError)

    def health(self):
        """None while the group can run operations; else the error that broke it (torch's
        backend error naming the ranks): an operation's, or what the group's liveness found
        between operations (a peer's closed connection, missed heartbeats, a peer's abort)."""
        if self._finisher.failed is not None:
            return self._finisher.failed
        if self._set == _ops.WORLD:
            return None
        try:
            _ddp.group_check(self._set)
        except _ddp.DDPError as e:
            return _error(e)
        return None

    def abort(self, reason):
        """Fails the group's pending and later operations here, tells its peers `reason` (their
        operations fail naming this rank, at once), and leaves the group (a group of its own; the
        default group's job is the process's, left by ddp.shutdown())."""
        if self._set != _ops.WORLD:
            _ddp.group_abort(self._set, reason)
        self.shutdown()

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
    setattr(Operations, _name, _operation(getattr(Operations, _name), _title, _inputs_of))
# torch 2's names for the same operations.
for _alias, _name in (("all_gather_single", "_allgather_base"),
                      ("reduce_scatter_single", "_reduce_scatter_base"),
                      ("all_to_all_single", "alltoall_base"),
                      ("allgather_into_tensor_coalesced", "all_gather_single_coalesced"),
                      ("reduce_scatter_tensor_coalesced", "reduce_scatter_single_coalesced")):
    setattr(Operations, _alias, getattr(Operations, _name))
