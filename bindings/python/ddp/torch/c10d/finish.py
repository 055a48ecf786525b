# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""How the torch.distributed backend finishes its operations: a finisher thread per stream of
operations that must complete in issue order (a process group's collectives; one direction and
tag of its sends and recvs), and completer threads that complete their futures.

Threads that go idle go away: a finisher of sends and recvs after IDLE_SECONDS without work (a
script that uses a new tag per step would otherwise leave two threads per tag behind), and every
completer but one. A finisher is reserved before its operation is submitted, under its owner's
lock, so that it never retires between the two."""
from __future__ import annotations

import queue
import threading

import torch
from torch.futures import Future

from ... import _ddp
from .. import _shutdown
from . import profile as _profile

IDLE_SECONDS = 10.0


# torch 2's Work.wait() raises the operation's error; torch 1.13's cannot (work._work).
_WAIT_RAISES = hasattr(torch._C._distributed_c10d, "Backend")  # noqa: SLF001 - torch's own


def breaks_the_job(error: BaseException, wait_raises: bool = _WAIT_RAISES) -> bool:
    """Whether an operation's failure fails every later one of its stream too: libddp's errors
    (a rank died, stalled or disagreed), not those of this rank's own part alone (a copy into the
    caller's tensors, a wait that timed out here with nothing sent: `local = True`), which fail
    their own operation. On torch 1.13 (`wait_raises` False) every failure does: its Work.wait()
    cannot raise, and the next operation is where the script hears of it."""
    if not wait_raises:
        return True
    return isinstance(error, _ddp.DDPError) and not getattr(error, "local", False)


class Completers:
    """Threads that complete futures. Completing a future runs its callbacks on the completing
    thread, and a callback may wait for a later operation of the same group (PowerSGD's hook
    does): so a completion never runs on the thread that finishes operations, and whenever no
    completer is idle another one starts. Beyond one, a completer idle for IDLE_SECONDS ends."""

    def __init__(self, group_name):
        self._name = group_name
        self._queue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._count = 0

    def complete(self, fut, result, error):
        with self._lock:
            if self._idle == 0:
                self._count += 1
                threading.Thread(target=self._run, daemon=True,
                                 name=f"ddp-c10d-{self._name}-done{self._count}").start()
            else:
                self._idle -= 1
        self._queue.put((fut, result, error))

    def _run(self):
        while True:
            try:
                fut, result, error = self._queue.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._idle > 1:  # others are idle too: this one goes
                        self._idle -= 1
                        return
                continue
            with _shutdown.torch_call():
                if error is not None:
                    fut.set_exception(error)
                else:
                    fut.set_result(result)
            with self._lock:
                self._idle += 1


class Finisher(threading.Thread):
    """Finishes a stream of operations in issue order: waits for each (without the GIL), runs its
    completion (copies into the caller's tensors), then hands its future to the completers.
    `error_of(exception)`: the error its future gets. `retire` (optional): called with the
    finisher after IDLE_SECONDS without work; True ends the thread (its owner has forgotten it).
    `owner_lock`: the lock under which its owner reserves it and retires it."""

    def __init__(self, name, error_of, completers=None, retire=None, owner_lock=None):
        super().__init__(name=f"ddp-c10d-{name}", daemon=True)
        self._queue = queue.SimpleQueue()
        self._completers = completers or Completers(name)
        self._error_of = error_of
        self._retire = retire
        self._owner_lock = owner_lock
        self.reserved = 0  # handed out for an operation not yet submitted (its owner's lock)
        self.failed = None  # the first error that broke the job: every later operation raises it

    def submit(self, wait, result, event=None):
        """`wait()` blocks until the operation is done; the future gets `result` (or the error).
        The operation's profiler event (or None) ends when it does, before its future completes.
        A finisher with an owner's lock was reserved for the operation: the reservation ends."""
        fut = Future()
        if self._owner_lock is None:
            self._queue.put((wait, result, fut, event))
            return fut
        with self._owner_lock:
            self.reserved -= 1
            self._queue.put((wait, result, fut, event))
        return fut

    def idle(self):
        """Nothing queued (for `retire`, under the owner's lock)."""
        return self._queue.empty()

    def run(self):
        while True:
            try:
                item = self._queue.get(timeout=IDLE_SECONDS if self._retire else None)
            except queue.Empty:
                if self._retire(self):
                    return
                continue
            if item is None:
                return
            self._finish(*item)

    def _finish(self, wait, result, fut, event):
        try:
            wait()
        except BaseException as e:  # noqa: BLE001 - every failure reaches the future
            with _shutdown.torch_call():
                _profile.end(event)
            error = self._error_of(e)
            if self.failed is None and breaks_the_job(e):
                self.failed = error
            self._completers.complete(fut, None, error)
            return
        with _shutdown.torch_call():
            _profile.end(event)
        self._completers.complete(fut, result, None)

    def stop(self):
        self._queue.put(None)

    def new_stream(self, name, retire=None, owner_lock=None):
        """A finisher of another stream of the same group, sharing this one's completers."""
        finisher = Finisher(name, self._error_of, self._completers, retire, owner_lock)
        finisher.start()
        return finisher
