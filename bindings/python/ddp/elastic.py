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

Outside elastic mode (a plain launch) `run` gives one try: a DDPError is raised as it comes, as
there is no driver to form another job.
"""
from __future__ import annotations

import copy
import functools
import json
import os
import sys
import time

from . import _ddp, _ops
from ._ddp import DDPError, DDPValueError

# What a worker of an elastic job gets from ddprun (besides DDP_RENDEZVOUS_ADDR, DDP_JOB_TOKEN
# and DDP_HOSTNAME): its identity and the driver's store.
_ID, _PORT, _TIMEOUT = "DDP_ELASTIC_ID", "DDP_ELASTIC_PORT", "DDP_ELASTIC_TIMEOUT"


def enabled() -> bool:
    """Whether this process is a worker of an elastic job (started by ddprun in elastic mode)."""
    return os.environ.get("DDP_ELASTIC") == "1"


class HostsUpdatedInterrupt(RuntimeError):
    """Raised on every rank at once by State.commit() / check_host_updates() when the driver has
    formed a new generation with more workers: `run` then joins it, without restoring state
    (nothing failed). `skip_sync`: the new generation has no new worker to bring up to date."""

    def __init__(self, skip_sync: bool = False):
        super().__init__("the elastic job's hosts changed: joining its new generation")
        self.skip_sync = skip_sync


class _Membership:
    """This worker's place in the elastic job: which generation it is in, through the driver's
    store. Keys there: elastic/latest (the newest generation), elastic/generation/G (its plan:
    the ranks by worker, the hosts by rank, the port of its store, the update counter at its
    forming, or the error that ends the job), elastic/updates (bumped on a new generation that the
    running workers are to join at their next commit)."""

    def __init__(self):
        self.id = os.environ.get(_ID, "")
        self.generation = -1  # the generation this worker is in (or last was)
        self.member = False  # it was in some generation
        self.updates = 0
        self._client = None

    def timeout(self) -> float:
        try:
            return max(1.0, float(os.environ.get(_TIMEOUT, "600")))
        except ValueError:
            return 600.0

    def client(self):
        if self._client is None:
            self._client = _ddp.StoreClient(os.environ.get("DDP_RENDEZVOUS_ADDR", "127.0.0.1"),
                                            int(os.environ[_PORT]),
                                            os.environ.get("DDP_JOB_TOKEN", ""), 30.0)
        return self._client

    def _plan(self, generation: int, timeout: float) -> dict:
        return json.loads(self.client().get(f"elastic/generation/{generation}", timeout))

    def join(self, cause: str = "") -> None:
        """Waits for the next generation that has this worker and sets this process's DDP_*
        variables to its place there (init() then joins it). CAUSE: why the last try failed,
        said if no generation comes."""
        deadline = time.monotonic() + self.timeout()
        want = self.generation + 1
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _ops.error(
                    f"ddp elastic: no new generation of the job came within "
                    f"{self.timeout():g} s (DDP_ELASTIC_TIMEOUT) for worker {self.id}"
                    + (f"; the last one failed: {cause}" if cause else ""), "DEADLINE_EXCEEDED")
            try:
                self._plan(want, left)  # waits until generation `want` has been formed
            except DDPError as e:
                if getattr(e, "code", "") == "DEADLINE_EXCEEDED":
                    continue  # said above, with the cause
                raise
            latest = int(self.client().get("elastic/latest", 30.0))
            generation = max(want, latest)
            plan = self._plan(generation, 30.0)
            if plan.get("finished"):
                # Training ended (a worker returned) before this worker's generation formed:
                # it has nothing to do.
                print(f"ddp elastic: worker {self.id}: the job finished before it could join; "
                      "leaving", file=sys.stderr, flush=True)
                raise SystemExit(0)
            if plan.get("error"):
                raise _ops.error(f"ddp elastic: the job ended: {plan['error']}", "ABORTED")
            if self.id in plan["ranks"]:
                break
            if self.member:
                raise _ops.error(f"ddp elastic: worker {self.id} is not in generation "
                                 f"{generation} of the job (the driver stopped it or its host)",
                                 "ABORTED")
            want = generation + 1  # started for a later generation than this one
        rank, hosts = plan["ranks"][self.id], plan["hosts"]
        host = hosts[rank]
        order = list(dict.fromkeys(hosts))
        local = [r for r, h in enumerate(hosts) if h == host]
        place = {"DDP_RANK": rank, "DDP_SIZE": len(hosts), "DDP_RENDEZVOUS_PORT": plan["port"],
                 "DDP_LOCAL_RANK": local.index(rank), "DDP_LOCAL_SIZE": len(local),
                 "DDP_CROSS_RANK": order.index(host), "DDP_CROSS_SIZE": len(order)}
        for name, value in place.items():
            os.environ[name] = str(value)
            os.environ["HOROVOD_" + name[4:]] = str(value)
        os.environ.pop("HOROVOD_RENDEZVOUS_PORT", None)
        # torchrun's names too, as ddprun sets them: libddp requires them to agree with DDP_*,
        # and scripts that read them see this generation's place.
        for name, value in (("RANK", rank), ("WORLD_SIZE", len(hosts)),
                            ("LOCAL_RANK", local.index(rank)), ("LOCAL_WORLD_SIZE", len(local)),
                            ("GROUP_RANK", order.index(host)), ("GROUP_WORLD_SIZE", len(order))):
            os.environ[name] = str(value)
        self.generation, self.member, self.updates = generation, True, int(plan["updates"])

    def pending(self):
        """(the driver's update counter, whether only workers left) when it formed a generation
        newer than this one for the running workers to join; else None."""
        counter = self.client().add("elastic/updates", 0)
        if counter <= self.updates:
            return None
        return counter, False


_membership: _Membership | None = None


def _member() -> _Membership:
    global _membership
    if _membership is None:
        _membership = _Membership()
    return _membership


def join_and_init() -> None:
    """init() of an elastic worker: joins the newest generation that has it. A generation whose
    start fails (one of its workers died as it formed) is left for the next one, which the driver
    forms once it sees the death."""
    member = _member()
    cause = ""
    while True:
        member.join(cause)
        try:
            _ddp.init()
            return
        except DDPValueError:
            raise
        except DDPError as e:
            cause = str(e)
            _ddp.shutdown()


def generation() -> int:
    """The generation of the elastic job this worker is in (-1 outside elastic mode)."""
    return _member().generation if enabled() else -1


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
            news = _member().pending()
        news = self._bcast_object(news)
        if news is not None:
            counter, skip_sync = news
            if counter > _member().updates:
                _member().updates = counter
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
    """Horovod's run_fn: `func(state, ...)` run until it returns, through failures (DDPError:
    restore, reset, sync) and added hosts (HostsUpdatedInterrupt: reset, sync unless skipped).
    A bad argument (DDPValueError) is the program's error, raised as it comes."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except DDPValueError:
                raise
            except DDPError:
                if not enabled():
                    raise  # a plain launch: no driver forms another job
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            reset()
            state.on_reset()

    return wrapper


def _reset():
    from . import init, shutdown

    shutdown()
    init()


def run(func):
    """Decorates `func(state, ...)` to run elastically (see the module's text)."""
    return run_fn(func, _reset)


def _broadcast_object(obj):
    from . import broadcast_object

    return broadcast_object(obj, root_rank=0)


class NumpyState(ObjectState):
    """ObjectState for `import ddp` (numpy) programs: broadcasts with ddp.broadcast_object."""

    def __init__(self, **kwargs):
        super().__init__(bcast_object=_broadcast_object, get_rank=_ddp.rank, **kwargs)


__all__ = ["HostsUpdatedInterrupt", "State", "ObjectState", "NumpyState", "run", "run_fn",
           "enabled", "generation"]
