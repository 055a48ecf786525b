# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""A job whose processes another scheduler started (Ray's actors, Spark's barrier tasks): each
reports where it runs, the hosts decide the ranks as ddprun's host list does (hosts.place: a
host's ranks together, hosts in the order they were first seen), and each process gets the
environment ddprun would have given it (env.rank_env, the one writer of the rank environment),
with the rendezvous store hosted by the scheduler's driver."""
from __future__ import annotations

import argparse
import os
import secrets
import socket
from typing import NamedTuple

from .env import rank_env, scrubbed
from .hosts import Host, address_toward, place


class Member(NamedTuple):
    """What a started process says of itself before it has a rank."""
    host: str  # its host's name, as libddp groups ranks (socket.gethostname())
    addr: str  # its host's address toward the driver (torch's store, should it be rank 0)
    free_port: int  # a port free on its host just now (likewise)


def describe(driver: str) -> Member:
    """This process, as a Member (DRIVER: the host the driver runs on)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    return Member(socket.gethostname(), address_toward(driver), port)


def ranks_of(members: list[Member]) -> list[int]:
    """Each member's rank: the members of a host take consecutive ranks, hosts in the order in
    which they first appear, members of a host in their order."""
    hosts = list(dict.fromkeys(m.host for m in members))
    order = sorted(range(len(members)), key=lambda i: (hosts.index(members[i].host), i))
    ranks = [0] * len(members)
    for rank, index in enumerate(order):
        ranks[index] = rank
    return ranks


def _settings() -> argparse.Namespace:
    """ddprun's job settings (run/env.py reads them), left at its defaults: the scheduler's
    processes take DDP_* settings from their own environment."""
    return argparse.Namespace(servers=0, restart_servers=False, fusion_threshold_mb=None,
                              cycle_time_ms=None, autotune=False, start_timeout=None,
                              log_level=None, iface=None, timeline_filename=None)


def environments(members: list[Member], rendezvous: tuple[str, int],
                 token: str) -> list[dict]:
    """The rank environment of each member (in the members' order): DDP_*, Horovod's and
    torchrun's variables, MASTER_ADDR and MASTER_PORT at rank 0's host."""
    ranks = ranks_of(members)
    by_rank = sorted(range(len(members)), key=ranks.__getitem__)
    counts: dict[str, int] = {}
    for m in members:
        counts[m.host] = counts.get(m.host, 0) + 1
    places = place([Host(h, n) for h, n in counts.items()], len(members))
    args = _settings()
    args.np, args.places = len(members), places
    first = members[by_rank[0]]
    master = (first.addr, first.free_port)
    return [rank_env({}, ranks[i], args, rendezvous[0], rendezvous[1], token,
                     places[ranks[i]], master) for i in range(len(members))]


def enter(env: dict, extra: dict | None = None) -> None:
    """Makes ENV this process's rank environment: what would place it in another job goes."""
    kept = scrubbed(os.environ)
    os.environ.clear()
    os.environ.update(kept)
    os.environ.update(env)
    os.environ.update(extra or {})


def new_token() -> str:
    return secrets.token_hex(16)
