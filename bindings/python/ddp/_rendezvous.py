# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""What ddp.init() adds to the launcher's variables before libddp reads them (ddp/launch.h),
and how the torch.distributed backend joins libddp's job through the store torch hands it.

Under torchrun, libddp's rendezvous and its job token go through torchrun's own store: its agent
hosts a torch.distributed TCPStore at MASTER_ADDR:MASTER_PORT for its workers
(TORCHELASTIC_USE_AGENT_STORE=True). Rank 0 hosts libddp's store on a free port of its own and
puts its address there, with a fresh random token unless DDP_JOB_TOKEN is set; the other ranks
read both. Nothing is exported: the values reach libddp as overrides of this one init. A token
taken from torchrun's store protects the job no more than that store does (it authenticates
nobody): docs/security.md says what that means and when to set DDP_JOB_TOKEN instead.
"""
from __future__ import annotations

import json
import os
import secrets
import socket
from datetime import timedelta

from . import _ddp
from ._ops import error

# Rank 0's libddp store under torchrun: kept until shutdown, so that late ranks can still read it.
_server = None


def overrides() -> dict:
    """The variables this init() reads in place of the environment's ({} when none)."""
    env = _ddp.launch_environment()  # a partial or contradictory launcher environment raises
    if env["launcher"] != "torchrun" or env["size"] == 1 or not env["torch_agent_store"]:
        return {}
    have_token = bool(os.environ.get("DDP_JOB_TOKEN", "").strip())
    have_rendezvous = bool(os.environ.get("DDP_RENDEZVOUS_ADDR", "").strip())
    if have_token and have_rendezvous:
        return {}
    found = _through_torch_store(env, os.environ.get("DDP_JOB_TOKEN", "").strip() or None,
                                 host=not have_rendezvous)
    result = {"DDP_JOB_TOKEN": found["token"]}
    if not have_rendezvous:
        result.update(DDP_RENDEZVOUS_ADDR=found["addr"], DDP_RENDEZVOUS_PORT=str(found["port"]),
                      DDP_RENDEZVOUS_EXTERNAL="1")
    return result


def close() -> None:
    """At shutdown: rank 0 stops the store it hosted for torchrun's job."""
    global _server
    if _server is not None:
        _server.close()
        _server = None


def _start_timeout() -> float:
    try:
        return float(os.environ.get("DDP_START_TIMEOUT_SECONDS", "") or 120)
    except ValueError:
        return 120.0  # libddp names the malformed value when it reads the options


def _through_torch_store(env: dict, token: str | None, host: bool) -> dict:
    """Rank 0 publishes {token, addr, port} in torchrun's store; the others read it."""
    try:
        from torch.distributed import TCPStore  # lazy: torch only under torchrun
    except ImportError as e:
        raise error(
            f"ddp.init(): torchrun's variables say its agent hosts a store at "
            f"{env['torch_store_addr']}:{env['torch_store_port']}, but torch.distributed cannot "
            f"be imported here to reach it ({e}); set DDP_JOB_TOKEN on every rank instead",
            "FAILED_PRECONDITION") from e
    timeout = _start_timeout()
    where = f"{env['torch_store_addr']}:{env['torch_store_port']}"
    try:
        store = TCPStore(env["torch_store_addr"], env["torch_store_port"], None, False,
                         timedelta(seconds=timeout))
    except Exception as e:  # torch raises RuntimeError or its own subclasses
        raise error(f"ddp.init(): cannot reach torchrun's store at {where} "
                    f"(MASTER_ADDR/MASTER_PORT): {e}", "UNAVAILABLE") from e
    # One key space per torchrun run and restart.
    prefix = f"ddp/{env['torch_run_id'] or 'run'}/{env['torch_restart']}"
    return _share(store, prefix, env["rank"], token, env["torch_store_addr"] if host else None,
                  timeout, f"torchrun's store at {where}")


