# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""monitored_barrier for the torch.distributed backend 'ddp', as Gloo's: rank 0 waits for every
other rank of the group to check in, each within the timeout, and names the first that did not
(or, with wait_all_ranks, every one); then it releases the others, or tells them it failed.

It runs through the group's store (torch's, which every rank of the group shares), not through
the group's connections: a barrier that reports which rank never came must not hang on that rank,
and a failed one leaves the group's collectives as they were (Gloo's does too), so a job can go
on, or stop with the name of the rank to look at. The messages are Gloo's, which scripts and
torch's own suite match.
"""
from __future__ import annotations

import time
from datetime import timedelta

import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

_PREFIX = "ddp-monitored-barrier"


def _seconds(timeout) -> float:
    """torch 2 hands BarrierOptions (its .timeout), torch 1.13 a timedelta, a user maybe seconds."""
    timeout = getattr(timeout, "timeout", timeout)
    if isinstance(timeout, timedelta):
        return timeout.total_seconds()
    return float(timeout)


def _counter(store, key, seconds) -> int:
    """The counter `key` once it is not 0, or 0 after `seconds`. Polled with add(key, 0), which
    reads it: a store's wait(timeout) that times out can leave a TCPStore client reading the late
    answer as the reply to its next request (torch 1.13), and 1.13's PrefixStore has no check()."""
    deadline = time.monotonic() + seconds
    pause = 0.0005
    while True:
        value = store.add(key, 0)
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 0.01)


_ENDED = f"{_PREFIX}/ended"  # a counter of the barriers rank 0 ended: add() of 0 reads it


def sequence(store, rank, own):
    """The number of this rank's next monitored barrier of the group (`own`: one past its last).
    Rank 0 numbers them; a rank that skipped some (as the rank a failed barrier named did) joins
    the one after the last that rank 0 ended, not one long gone."""
    return own if rank == 0 else max(own, store.add(_ENDED, 0))


def run(store, rank, size, number, timeout, wait_all_ranks, error):
    """Monitored barrier number `number` (sequence()) of a group; raises `error(message)` where
    Gloo's raises."""
    seconds = _seconds(timeout)
    prefix = f"{_PREFIX}/{number}/"
    try:
        _one(store, rank, size, prefix, seconds, wait_all_ranks, error)
    finally:
        if rank == 0:
            store.add(_ENDED, 1)


_OK, _FAILED = 1, 2  # the release counter's values


def _one(store, rank, size, prefix, seconds, wait_all_ranks, error):
    ms = int(seconds * 1000)
    release = prefix + "release"
    if rank != 0:
        store.add(f"{prefix}arrived/{rank}", 1)
        # Rank 0 answers within the timeout; a little more here, so as not to miss its answer.
        if _counter(store, release, seconds * 1.1 + 1) != _OK:
            raise error(f"Rank {rank} successfully reached monitoredBarrier, but received errors "
                        f"while waiting for send/recv from rank 0. Please check rank 0 logs for "
                        f"faulty rank.")
        return
    start = time.monotonic()
    failed = []
    for peer in range(1, size):
        # Each rank gets what is left of the timeout; with wait_all_ranks, the whole of it.
        left = seconds if wait_all_ranks else seconds - (time.monotonic() - start)
        if left <= 0 and not wait_all_ranks:
            store.add(release, _FAILED)
            passed = ", ".join(str(r) for r in range(1, peer)) or "none"
            raise error(f"Rank {rank} timed out in monitoredBarrier after {ms} ms. Ranks that "
                        f"passed it: {passed}.")
        if not _counter(store, f"{prefix}arrived/{peer}", left):
            failed.append(peer)
            if not wait_all_ranks:
                break
    if failed:
        store.add(release, _FAILED)
        if wait_all_ranks:
            ranks = ", ".join(str(r) for r in failed)
            raise error(f"[Rank {rank}]: Ranks {ranks} failed to pass monitoredBarrier in {ms} ms")
        raise error(f"[Rank {rank}]: Rank {failed[0]} failed to pass monitoredBarrier in {ms} ms")
    store.add(release, _OK)


def extend_torch_113(name):
    """torch 1.13's dist.monitored_barrier refuses every backend not named "gloo" before asking
    the group; for groups of backend `name` it now asks the group (whose monitored_barrier is
    the above), and leaves every other group to torch. torch 2 asks any backend itself."""
    original = dist.monitored_barrier
    if getattr(original, "_ddp_extended", False):
        return

    def monitored_barrier(group=dist.GroupMember.WORLD, timeout=None, wait_all_ranks=False):
        if c10d._rank_not_in_group(group) or dist.get_backend(group) != name:  # noqa: SLF001 - torch's own
            return original(group, timeout, wait_all_ranks)
        pg = c10d._get_default_group() if group in (None, dist.GroupMember.WORLD) else group  # noqa: SLF001 - torch's own
        if timeout is None:
            timeout = c10d.default_pg_timeout
        elif not isinstance(timeout, timedelta):
            timeout = timedelta(seconds=float(timeout))
        return pg.monitored_barrier(timeout, wait_all_ranks)

    monitored_barrier.__doc__ = original.__doc__
    monitored_barrier._ddp_extended = True  # noqa: SLF001 - our mark on the function we install
    dist.monitored_barrier = monitored_barrier
    c10d.monitored_barrier = monitored_barrier
