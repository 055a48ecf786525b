# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""What the torch.distributed backend "ddp" hands torch for each operation (operations.py): its
Work, and the errors that Work raises, torch's backend error carrying who is to blame as data.
torch 2's C++ Backend (bindings/torch_native/backend.cc) wraps these Works in its own; torch 1.13
takes the future-wrapping Work torch makes."""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from ... import _ddp

_C = torch._C._distributed_c10d  # noqa: SLF001 - torch's own

if hasattr(dist, "DistBackendError"):
    class BackendError(dist.DistBackendError, _ddp.DDPError):
        """A broken job under the 'ddp' backend: torch's DistBackendError and libddp's DDPError in
        one (`except dist.DistBackendError` and `except ddp.DDPError` both catch it), with the
        blamed ranks and tensor as data (.ranks, .tensor) and the status code's name (.code)."""
else:  # torch 1.13 has no backend error type: DDPError, a RuntimeError as torch's errors are
    BackendError = _ddp.DDPError


_TIMED_OUT = "torch.distributed backend 'ddp': Timed out waiting on other ranks: "


def _error(e: BaseException, bad_input_stays: bool = False) -> BaseException:
    """torch's backend error for a libddp failure, carrying who is to blame as data. A call's bad
    input (DDPValueError, a ValueError, raised before anything is sent) stays what it is with
    `bad_input_stays`; ranks that disagree, found once the operation runs, break the job. A
    timeout says so first, in torch's words ("Timed out", as Gloo's and NCCL's do)."""
    if not isinstance(e, _ddp.DDPError) or (
            bad_input_stays and isinstance(e, _ddp.DDPValueError)):
        return e
    timed_out = getattr(e, "code", "") == "DEADLINE_EXCEEDED" and _TIMED_OUT not in str(e)
    if isinstance(e, BackendError) and not timed_out:
        return e
    wrapped = BackendError(f"{_TIMED_OUT}{e}" if timed_out else str(e))
    wrapped.ranks = list(getattr(e, "ranks", []) or [])
    wrapped.tensor = getattr(e, "tensor", "")
    wrapped.code = getattr(e, "code", "")
    return wrapped


def _tensors(value):
    """The tensors of an operation's result, in order (allgather's lists of lists flattened)."""
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for item in (value or []) for t in _tensors(item)]


def _wait_for(future, timeout=None):
    """Waits for an operation's future, at most `timeout` (a timedelta; None or 0: no limit);
    raises the operation's error, or torch's backend error once the timeout has passed."""
    seconds = timeout.total_seconds() if timeout is not None else 0
    if seconds > 0:
        deadline = time.monotonic() + seconds
        while not future.done():
            if time.monotonic() > deadline:
                raise BackendError(f"{_TIMED_OUT}the operation did not finish within "
                                   f"{seconds:g} s (wait(timeout))")
            time.sleep(0.001)
    future.wait()  # raises the operation's error
    return True


class _Work(_C.Work):
    """A Work over the operation's future whose wait() raises its error (torch's own
    future-wrapping Work returns True whatever happened): torch 2's, and on both lines a recv
    from any source's (below). `chained`: torch's C++ reads the future that get_future() gives
    (a Backend of Python's, without the C++ part), and would take the exception that a Python
    future keeps as its value for a result: it gets the future read through a callback instead,
    which fails (as torch 1.13's, _work below). The C++ part reads the operation's own future
    and turns that value into torch's backend error itself (completion.cc)."""

    def __init__(self, future, chained=False):
        super().__init__()
        self._future = future
        self._chained = future.then(_value_or_error) if chained else None

    def wait(self, timeout=None):
        return _wait_for(self._future, timeout)

    def get_future(self):
        return self._chained if self._chained is not None else self._future

    def result(self):
        """The operation's tensors (torch's Work.result()), lists of lists flattened."""
        return _tensors(self._future.wait())

    def is_completed(self):
        return self._future.done()

    def is_success(self):
        if not self._future.done():
            return False
        try:
            self._future.value()
        except Exception:  # noqa: BLE001 - failed
            return False
        return True


if hasattr(_C, "Backend"):
    def _work(future, chained=False):  # every future is chained here
        return _Work(future, chained)
else:
    def _work(future, chained=False):  # noqa: ARG001 - every future is chained here
        """torch 1.13: its future-wrapping Work (1.13 cannot call a Python Work from C++). Its
        wait() does not raise: a failed operation's error is raised by the group's next one, and
        by anything that reads the future (DDP's reducer does). The future it hands out is the
        operation's read through a callback: torch keeps a Python future's exception as its value
        and raises it only through the very object set_exception() was called on, so a future
        torch hands out again would give the exception as the result; the callback raises it, and
        the future it completes fails."""
        return _C._create_work_from_future(future.then(_value_or_error))  # noqa: SLF001 - torch's own


def _value_or_error(future):
    return future.value()  # raises the operation's error


class _EngineWork:
    """An operation that torch's C++ Backend completes from libddp's engine (backend.cc,
    completion.h): it reads `_engine_handles` and `_result` (the tensors, written in place), and
    calls `_finished_in_python()` where ddp._ddp's completion API does not serve the handles.
    wait() is for what goes wrong: it raises the operation's own error (BackendError with its
    ranks), and torch's timeout error."""

    __slots__ = ("_ops", "_engine_handles", "_result")

    def __init__(self, ops, handles, result):
        self._ops, self._engine_handles, self._result = ops, handles, result

    def _finished_in_python(self):
        return _work(self._ops._submit_future(self._engine_handles, self._result))  # noqa: SLF001 - the group's own (operations.py)

    def wait(self, timeout=None):
        seconds = timeout.total_seconds() if timeout is not None else 0
        deadline = time.monotonic() + seconds if seconds > 0 else None
        try:
            for h in self._engine_handles:
                h.wait(None if deadline is None else max(deadline - time.monotonic(), 0.0))
        except TimeoutError as e:
            raise BackendError(f"{_TIMED_OUT}{e}") from None
        except _ddp.DDPError as e:
            error = _error(e)
            if self._ops._finisher.failed is None:  # noqa: SLF001 - as the finisher's: later operations raise it
                self._ops._finisher.failed = error  # noqa: SLF001 - the group's own (operations.py)
            if error is e:
                raise
            raise error from e
        return True

    def result(self):
        return list(self._result)

    def _source_rank(self):
        raise RuntimeError("torch.distributed backend 'ddp': only a recv from any source names "
                           "its sender")


class _AnySourceWork(_Work):
    """A recv from any source: names the sender once done (torch 1.13's dist.recv and irecv hand
    it back as it is; on torch 2 the C++ Backend's Work asks it)."""

    def __init__(self, future, source):
        super().__init__(future)
        self._source = source

    def is_success(self):
        return bool(self._source)

    def _source_rank(self):
        if not self._source:
            raise RuntimeError("torch.distributed backend 'ddp': the sender of a recv from "
                               "any source is known once the recv has completed")
        return self._source[0]

    source_rank = _source_rank
