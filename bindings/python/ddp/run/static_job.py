# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddprun's static job: the store the ranks meet at, and the units that run them, on this
machine, on the hosts given, or on this node of a per-node launch."""
from __future__ import annotations

import argparse
import os
import secrets
import shlex
import socket

from .agent import remote_command
from .env import forwarded_env, rank_env, server_command
from .hosts import LOOPBACK, Place, address_toward, is_local
from .job import Job, Unit
from .observe import Observers
from .output import RankFiles, Sink, rank_prefix
from .procs import count_ranks, describe


def _command(args: argparse.Namespace, rank: int) -> list[str]:
    return args.command if rank < args.workers else server_command()


def _tolerated(args: argparse.Namespace) -> frozenset:
    """With --servers, the workers: one that fails does not stop the job."""
    return frozenset(range(args.workers)) if args.servers else frozenset()


def _restartable(args: argparse.Namespace) -> frozenset:
    """With --restart-servers, the servers: one that fails is started again."""
    return frozenset(range(args.workers, args.np)) if args.restart_servers else frozenset()


def start_store(token: str, addr: str = LOOPBACK, port: int = 0):
    """Hosts the rendezvous store; returns its port and a function that stops it."""
    from ddp import _ddp  # lazy: argument errors need no compiled extension

    server = _ddp.StoreServer(addr, port, token)
    return server.port, server.close


def _free_port() -> int:
    """A port free on this machine now, for torch.distributed's store (as torchrun's
    --standalone picks one): rank 0 binds it when the script calls init_process_group."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def _torch_master(args: argparse.Namespace, addr: str) -> tuple[str, int]:
    """MASTER_ADDR and MASTER_PORT: rank 0's host as the ranks reach it, and a port for
    torch.distributed's store there (never the rendezvous store's)."""
    if args.nnodes:
        return args.master_addr, args.master_port  # nodes.py: --master-* or after --rendezvous
    host = addr  # this machine, as every rank reaches it
    if args.places and args.places[0].host not in args.local_hosts:
        host = args.places[0].host  # rank 0 is on another host: by the name it was given
    return args.master_addr or host, args.master_port or _free_port()


def _host_units(args: argparse.Namespace, addr: str, port: int, token: str,
                master: tuple[str, int]) -> list[Unit]:
    """A unit per rank on this machine's hosts, one agent per other host."""
    by_host: dict[str, list[int]] = {}
    for rank, where in enumerate(args.places):
        by_host.setdefault(where.host, []).append(rank)
    forwarded = forwarded_env()
    units = []
    for host, ranks in by_host.items():
        if host in args.local_hosts:
            units += [Unit([r], _command(args, r),
                           rank_env(os.environ, r, args, addr, port, token, args.places[r],
                                    master), rank_prefix(r, host), host)
                      for r in ranks]
            continue
        spec = {"host": host, "cwd": os.getcwd(), "command": args.command,
                "server_command": server_command(), "first_server": args.workers,
                "tolerated": sorted(_tolerated(args)),
                "restartable": sorted(_restartable(args)), "max_restarts": args.max_restarts,
                "ranks": {str(r): rank_env(forwarded, r, args, addr, port, token,
                                           args.places[r], master) for r in ranks}}
        units.append(Unit(ranks, remote_command(args, host), dict(os.environ), "", host, spec))
    return units


def _read_token(args: argparse.Namespace) -> str:
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as f:
            token = f.read().strip()
    else:
        token = os.environ.get("DDP_JOB_TOKEN", "").strip()
    if not token:
        raise ValueError("--nnodes needs the job's secret, the same on every node: set "
                         "DDP_JOB_TOKEN (e.g. to `openssl rand -hex 16`) or give --token-file")
    return token


def _node_units(args: argparse.Namespace, token: str, master: tuple[str, int]) -> list[Unit]:
    """This node's ranks: node I of K runs ranks I*L .. I*L+L-1, L = N/K."""
    per_node = args.np // args.nnodes
    host = os.environ.get("DDP_HOSTNAME") or socket.gethostname()
    first = args.node_rank * per_node
    return [Unit([r], args.command,
                 rank_env(os.environ, r, args, args.rendezvous_host, args.rendezvous_port, token,
                          Place(host, r - first, per_node, args.node_rank, args.nnodes), master),
                 rank_prefix(r, host)) for r in range(first, first + per_node)]