def through_store(store, rank: int, size: int, timeout: timedelta, keep: list | None = None
                  ) -> dict:
    """The overrides that make this process rank `rank` of `size` in a job whose rendezvous and
    token go through `store` (a torch.distributed Store: the torch.distributed backend's). Rank 0
    hosts the job's store: until shutdown, or in `keep` (a list) for its owner to close."""
    token = os.environ.get("DDP_JOB_TOKEN", "").strip() or None
    seconds = min(timeout.total_seconds(), _start_timeout()) if timeout else _start_timeout()
    found = _share(store, "ddp", rank, token, _store_host(store), seconds,
                   "torch.distributed's store", keep)
    result = {"DDP_RANK": str(rank), "DDP_SIZE": str(size), "DDP_JOB_TOKEN": found["token"],
              "DDP_RENDEZVOUS_ADDR": found["addr"], "DDP_RENDEZVOUS_PORT": str(found["port"]),
              "DDP_RENDEZVOUS_EXTERNAL": "1"}
    # torch's timeout bounds each operation of the group, as Gloo's does: a rank silent for that
    # long is blamed (DDP_TIMEOUT_SECONDS), and an operation that some ranks started and others
    # have not within it fails on every rank (DDP_STALL_SHUTDOWN_SECONDS). The environment's
    # settings, where given, win.
    if timeout:
        limit = str(max(1.0, timeout.total_seconds()))
        for name in ("DDP_TIMEOUT_SECONDS", "DDP_STALL_SHUTDOWN_SECONDS"):
            if not os.environ.get(name, "").strip():
                result[name] = limit
    return result


def _store_host(store) -> str:
    """Where the other ranks reach torch's store (libddp's store goes on the same route): a
    TCPStore's host, else MASTER_ADDR, else this host (a FileStore on one machine)."""
    inner = store
    for _ in range(8):  # PrefixStore wraps the TCPStore (torch 2.x: underlying_store)
        host = getattr(inner, "host", None)
        if host:
            return host
        inner = getattr(inner, "underlying_store", None)
        if inner is None:
            break
    return os.environ.get("MASTER_ADDR", "").strip() or "127.0.0.1"


def _share(store, prefix: str, rank: int, token: str | None, host_toward: str | None,
           timeout: float, what: str, keep: list | None = None) -> dict:
    """Rank 0 puts {token, addr, port} under a fresh key of `store` (hosting libddp's store when
    `host_toward` is given: on the route to that host); the other ranks read it."""
    generation = store.add(f"{prefix}/init/{rank}", 1)  # one key per init() of this process
    key = f"{prefix}/{generation}/rendezvous"
    if rank == 0:
        # A token the user set never goes into the store: the other ranks have it too.
        published = {} if token else {"token": secrets.token_hex(16)}
        if host_toward is not None:
            published.update(_host_store(token or published["token"], host_toward, keep))
        store.set(key, json.dumps(published))
        return dict(published, token=token or published["token"])
    try:
        store.wait([key], timedelta(seconds=timeout))
        published = json.loads(store.get(key))
    except Exception as e:  # torch raises RuntimeError or its own subclasses
        raise error(
            f"ddp.init(): rank 0 did not publish libddp's rendezvous in {what} within "
            f"{timeout:g} s (DDP_START_TIMEOUT_SECONDS): {e}", "DEADLINE_EXCEEDED") from e
    if not token and "token" not in published:
        raise error(f"ddp.init(): rank 0 has DDP_JOB_TOKEN set and rank {rank} has not: set "
                    f"the same one on every rank", "FAILED_PRECONDITION")
    return dict(published, token=token or published["token"])


def _host_store(token: str, toward: str, keep: list | None = None) -> dict:
    """Rank 0: hosts libddp's store on a free port of the address that the others reach it at
    (kept in `keep` when given, else as the process's job's store)."""
    global _server
    addr = _address_toward(toward)
    server = _ddp.StoreServer(addr, 0, token)
    if keep is not None:
        keep.append(server)
    else:
        close()
        _server = server
    return {"addr": addr, "port": server.port}


def _address_toward(host: str) -> str:
    """This machine's address on the route to `host` (torchrun's MASTER_ADDR, where the other
    ranks reach torchrun's store): loopback when that is this machine's loopback."""
    try:
        infos = socket.getaddrinfo(host, 1, socket.AF_INET, socket.SOCK_DGRAM)
    except OSError as e:
        raise error(f"ddp.init(): MASTER_ADDR={host!r} does not resolve: {e}") from e
    target = str(infos[0][4][0])  # an AF_INET address: (host, port)
    if target.startswith("127."):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((target, 1))  # no packet is sent: this only asks the kernel for the route
        return probe.getsockname()[0]
