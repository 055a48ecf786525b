# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""A job whose processes another scheduler started (Ray's actors, Spark's barrier tasks): each
reports where it runs, the hosts decide the ranks as ddprun's host list does (hosts.place: a
host's ranks together, hosts in the order they were first seen), and each process gets the
environment ddprun would have given it (env.rank_env, the one writer of the rank environment),
with the rendezvous store hosted by the scheduler's driver."""
from __future__ import annotations

import argparse
import importlib
import os
import secrets
import socket
import sys
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


def job_settings() -> argparse.Namespace:
    """ddprun's job settings (run/env.py reads them), left at its defaults: the scheduler's
    processes take DDP_* settings from their own environment (Ray's elastic driver adds its
    own to these). No monitor: `ddprun status` and its metrics are ddprun's (its store), not a
    scheduler's."""
    return argparse.Namespace(servers=0, restart_servers=False, fusion_threshold_mb=None,
                              cycle_time_ms=None, autotune=False, start_timeout=None,
                              log_level=None, iface=None, timeline_filename=None,
                              job_timeline=None, flight_recorder=None, monitor=False)


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
    args = job_settings()
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


def require(module: str, package: str, api: str):
    """MODULE imported, or an error naming what to install for API (ddp.ray, ddp.spark)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:
            raise  # the framework is there but something it needs is not: its own error
        raise ModuleNotFoundError(f"{api} needs {module}, which is not installed in "
                                  f"{sys.prefix}: pip install {package}", name=module) from e


def picklable(what: str, dumps, obj, *with_it) -> None:
    """Refuses OBJ (a function or class; WHAT: the call that was given it) and what goes WITH_IT
    (its arguments) before anything starts when the scheduler's pickler (DUMPS: Ray's or Spark's
    cloudpickle) cannot send them to the workers."""
    try:
        dumps((obj, *with_it))
    except Exception as e:  # any pickling failure: said with its cause
        name = getattr(obj, "__qualname__", None) or type(obj).__name__
        raise TypeError(f"{what}: {name} cannot be pickled to go to the workers "
                        f"({type(e).__name__}: {e}); nothing was started") from e
