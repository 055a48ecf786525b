# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The torch.distributed backend's groups: libddp jobs of their own among some processes.

Every process group after the default one (new_group) is one: a libddp Context among the group's
members alone, with its own rendezvous (through the store torch hands the group), connections and
engine, as Gloo gives each group its own connections. Its id goes wherever a process set id goes
(_ddp.group_init; the bindings route it to the group's context).

send and recv ride on the same thing: the first transfer between two ranks of a group makes a
group of the pair (through that group's store, so both ends make the same one), and a transfer
is a broadcast from the sender within it, named by sender, receiver, tag and sequence. So a
recv is matched with the send of the same tag in order, whatever the order of other tags; each
direction and tag completes in order on a finisher of its own, which goes once idle (finish.py).

A recv from any source (torch 1.13: its dist.recv asks the backend's own Work for the sender)
finds its send through the group's store: each send there counts itself under (receiver, tag,
sender); the receiver looks for a sender whose count is ahead of the sends of that tag it has
taken, takes that one, and it is an ordinary transfer from then on.
"""
from __future__ import annotations

import contextlib
import inspect
import os
import threading
import time
from collections import Counter
from datetime import timedelta

import torch.distributed as dist

import torch

from ... import _ddp, _ops, _rendezvous
from .. import _shutdown
from .. import functions as _f

# What would make a group's libddp job take the launcher's place in the whole job for its own:
# a group reads its rank, size, rendezvous and token from its overrides alone, and finds its
# hosts itself (the "unsets" rows of libddp/src/rank_environment.tsv's "torch group" column).
# DDP_FLIGHT_RECORDER_DUMP too: the files it names are the job's ranks', not a group's.
_LAUNCHER_PREFIXES = ("OMPI_COMM_WORLD_", "PMI_", "PMIX_", "SLURM_", "TORCHELASTIC_")
_LAUNCHER_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                   "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "MPI_LOCALRANKID",
                   "MPI_LOCALNRANKS", "DDP_LOCAL_RANK", "DDP_LOCAL_SIZE", "DDP_CROSS_RANK",
                   "DDP_CROSS_SIZE", "DDP_BOOTSTRAP", "DDP_FLIGHT_RECORDER_DUMP")

# Each group's store server, on the group's rank 0: closed with the group.
_stores = {}


def launcher_unset() -> dict:
    """Overrides that unset the launcher's variables: where torch has named the rank and size
    (init_process_group's, a group's), they are the job's, whatever the launcher's say (a
    WORLD_SIZE exported without RANK, a group of fewer ranks than the launch)."""
    return {name: "" for name in os.environ
            if name.startswith(_LAUNCHER_PREFIXES) or name in _LAUNCHER_NAMES}


def join_default(store, rank, size, timeout):
    """Joins libddp's job through torch's store, or checks that the one joined already is it."""
    if _ddp.is_initialized():
        if (_ddp.rank(), _ddp.size()) != (rank, size):
            raise ValueError(f"torch.distributed backend 'ddp': this process is rank "
                             f"{_ddp.rank()} of {_ddp.size()} in libddp's job (ddp.init()), but "
                             f"init_process_group says rank {rank} of {size}")
        return
    overrides = launcher_unset()  # torch named the rank and size
    overrides.update(_rendezvous.through_store(store, rank, size, timeout))
    _ddp.init(overrides)


def make(store, rank, size, timeout):
    """A libddp job among a group's members, through the group's store; returns its id."""
    overrides = launcher_unset()
    if os.environ.get("DDP_TRANSPORT", "").strip().lower() == "mpi":
        overrides["DDP_TRANSPORT"] = ""  # MPI's transport spans the whole job, not a group
    servers = []  # the group's store, when this is the group's rank 0
    overrides.update(_rendezvous.through_store(store, rank, size, timeout, keep=servers))
    try:
        group = _ddp.group_init(overrides)
    except BaseException:
        for server in servers:
            server.close()
        raise
    _ops.add_group(group, rank, size)
    _stores[group] = servers
    return group


def torch_identity(size):
    """The group torch is making, as torch names it: (name, description, its members' global
    ranks), read from the locals of torch's _new_process_group_helper, which calls the backend's
    creator (the same on torch 1.13 and 2); None where that helper is not on the stack."""
    frame = inspect.currentframe()
    try:
        while frame is not None and frame.f_code.co_name != "_new_process_group_helper":
            frame = frame.f_back
        if frame is None:
            return None
        found = frame.f_locals
        name = str(found.get("group_name") or "")
        if not name:
            return None
        ranks = [int(r) for r in found.get("global_ranks_in_group") or range(size)]
        desc = found.get("group_desc") or ("default_pg" if name == "0" else "undefined")
        return name, str(desc), ranks
    finally:
        del frame


# torch's group names -> the libddp process set (or group) each runs on: what the comm hooks
# (ddp/torch/hooks.py) submit to for a DDP model on that group.
BY_TORCH_NAME: dict[str, int] = {}


def name_for_flight_records(group, size):
    """Names the group's libddp job in flight records as torch's process group, so that a dump
    (ddp.torch.dump_flight_recorder, ddprun dump, the one at a failure) has every group of the
    process with torch's names and global ranks (docs/observability.md); and notes which libddp
    set torch's group runs on (BY_TORCH_NAME)."""
    identity = torch_identity(size)
    if identity is not None:
        _ddp.name_group(group, *identity)
        BY_TORCH_NAME[identity[0]] = group


def callers_stream(tensor):
    """A context that puts the calling thread's current CUDA stream (where `tensor` is CUDA) on
    the thread that enters it: an operation started later on a finisher thread (which would
    otherwise submit on the default stream) stays ordered after the kernels that made its
    data, as when the caller submits it."""
    if not (isinstance(tensor, torch.Tensor) and tensor.is_cuda):
        return contextlib.nullcontext
    stream = torch.cuda.current_stream(tensor.device)
    return lambda: torch.cuda.stream(stream)


def close(group):
    """Leaves a group made by make() (its pending operations fail)."""
    _ops.remove_group(group)
    _ddp.group_shutdown(group)
    for server in _stores.pop(group, []):
        server.close()


class PointToPoint:
    """send and recv of one process group: a pair group per peer, made at the first transfer
    between the two (each end makes it on its own first send or recv to the other)."""

    def __init__(self, store, rank, timeout, group_finisher):
        self._store, self._rank, self._timeout = store, rank, timeout
        self._group_finisher = group_finisher  # finish.Finisher: new streams share its completers
        self._pairs = {}  # peer: _Pair
        self._finishers = {}  # (sender, receiver, tag): finisher
        self._sequence = Counter()  # (sender, receiver, tag): transfers so far
        self._lock = threading.Lock()
        self._any_next = 0  # where the next recv from any source starts looking (fairness)
        self._any_finisher = None
        self._closed = False

    def _pair(self, peer):
        """The pair's group, made by the first transfer that needs it. Each peer's is made under
        a lock of its own, never the object's: a rank may be making pairs with two peers at
        once, each waiting for its peer to join (a ring's first isend and irecv)."""
        with self._lock:
            if self._closed:  # a transfer queued when the group ended: no group made for it
                raise _ddp.DDPError("torch.distributed backend 'ddp': the process group was "
                                    "destroyed before this send or recv started")
            entry = self._pairs.setdefault(peer, _Pair())
        with entry.lock:
            if entry.group is None:
                low, high = sorted((self._rank, peer))
                store = dist.PrefixStore(f"ddp-p2p/{low}-{high}/", self._store)
                group = make(store, 0 if self._rank == low else 1, 2, self._timeout)
                with self._lock:
                    closed = self._closed
                    if not closed:
                        entry.group = group
                if closed:  # close() ran meanwhile and did not see it
                    close(group)
                    raise _ddp.DDPError("torch.distributed backend 'ddp': the process group was "
                                        "destroyed while this send or recv started")
            return entry.group

    def _finisher(self, sender, receiver, tag):
        """The finisher of one direction and tag between two ranks: their transfers complete in
        order (as MPI's do), and apart from other tags' and the other direction's, which may
        wait on them (a send completes once its recv is posted)."""
        key = (sender, receiver, tag)
        with self._lock:
            finisher = self._finishers.get(key)
            if finisher is None:
                finisher = self._group_finisher.new_stream(
                    f"p2p{sender}>{receiver}.{tag}", lambda f: self._retire(key, f), self._lock)
                self._finishers[key] = finisher
            finisher.reserved += 1  # until its operation is submitted (Finisher.submit)
            return finisher

    def _retire(self, key, finisher):
        """A transfer finisher idle for a while goes, unless reserved (its transfer is on the way
        to it) or given work meanwhile; the next transfer of its key makes a new one."""
        with self._lock:
            if finisher.reserved or not finisher.idle() or self._finishers.get(key) is not finisher:
                return False
            del self._finishers[key]
            return True

    def transfer(self, tensor, sender, receiver, tag, what, sequence=None, announce=False,
                 finisher=True):
        """Starts moving `tensor` from sender to receiver (one of them this rank); returns the
        engine's handle and the finisher that completes that direction and tag's transfers in
        order, reserved for it (None with `finisher` False: the caller finishes it elsewhere).
        `sequence`: the transfer's number when claim_any took it already. `announce`
        (a send, torch 1.13): counted first where a recv from any source looks for it, since
        the receiver of such a recv makes the pair's group, which this waits for, only then."""
        if not tensor.is_contiguous():
            raise ValueError(f"torch.distributed backend 'ddp': {what} needs a contiguous tensor")
        peer = receiver if sender == self._rank else sender
        if peer == self._rank:
            raise ValueError(f"torch.distributed backend 'ddp': {what} to or from this rank "
                             f"itself ({peer})")
        if announce:
            self._store.add(_any_key(receiver, tag, sender), 1)
        if sequence is None:
            with self._lock:
                key = (sender, receiver, tag)
                sequence = self._sequence[key]
                self._sequence[key] += 1
        name = f"p2p.{sender}>{receiver}.tag{tag}.{sequence}"
        root = 0 if sender < receiver else 1

        on_callers_stream = callers_stream(tensor)

        def start(group):
            with on_callers_stream():
                return _f.broadcast_async_(tensor, root, name=name, process_set=group)

        def start_deferred():
            with _shutdown.torch_call():  # store calls and the group's rendezvous, on a finisher
                return start(self._pair(peer))
        with self._lock:
            entry = self._pairs.get(peer)
            group = entry.group if entry is not None else None
        # The pair's first transfer makes its group where it is waited for (on its finisher):
        # making it here would wait for the peer to make it too, and ranks whose first transfers
        # form a cycle (each isend to the next rank, then irecv from the previous) would each
        # wait for the next one.
        handle = start(group) if group is not None else _Deferred(start_deferred)
        return handle, (self._finisher(sender, receiver, tag) if finisher else None)

    def any_finisher(self):
        """The finisher of this group's recvs from any source (in their issue order, apart from
        every other operation: one may wait long for its sender)."""
        with self._lock:
            if self._any_finisher is None:
                self._any_finisher = self._group_finisher.new_stream(f"p2p-any-{self._rank}")
            return self._any_finisher

    def claim_any(self, size, tag, timeout_error):
        """Waits, within the group's timeout, for a send of `tag` to this rank that no recv has
        taken yet, from any rank of the group (of `size`); takes it. Returns (sender, sequence)
        for transfer(). `timeout_error(message)`: the exception when none comes."""
        me = self._rank
        others = [r for r in range(size) if r != me]
        if not others:
            raise ValueError("torch.distributed backend 'ddp': recv from any source in a group "
                             "of one rank: nobody can send to it")
        seconds = (self._timeout or _TORCH_DEFAULT_TIMEOUT).total_seconds()
        deadline, pause = time.monotonic() + seconds, 0.0005
        while True:
            for i in range(len(others)):
                sender = others[(self._any_next + i) % len(others)]
                sent = self._store.add(_any_key(me, tag, sender), 0)
                with self._lock:
                    key = (sender, me, tag)
                    if sent > self._sequence[key]:
                        sequence = self._sequence[key]
                        self._sequence[key] += 1
                        self._any_next = (others.index(sender) + 1) % len(others)
                        return sender, sequence
            if time.monotonic() > deadline:
                raise timeout_error(f"recv from any source (tag {tag}): no rank of the group sent "
                                    f"to rank {me} within {seconds:g} s")
            time.sleep(pause)
            pause = min(2 * pause, 0.02)

    def close(self):
        with self._lock:
            self._closed = True
            pairs = [entry.group for entry in self._pairs.values() if entry.group is not None]
            self._pairs = {}
            finishers, self._finishers = list(self._finishers.values()), {}
            if self._any_finisher is not None:
                finishers.append(self._any_finisher)
                self._any_finisher = None
        for finisher in finishers:
            finisher.stop()
        for group in pairs:
            close(group)


_TORCH_DEFAULT_TIMEOUT = timedelta(minutes=30)


class _Pair:
    """A peer's pair group (its id once made) and the lock its making holds."""

    __slots__ = ("lock", "group")

    def __init__(self):
        self.lock = threading.Lock()
        self.group = None


class _Deferred:
    """A transfer whose engine operation starts when it is waited for (`start()` returns the
    engine's handle): a pair's first, whose group is made on the finisher's thread."""

    __slots__ = ("_start",)

    def __init__(self, start):
        self._start = start

    def wait(self, timeout=None):
        return self._start().wait(timeout)


def _any_key(receiver, tag, sender):
    return f"ddp-any/{receiver}/{tag}/{sender}"
