"""The torch.distributed backend's groups: libddp jobs of their own among some processes.

Every process group after the default one (new_group) is one: a libddp Context among the group's
members alone, with its own rendezvous (through the store torch hands the group), connections and
engine, as Gloo gives each group its own connections. Its id goes wherever a process set id goes
(_ddp.group_init; the bindings route it to the group's context).

send and recv ride on the same thing: the first transfer between two ranks of a group makes a
group of the pair (through that group's store, so both ends make the same one), and a transfer
is a broadcast from the sender within it, named by sender, receiver, tag and sequence. So a
recv is matched with the send of the same tag in order, whatever the order of other tags.
"""
from __future__ import annotations

import os
import threading
from collections import Counter

import torch.distributed as dist

from .. import _ddp, _launch, _ops
from . import functions as _f

# What would make a group's libddp job take the launcher's place in the whole job for its own:
# a group reads its rank, size, rendezvous and token from its overrides alone.
_LAUNCHER_PREFIXES = ("OMPI_COMM_WORLD_", "PMI_", "PMIX_", "SLURM_", "TORCHELASTIC_")
_LAUNCHER_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                   "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "MPI_LOCALRANKID",
                   "MPI_LOCALNRANKS", "DDP_LOCAL_RANK", "DDP_LOCAL_SIZE", "DDP_BOOTSTRAP")

# Each group's store server, on the group's rank 0: closed with the group.
_stores = {}


def launcher_unset() -> dict:
    """Overrides that unset the launcher's variables: where torch has named the rank and size
    (init_process_group's, a group's), they are the job's, whatever the launcher's say (a
    WORLD_SIZE exported without RANK, a group of fewer ranks than the launch)."""
    return {name: "" for name in os.environ
            if name.startswith(_LAUNCHER_PREFIXES) or name in _LAUNCHER_NAMES}


def make(store, rank, size, timeout):
    """A libddp job among a group's members, through the group's store; returns its id."""
    overrides = launcher_unset()
    if os.environ.get("DDP_TRANSPORT", "").strip().lower() == "mpi":
        overrides["DDP_TRANSPORT"] = ""  # MPI's transport spans the whole job, not a group
    servers = []  # the group's store, when this is the group's rank 0
    overrides.update(_launch.through_store(store, rank, size, timeout, keep=servers))
    try:
        group = _ddp.group_init(overrides)
    except BaseException:
        for server in servers:
            server.close()
        raise
    _ops.add_group(group, rank, size)
    _stores[group] = servers
    return group


def close(group):
    """Leaves a group made by make() (its pending operations fail)."""
    _ops.remove_group(group)
    _ddp.group_shutdown(group)
    for server in _stores.pop(group, []):
        server.close()


class PointToPoint:
    """send and recv of one process group: a pair group per peer, made at the first transfer
    between the two (each end makes it on its own first send or recv to the other)."""

    def __init__(self, store, rank, timeout, new_finisher):
        self._store, self._rank, self._timeout = store, rank, timeout
        self._new_finisher = new_finisher
        self._pairs = {}  # peer: (group id, finisher)
        self._sequence = Counter()  # (sender, receiver, tag): transfers so far
        self._lock = threading.Lock()

    def _pair(self, peer, what):
        if peer == self._rank:
            raise ValueError(f"torch.distributed backend 'ddp': {what} to or from this rank "
                             f"itself ({peer})")
        with self._lock:
            if peer not in self._pairs:
                low, high = sorted((self._rank, peer))
                store = dist.PrefixStore(f"ddp-p2p/{low}-{high}/", self._store)
                group = make(store, 0 if self._rank == low else 1, 2, self._timeout)
                finisher = self._new_finisher(f"p2p{low}-{high}")
                self._pairs[peer] = (group, finisher)
            return self._pairs[peer]

    def transfer(self, tensor, sender, receiver, tag, what):
        """Starts moving `tensor` from sender to receiver (one of them this rank); returns the
        engine's handle and the finisher that completes the pair's transfers in order."""
        if not tensor.is_contiguous():
            raise ValueError(f"torch.distributed backend 'ddp': {what} needs a contiguous tensor")
        group, finisher = self._pair(receiver if sender == self._rank else sender, what)
        with self._lock:
            key = (sender, receiver, tag)
            sequence = self._sequence[key]
            self._sequence[key] += 1
        handle = _f.broadcast_async_(tensor, 0 if sender < receiver else 1,
                                     name=f"p2p.{sender}>{receiver}.tag{tag}.{sequence}",
                                     process_set=group)
        return handle, finisher

    def close(self):
        with self._lock:
            pairs, self._pairs = list(self._pairs.values()), {}
        for group, finisher in pairs:
            finisher.stop()
            close(group)