def _where_to_meet(args: argparse.Namespace) -> tuple[str, str, int, list[str]]:
    """Where the store listens (BIND), the address and port the ranks reach it at, and the
    hosts started over the remote shell (sets args.local_hosts with -H/--hostfile)."""
    if args.nnodes:
        return "0.0.0.0", args.rendezvous_host, args.rendezvous_port, []
    if not args.places:
        return LOOPBACK, LOOPBACK, 0, []
    hosts = list(dict.fromkeys(p.host for p in args.places))
    args.local_hosts = {h for h in hosts if is_local(h)}
    remote = [h for h in hosts if h not in args.local_hosts]
    if not remote:
        return LOOPBACK, LOOPBACK, 0, remote
    # The other hosts reach the store at an address of this machine.
    return "0.0.0.0", args.rendezvous_addr or address_toward(remote[0]), 0, remote


def _units(args: argparse.Namespace, addr: str, port: int, token: str) -> list[Unit]:
    master = _torch_master(args, addr)
    if args.nnodes:
        return _node_units(args, token, master)
    if args.places:
        return _host_units(args, addr, port, token, master)
    return [Unit([r], _command(args, r),
                 rank_env(os.environ, r, args, addr, port, token, master=master),
                 rank_prefix(r)) for r in range(args.np)]


def _rank_files(args: argparse.Namespace, units: list[Unit]) -> RankFiles | None:
    if not args.output_filename:
        return None
    prefixes = {p: r for unit in units for p, r in unit.prefixes().items()}
    return RankFiles(args.output_filename, args.np, prefixes)


def run(args: argparse.Namespace, out: Sink, err: Sink) -> int:
    """Runs the job ARGS describes (all but elastic mode); returns ddprun's exit status."""
    say = lambda message: err.write([f"ddprun: {message}\n".encode()])  # noqa: E731
    try:
        token = _read_token(args) if args.nnodes else secrets.token_hex(16)  # never printed
    except (OSError, ValueError) as e:
        say(f"{e.strerror or e}: {args.token_file}" if isinstance(e, OSError) else str(e))
        return 2
    try:
        observers = Observers(args, say)
    except OSError as e:
        say(str(e))
        return 2
    bind, addr, port, remote = _where_to_meet(args)
    close_store = lambda: None  # noqa: E731
    if not args.nnodes or args.node_rank == 0:
        try:
            port, close_store = start_store(token, bind, port)
        except Exception as e:  # noqa: BLE001 - any failure here means no job, said clearly
            say(f"cannot start the rendezvous store on {bind}:{port}: {e}")
            observers.end(1)
            return 1
    units = _units(args, addr, port, token)
    try:
        files = _rank_files(args, units)
    except OSError as e:
        close_store()
        observers.end(2)
        say(f"--output-filename {args.output_filename}: {e.strerror or e}")
        return 2
    job = Job(units, out, err, tolerated=_tolerated(args), restartable=_restartable(args),
              max_restarts=args.max_restarts, files=files)
    code = 1
    try:
        observers.start(job, addr, port, token)
        if args.verbose:
            _say_start(job, args, units, addr, port, remote)
        code = job.run()
        if (not args.nnodes or args.node_rank == 0) and args.stragglers != "never":
            # every node's ranks report the same figures: the first node prints them
            job.say_stragglers(args.np, args.stragglers == "always" or args.verbose)
    finally:
        observers.end(code)
        close_store()
        if files is not None:
            files.close()
    if args.verbose:
        for rank, status in sorted(job.statuses.items()):
            job.say(f"rank {rank} {describe(status)}")
    return code


def _say_start(job: Job, args: argparse.Namespace, units: list[Unit], addr: str, port: int,
               remote: list[str]) -> None:
    where = f"; on hosts here {sorted(args.local_hosts)}, over " \
            f"{(shlex.split(args.rsh) if args.rsh else ['ssh'])[0]} {remote}" \
        if args.places else ""
    job.say(f"rendezvous store on {addr}:{port}{where}; starting "
            f"{count_ranks(sum(len(u.ranks) for u in units))}: {shlex.join(args.command)}")
    job.say(_allocator_note(os.environ.get("DDP_KEEP_FREED_MEMORY")))


def _allocator_note(value: str | None) -> str:
    """What ddp.init() will do with each rank's allocator, from the variable the ranks inherit."""
    if value is not None and value.strip().lower() in ("0", "false", "no", "off"):
        return "ranks leave glibc's malloc as it is (DDP_KEEP_FREED_MEMORY=0)"
    return ("ranks keep the memory they free for reuse (glibc's malloc told not to trim; "
            "DDP_KEEP_FREED_MEMORY=0 leaves it as it is)")
