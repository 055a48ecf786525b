# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Elastic training: a job that goes on when workers fail, leave or join, with Horovod's API.

    ddprun -np 2 --min-np 2 --max-np 4 --host-discovery-script ./hosts.sh python train.py

    import ddp.torch as hvd
    hvd.init()
    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()      # a point to come back to, and where added hosts come in

    train(state)

How it works. In elastic mode (ddprun --min-np/--max-np/--host-discovery-script) ddprun is the
job's driver: it starts a worker on every slot it has, up to --max-np, and forms the job in
*generations*: a generation is a set of workers with their ranks, and a fresh rendezvous store
for them to meet at. `init()` of a worker in elastic mode asks the driver for the newest
generation that has it (this module: `join`), then joins that job as usual. When a worker fails,
the others get a DDPError (as ever, naming it); `run` catches it, puts the state back to the last
`commit()`, leaves the job and joins the next generation, which the driver formed without the
failed worker, then brings every worker's state to rank 0's (`sync`) and calls the function
again. When hosts are added, the driver starts workers there and forms a generation with them;
the running workers learn of it at their next `commit()` (or `check_host_updates()`): all of them
raise HostsUpdatedInterrupt there, together, and join it without losing any work.

A failure is libddp's DDPError, or any error raised while the job is broken (torch.distributed's
backend error, a DDP reducer's: ddp.torch.elastic re-forms torch's default group on `ddp` too);
each worker reports the ranks it blames to the driver, which stops a blamed worker whose process
lives on (a host cut off) instead of waiting for its exit. With ddprun's --max-restarts a failed
worker is replaced, and its replacement joins at a commit, as an added host's workers do.

Outside elastic mode (a plain launch) `run` gives one try: a DDPError is raised as it comes, as
there is no driver to form another job.
"""
from __future__ import annotations

import copy
import functools
import sys

from . import _ddp, _generations, _job, _ops
from ._ddp import DDPError, DDPValueError
from ._generations import enabled, generation
from ._objects import broadcast_object


class HostsUpdatedInterrupt(RuntimeError):
    """Raised on every rank at once by State.commit() / check_host_updates() when the driver has
    formed a new generation with more workers: `run` then joins it, without restoring state
    (nothing failed). `skip_sync`: the new generation has no new worker to bring up to date."""

    def __init__(self, skip_sync: bool = False):
        super().__init__("the elastic job's hosts changed: joining its new generation")
        self.skip_sync = skip_sync


class State:
    """What a training loop must keep across a reset: saved at each commit(), put back after a
    failure (restore), brought to rank 0's on every worker when a generation starts (sync).
    Subclasses define save, restore and sync; `bcast_object(obj)` broadcasts from rank 0,
    `get_rank()` is this worker's rank."""

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions called (no arguments) after every reset, e.g. to scale the learning rate
        to the new size()."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """Horovod's notification hook; ddprun's driver is asked at commit() instead."""

    def commit(self):
        """Saves the state (what a failure comes back to), then checks for added hosts: raises
        HostsUpdatedInterrupt on every rank when the driver has formed a larger generation."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt, on every rank together, when the driver has a new
        generation for the running workers: rank 0 asks, and tells the others (a broadcast)."""
        if not enabled():
            return  # a plain launch: no driver, no new generations (every rank knows it)
        news = None
        if self._rank() == 0:
            news = _generations.member().pending()
        news = self._bcast_object(news)
        if news is not None:
            counter, skip_sync = news
            if counter > _generations.member().updates:
                _generations.member().updates = counter
                raise HostsUpdatedInterrupt(skip_sync)

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError

    def reset(self):
        """Called after a reset, before the callbacks."""


class ObjectState(State):
    """State of plain Python values, given as keyword arguments and kept as attributes:
    `state = ObjectState(bcast_object, get_rank, epoch=0, batch=0)`, then `state.epoch`.
    Saved as deep copies (a list changed in place after commit() does not change what restore()
    puts back; Horovod keeps references)."""

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._saved_state = copy.deepcopy(kwargs)
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {name: copy.deepcopy(getattr(self, name))
                             for name in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, copy.deepcopy(value))


def run_fn(func, reset):
    """Horovod's run_fn: `func(state, ...)` run until it returns, through failures of the job
    (job_broke: restore, reset, sync) and added hosts (HostsUpdatedInterrupt: reset, sync unless
    skipped). A bad argument (DDPValueError), and any error while the job is sound, is the
    program's, raised as it comes."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            except DDPValueError:
                raise
            except Exception as e:
                if not enabled() or not job_broke(e):
                    raise  # a plain launch (no driver forms another job), or the program's own
                _say_failure(e)
                _generations.member().report(_blamed(e))
                state.restore()
                skip_sync = False
            _reset_until_formed(reset)
            state.on_reset()

    return wrapper


def job_broke(error: BaseException) -> bool:
    """Whether ERROR is the failure of libddp's job (what `run` recovers from): libddp's own
    DDPError, or any error (torch.distributed's backend error, a DDP reducer's) raised while the
    job is broken: a peer lost, stalled or aborted, as the job's liveness found."""
    if isinstance(error, DDPError):
        return not isinstance(error, DDPValueError)
    return _job_unsound()


def _blamed(error: BaseException) -> list[int]:
    """The ranks ERROR names as its cause: its own (`DDPError.ranks`, torch's backend error's),
    else those of the error that broke the job."""
    ranks = list(getattr(error, "ranks", None) or [])
    broke = None if ranks else _job_error()
    return ranks or list(getattr(broke, "ranks", None) or [])


def _job_error() -> DDPError | None:
    """The error that broke this process's job, as its liveness found it; None while it is
    sound (or there is none)."""
    if not _ddp.is_initialized():
        return None
    try:
        _ddp.group_check(_ops.WORLD)
    except DDPError as e:
        return e
    return None


def _job_unsound() -> bool:
    """Whether this process is in a job that its liveness found broken."""
    return _job_error() is not None


def _say_failure(error: BaseException, during: str = "") -> None:
    """One line on stderr: what failed, and that the job goes back to its last commit."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    rank = _ddp.rank() if _ddp.is_initialized() else "?"
    print(f"ddp elastic: rank {rank} of generation {generation()}: the job failed{during} "
          f"({first}); back to the last commit, re-forming without the lost workers",
          file=sys.stderr, flush=True)


def _reset_until_formed(reset) -> None:
    """RESET, again while it fails in a generation it joined that broke (a worker lost as the
    default group is made on it: the driver forms one more without it). A generation that never
    came, or the job's end, is raised (join's errors come before init: no job to be unsound)."""
    while True:
        try:
            reset()
            return
        except DDPValueError:
            raise
        except Exception as e:
            if not _job_unsound():
                raise
            _say_failure(e, " while re-forming")


def reset_job():
    """Leaves this generation and joins the next, the compressed tensors' residuals carried
    over (what the last encodings lost is still sent: docs/compression.md)."""
    _ddp.carry_compression_residuals()
    _job.shutdown()
    _job.init()


def run(func):
    """Decorates `func(state, ...)` to run elastically (see the module's text)."""
    return run_fn(func, reset_job)


def _broadcast_object(obj):
    return broadcast_object(obj, root_rank=0)


class NumpyState(ObjectState):
    """ObjectState for `import ddp` (numpy) programs: broadcasts with ddp.broadcast_object."""

    def __init__(self, **kwargs):
        super().__init__(bcast_object=_broadcast_object, get_rank=_ddp.rank, **kwargs)


__all__ = ["HostsUpdatedInterrupt", "State", "ObjectState", "NumpyState", "run", "run_fn",
           "enabled", "generation"]
