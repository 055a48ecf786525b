# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddprun's hosts: -H and hostfile parsing, the placement of ranks on them, and which are here."""
from __future__ import annotations

import socket
from typing import NamedTuple

LOOPBACK = "127.0.0.1"  # where a job on this machine alone meets


class Host(NamedTuple):
    name: str
    slots: int


class Place(NamedTuple):
    """Where one rank runs, and its place among the ranks of its host and across hosts."""
    host: str
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int


def parse_host(text: str, where: str) -> Host:
    """'HOST' (1 slot), 'HOST:SLOTS' or '[V6 ADDRESS]:SLOTS'; WHERE names the source in errors."""
    text = text.strip()
    name, colon, slots = text.rpartition(":")
    if not colon:
        name, slots = text, "1"
    name = name.strip("[]")  # [v6 address]:slots
    if not name or not slots.isdigit() or int(slots) < 1:
        raise ValueError(f"{where}: {text!r} is not HOST or HOST:SLOTS (SLOTS >= 1)")
    return Host(name, int(slots))


def parse_hosts(text: str) -> list[Host]:
    """-H host1:4,host2:4 (a host without slots has 1)."""
    return [parse_host(item, "-H") for item in text.split(",") if item.strip()]


def parse_hostfile(text: str, path: str = "hostfile") -> list[Host]:
    """Lines 'HOST slots=N' (also max_slots=, ignored), 'HOST:N' or 'HOST'; '#' comments."""
    hosts = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        where = f"{path}:{number}"
        slots = [w for w in words[1:] if w.startswith("slots=")]
        extra = [w for w in words[1:] if not w.startswith(("slots=", "max_slots="))]
        if extra or len(slots) > 1:
            raise ValueError(f"{where}: {line.strip()!r} is not 'HOST slots=N'")
        hosts.append(parse_host(f"{words[0]}:{slots[0][6:]}" if slots else words[0], where))
    return hosts


def place(hosts: list[Host], np: int) -> list[Place]:
    """Fills the hosts' slots in order: ranks 0.. on the first host, then the next, as mpirun
    and horovodrun do. A rank's cross rank counts the hosts that have its local rank."""
    seen = set()
    for host in hosts:
        if host.name in seen:
            raise ValueError(f"host {host.name} is given twice")
        seen.add(host.name)
    total = sum(h.slots for h in hosts)
    if np > total:
        listed = ", ".join(f"{h.name}:{h.slots}" for h in hosts)
        slots = f"{total} slot{'s' if total != 1 else ''}"
        raise ValueError(f"-np {np} but the hosts have only {slots} "
                         f"({listed})")
    counts, left = [], np
    for host in hosts:
        counts.append(min(host.slots, left))
        left -= counts[-1]
    places = []
    for index, (host, count) in enumerate(zip(hosts, counts)):
        for local in range(count):
            cross = [c for c in counts if c > local]
            places.append(Place(host.name, local, count,
                                sum(1 for c in counts[:index] if c > local), len(cross)))
    return places


def is_local(host: str) -> bool:
    """Whether HOST names this machine (this network namespace): one of its addresses."""
    if host == "localhost":
        return True
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
    except (socket.gaierror, UnicodeError):
        return False  # not known here; the remote shell may know it
    for family, _, _, _, address in infos:
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as probe:
                probe.bind((address[0], 0))  # only an address of this machine binds
            return True
        except OSError:
            continue
    return False


def address_toward(host: str) -> str:
    """The address of this machine that traffic to HOST leaves from (nothing is sent)."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(address)
            return probe.getsockname()[0]
    except OSError:  # not resolvable here (an ssh alias, say): this machine's own name
        return socket.gethostbyname(socket.gethostname())
