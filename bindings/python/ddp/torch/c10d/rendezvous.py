# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""init_method="ddp://": torch.distributed's rendezvous from libddp's own launcher detection.

`dist.init_process_group("ddp", init_method="ddp://")` joins libddp's job from whatever launched
the process (ddprun, torchrun, mpirun or srun: the variables and precedence of
docs/launching.md), takes the rank and size from it, and hands torch a store for what torch keeps
there itself (its barrier after init, the names of later groups). So one script runs unchanged
under all four, where torch's `env://` needs RANK, WORLD_SIZE and MASTER_ADDR/PORT, which mpirun
and srun do not set.

The store: once libddp's job is up, rank 0 hosts a libddp rendezvous store (authenticated: every
connection proves it has the token) on a free port with a fresh token, and broadcasts the port,
the token and its addresses over libddp's own connections, which only the job's ranks share. The
others connect to the first of those addresses that answers. torch's calls reach it through a
`torch.distributed.Store` subclass. Any backend may use it (`init_process_group("gloo",
init_method="ddp://")` too).
"""
from __future__ import annotations

import array
import fcntl
import os
import secrets
import socket
import struct
import threading
from datetime import timedelta
from urllib.parse import parse_qsl, urlparse

import torch.distributed as dist

from ... import _ddp
from ..._job import init
from ..._objects import broadcast_object
from ..._ops import error

SCHEME = "ddp"

# Rank 0's store server and every rank's store of the latest ddp:// rendezvous.
_server = None
_store = None


class JobStore(dist.Store):
    """A torch.distributed Store on a libddp rendezvous store: set, get, add, wait and check (what
    torch keeps in its store); compare_set, delete_key and num_keys are refused with the reason.
    Calls from several threads take turns on the one connection."""

    def __init__(self, client, timeout: timedelta, host: str):
        super().__init__()
        self.host = host  # where the others reach rank 0's host (a later group's store goes there)
        self._client = client
        self._lock = threading.Lock()
        self.set_timeout(timeout)

    def _seconds(self, timeout=None) -> float:
        t = timeout if timeout is not None else self.timeout
        seconds = t.total_seconds() if isinstance(t, timedelta) else float(t)
        return seconds if seconds > 0 else 365 * 24 * 3600.0  # torch's 0: no limit

    def set(self, key, value):
        data = value if isinstance(value, bytes) else bytes(value) if isinstance(
            value, (bytearray, list)) else str(value).encode()
        with self._lock:
            self._client.set(key, data)

    def get(self, key):
        with self._lock:
            return self._client.get(key, self._seconds())

    def add(self, key, value):
        with self._lock:
            return self._client.add(key, int(value))

    def wait(self, keys, timeout=None):
        seconds = self._seconds(timeout)
        for key in keys:
            with self._lock:
                self._client.get(key, seconds)  # DDPError (DEADLINE_EXCEEDED) if it never came

    def check(self, keys):
        with self._lock:
            for key in keys:
                try:
                    self._client.get(key, 0.0)
                except _ddp.DDPError:
                    return False
        return True

    def _refused(self, what):
        raise NotImplementedError(f"ddp:// store: {what} is not served (set, get, add, wait and "
                                  f"check are)")

    def compare_set(self, key, expected_value, desired_value):
        self._refused("compare_set")

    def delete_key(self, key):
        self._refused("delete_key")

    def num_keys(self):
        self._refused("num_keys")


def _interface_addresses() -> list:
    """This machine's IPv4 addresses other than loopback, one per interface (DDP_IFACE's alone
    where it is set)."""
    wanted = os.environ.get("DDP_IFACE", "").strip()
    names = [wanted] if wanted else [name for _, name in socket.if_nameindex()]
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for name in names:
            request = array.array("B", struct.pack("256s", name.encode()[:15]))
            try:
                fcntl.ioctl(probe.fileno(), 0x8915, request)  # SIOCGIFADDR
            except OSError:
                continue  # no IPv4 address on it
            ip = socket.inet_ntoa(request.tobytes()[20:24])
            if not ip.startswith("127.") and ip not in found:
                found.append(ip)
    if wanted and not found:
        raise error(f"init_method ddp://: DDP_IFACE={wanted}: no such interface with an IPv4 "
                    f"address", "INVALID_ARGUMENT")
    return found


def _host_identity() -> str:
    """libddp's name for this host (DDP_HOSTNAME, else the host name): ranks with the same one
    share a machine (and its loopback)."""
    return os.environ.get("DDP_HOSTNAME", "").strip() or socket.gethostname()


def _close() -> None:
    global _server, _store
    if _server is not None:
        _server.close()
    _server, _store = None, None


def job_store(timeout: timedelta) -> JobStore:
    """A store every rank of libddp's job reaches (a collective: every rank calls it)."""
    global _server, _store
    _close()
    rank, seconds = _ddp.rank(), max(1.0, min(timeout.total_seconds(), 60.0))
    published = None
    if rank == 0:
        token = secrets.token_hex(16)
        iface = os.environ.get("DDP_IFACE", "").strip()
        addrs = _interface_addresses() if iface or _ddp.size() > 1 else []
        bind = addrs[0] if iface else "0.0.0.0" if _ddp.size() > 1 else "127.0.0.1"
        _server = _ddp.StoreServer(bind, 0, token)
        published = {"token": token, "port": _server.port, "addrs": addrs,
                     "host": _host_identity(), "name": socket.gethostname()}
    published = broadcast_object(published, root_rank=0)  # on libddp's engine
    if rank == 0 or (published["host"] == _host_identity() and not os.environ.get("DDP_IFACE")):
        candidates = ["127.0.0.1"]
    else:
        candidates = list(published["addrs"]) + [published["name"]]
    failures = []
    for addr in candidates:
        try:
            client = _ddp.StoreClient(addr, published["port"], published["token"],
                                      seconds if addr == candidates[-1] else min(seconds, 5.0))
        except _ddp.DDPError as e:
            failures.append(f"{addr}: {e}")
            continue
        _store = JobStore(client, timeout, (published["addrs"] or ["127.0.0.1"])[0])
        return _store
    raise error(f"init_method ddp://: rank {rank} cannot reach the store rank 0 hosts on port "
                f"{published['port']} at any of its addresses ({'; '.join(failures)}); set "
                f"DDP_IFACE to the interface the ranks share", "UNAVAILABLE")


def _rendezvous(url: str, timeout: timedelta = timedelta(minutes=30), **kwargs):  # noqa: ARG001 - torch's handler signature
    """torch's rendezvous handler for ddp:// (a generator of (store, rank, world_size))."""
    query = dict(parse_qsl(urlparse(url).query))
    init()  # libddp's job from the launcher's variables (a no-op when it has joined)
    rank, size = _ddp.rank(), _ddp.size()
    for name, have in (("rank", rank), ("world_size", size)):
        if name in query and int(query[name]) not in (-1, have):
            raise ValueError(f"init_process_group(init_method='ddp://'): {name}={query[name]} "
                             f"contradicts the launcher's, which makes this process rank {rank} "
                             f"of {size} (leave rank= and world_size= out: ddp:// reads them)")
    yield job_store(timeout), rank, size
    raise RuntimeError("init_method ddp:// cannot rendezvous again in one init_process_group: "
                       "libddp's job is fixed at its start (an elastic job re-initialises "
                       "through ddp.elastic)")


def register() -> None:
    """Registers ddp:// with torch.distributed (idempotent)."""
    try:
        dist.register_rendezvous_handler(SCHEME, _rendezvous)
    except RuntimeError as e:  # registered already (torch refuses a second handler)
        if "already" not in str(e):
            raise
