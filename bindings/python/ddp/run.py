"""ddprun: runs N ranks of a command as one libddp job, on this machine or on several hosts.

    ddprun -np 4 python train.py                         (or: python -m ddp.run ...)
    ddprun -np 8 -H host1:4,host2:4 python train.py      (--hostfile FILE: "host slots=N" lines)
    ddprun --nnodes 2 --node-rank 0 --rendezvous HOST:PORT -np 8 python train.py   (per node)
    ddprun -np 4 --servers 2 python train_ps.py          (parameter server: 2 more ranks serve)
    ddprun -np 2 --min-np 2 --max-np 8 --host-discovery-script ./hosts.sh python train.py
                                                         (elastic: ddp.elastic, ddp.torch.elastic)

The launcher hosts the store the ranks meet at, gives each rank its DDP_* environment, copies
their output line by line with "[rank] " (several hosts: "[host:rank] ") in front, and, when one
rank fails, stops the others so that a job never hangs on a dead peer. Its exit status is the
first failing rank's. On other hosts it starts one agent per host over ssh (or --rsh CMD): this
same file run with --_agent, which reads the job (token included) from its standard input, so
that no secret is ever on a command line, and stops its ranks when that input closes.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import queue
import re
import secrets
import selectors
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import NamedTuple

GRACE_SECONDS = 5.0  # between asking ranks to stop (SIGTERM/SIGINT) and SIGKILL
_LAST_WORDS_SECONDS = 1.0  # lets a failed rank's last output out before the launcher blames it
_DRAIN_SECONDS = 5.0  # output still open after every rank ended belongs to a stray grandchild
_ADDR = "127.0.0.1"
_AGENT_GRACE_SECONDS = 3.0  # an agent gets its own ranks' grace, and this, before SIGKILL

# Inherited variables that would tell a rank it belongs to some other job.
_SCRUBBED_PREFIXES = ("OMPI_", "PMI_", "PMIX_", "DDP_LOCAL_", "DDP_CROSS_", "DDP_RENDEZVOUS_")
# Horovod's names for a rank's place (what horovodrun sets), set again for this job: scripts
# written for Horovod read them (the local rank picks the GPU before init()).
_HOROVOD_PLACE = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
                  "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE")
_SCRUBBED_NAMES = {"DDP_RANK", "DDP_SIZE", "DDP_JOB_TOKEN", "DDP_REJOIN", "DDP_REPORT_FD",
                   "MPI_LOCALRANKID", "MPI_LOCALNRANKS", *_HOROVOD_PLACE}


def _number(minimum: float, strict: bool = False):
    """An argparse type: a finite float >= minimum (> minimum when strict)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < minimum or (strict and value == minimum):
            raise argparse.ArgumentTypeError(
                f"{text!r} must be {'>' if strict else '>='} {minimum:g}")
        return value

    return parse


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ddprun",
        usage="%(prog)s -np N [-H HOST:SLOTS,... | --hostfile FILE | --nnodes K --node-rank I "
        "--rendezvous HOST:PORT]\n              [options] COMMAND...",
        description="Run N ranks of COMMAND as one libddp job: on this machine, on the hosts "
        "given (started over ssh), or, run once per node, on the node it runs on.",
        epilog="Every output line is prefixed with its rank ([host:rank] on several hosts). If a "
        "rank fails, or a host cannot be reached, the others are stopped and ddprun exits with "
        "the failing rank's status (128+N for signal N).")
    add = parser.add_argument
    add("-np", "--num-proc", dest="np", type=int, metavar="N",
        help="number of ranks to start (in all); in elastic mode, how many workers must be able "
        "to run before the job starts (default: --min-np)")
    hosts = parser.add_argument_group("several hosts, started from here")
    hosts.add_argument("-H", "--hosts", metavar="HOST:SLOTS,...",
                       help="hosts and how many ranks each takes, filled in order "
                       "(HOST alone: 1 slot); hosts of this machine are started directly")
    hosts.add_argument("--hostfile", metavar="FILE",
                       help="one host per line: 'HOST slots=N' (as the MPI operator writes "
                       "it), 'HOST:N' or 'HOST'; '#' starts a comment")
    hosts.add_argument("--ssh-port", type=int, metavar="PORT", help="ssh's port on the hosts")
    hosts.add_argument("--ssh-identity-file", metavar="FILE", help="ssh's private key")
    hosts.add_argument("--rsh", metavar="CMD",
                       help="replaces ssh: run as CMD HOST COMMAND, COMMAND one shell command "
                       "line, as ssh takes it (e.g. a script running `ip netns exec`)")
    hosts.add_argument("--rendezvous-addr", metavar="ADDR",
                       help="the address of this machine the other hosts reach its store at "
                       "(default: the one the route to the first other host leaves from)")
    nodes = parser.add_argument_group("one ddprun per node (as torchrun)")
    nodes.add_argument("--nnodes", type=int, metavar="K", help="number of nodes in the job")
    nodes.add_argument("--node-rank", type=int, metavar="I",
                       help="this node's index, 0..K-1; node 0 hosts the rendezvous store")
    nodes.add_argument("--rendezvous", metavar="HOST:PORT",
                       help="node 0's address and the port its store listens on")
    nodes.add_argument("--token-file", metavar="FILE",
                       help="the job's secret, the same on every node (default: $DDP_JOB_TOKEN)")
    elastic = parser.add_argument_group(
        "elastic (as horovodrun's): the job goes on when workers fail or hosts come and go; "
        "the script uses ddp.elastic.run / ddp.torch.elastic.run")
    elastic.add_argument("--min-np", "--min-num-proc", dest="min_np", type=int, metavar="N",
                         help="the fewest workers the job runs with (default: -np); below it, "
                         "ddprun waits up to --elastic-timeout for hosts")
    elastic.add_argument("--max-np", "--max-num-proc", dest="max_np", type=int, metavar="N",
                         help="the most workers ddprun starts (default: every slot it has)")
    elastic.add_argument("--host-discovery-script", metavar="SCRIPT",
                         help="a shell command printing the hosts there are now, one a line, "
                         "'HOST:SLOTS' or 'HOST' (then --slots-per-host); run every second")
    elastic.add_argument("--slots-per-host", "--slots", dest="slots", type=int, metavar="K",
                         help="slots of a host the discovery script gives without them (default 1)")
    elastic.add_argument("--elastic-timeout", type=_number(0, strict=True), default=600.0,
                         metavar="S", help="how long to wait for enough workers (default 600)")
    elastic.add_argument("--reset-limit", type=int, metavar="N",
                         help="stop the job after it was re-formed N times (default: no limit)")
    add("--servers", type=int, default=0, metavar="K",
        help="parameter-server mode: start K server processes (python -m ddp.ps.server) as "
        "ranks N..N+K-1 beside the N workers (DDP_PS_SERVERS=K); with -H or --hostfile they take "
        "the last K slots, so list the servers' hosts last")
    add("--restart-servers", action="store_true",
        help="with --servers: a server process that fails is started again (up to "
        "--max-restarts times each); it restores its checkpoint (DDP_PS_CHECKPOINT_DIR) and "
        "rejoins the running job, the workers register with it again and training goes on. "
        "The job runs over TCP (DDP_TRANSPORT=tcp), and the workers wait up to "
        "DDP_PS_SERVER_RESTART_SECONDS (default 120) for the new process")
    add("--max-restarts", type=int, default=3, metavar="N",
        help="with --restart-servers: restarts allowed per server (default 3)")
    add("--timeline-filename", metavar="F",
        help="write a Chrome-trace timeline (DDP_TIMELINE). If F contains '{rank}', every rank "
        "writes its own file, {rank} replaced by its rank; otherwise only rank 0 writes F, as "
        "Horovod does.")
    add("--fusion-threshold-mb", type=_number(0), metavar="M",
        help="tensor-fusion buffer in MiB, may be fractional (DDP_FUSION_THRESHOLD, in bytes)")
    add("--cycle-time-ms", type=_number(0), metavar="C",
        help="fusion engine cycle time in milliseconds (DDP_CYCLE_TIME_MS)")
    add("--autotune", action="store_true",
        help="tune fusion threshold and cycle time while training (DDP_AUTOTUNE=1)")
    add("--start-timeout", type=_number(0, strict=True), metavar="S",
        help="seconds the ranks wait for each other at start (DDP_START_TIMEOUT_SECONDS)")
    add("--verbose", action="store_true", help="print the store's port and the ranks' statuses")
    add("command", nargs=argparse.REMAINDER, metavar="COMMAND...",
        help="the program every rank runs, with its arguments")
    return parser


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


def _host(text: str, where: str) -> Host:
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
    return [_host(item, "-H") for item in text.split(",") if item.strip()]


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
        hosts.append(_host(f"{words[0]}:{slots[0][6:]}" if slots else words[0], where))
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
        raise ValueError(f"-np {np} but the hosts have only {total} slot{'s' if total != 1 else ''} "
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


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("missing COMMAND: the program each rank runs")
    args.elastic = (args.min_np is not None or args.max_np is not None or
                    bool(args.host_discovery_script))
    if args.elastic:
        _check_elastic(parser, args)
    elif args.np is None:
        parser.error("-np N is required (the number of ranks)")
    if args.slots is not None or args.elastic_timeout != 600.0 or args.reset_limit is not None:
        if not args.elastic:
            parser.error("--slots-per-host, --elastic-timeout and --reset-limit are for elastic "
                         "mode (--min-np, --max-np or --host-discovery-script)")
    if args.np < 1:
        parser.error(f"-np must be at least 1 (got {args.np})")
    if args.hosts and args.hostfile:
        parser.error("give -H or --hostfile, not both")
    node_flags = [args.nnodes is not None, args.node_rank is not None, bool(args.rendezvous)]
    if any(node_flags):
        if not all(node_flags):
            parser.error("--nnodes, --node-rank and --rendezvous go together")
        if args.hosts or args.hostfile:
            parser.error("--nnodes runs once per node: it takes no -H or --hostfile")
        if args.nnodes < 1 or not 0 <= args.node_rank < args.nnodes:
            parser.error(f"--node-rank {args.node_rank} is not in 0..{args.nnodes - 1}")
        if args.np % args.nnodes:
            parser.error(f"-np {args.np} ranks do not split evenly over {args.nnodes} nodes")
        host, colon, port = args.rendezvous.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            parser.error(f"--rendezvous {args.rendezvous!r} is not HOST:PORT")
        args.rendezvous_host, args.rendezvous_port = host.strip("[]"), int(port)
    if args.servers < 0:
        parser.error(f"--servers must be >= 0 (got {args.servers})")
    if args.servers and args.nnodes:
        parser.error("--servers starts servers from one launcher: use -H/--hostfile, or "
                     "DDP_PS_SERVERS under a per-node launch")
    if args.restart_servers and not args.servers:
        parser.error("--restart-servers restarts parameter servers: give --servers K too")
    if args.max_restarts < 0:
        parser.error(f"--max-restarts must be >= 0 (got {args.max_restarts})")
    if args.restart_servers and os.environ.get("DDP_TRANSPORT", "auto") not in ("auto", "tcp"):
        parser.error(f"--restart-servers needs DDP_TRANSPORT=tcp (a restarted server rejoins over "
                     f"TCP), not {os.environ['DDP_TRANSPORT']}")
    args.workers = args.np
    args.np += args.servers  # every rank of the job: the workers, then the servers
    try:
        if args.hostfile:
            with open(args.hostfile, encoding="utf-8") as f:
                args.host_list = parse_hostfile(f.read(), args.hostfile)
            if not args.host_list:
                parser.error(f"--hostfile {args.hostfile}: no hosts in it")
        else:
            args.host_list = parse_hosts(args.hosts) if args.hosts else None
        args.places = place(args.host_list, args.np) if args.host_list and not args.elastic \
            else None
    except OSError as e:
        parser.error(f"--hostfile {args.hostfile}: {e.strerror or e}")
    except ValueError as e:
        parser.error(str(e))
    return args


def _check_elastic(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.np is None and args.min_np is None:
        parser.error("elastic mode needs -np or --min-np (how many workers to start with)")
    if args.min_np is None:
        args.min_np = args.np
    if args.np is None:
        args.np = args.min_np
    if args.min_np < 1:
        parser.error(f"--min-np must be at least 1 (got {args.min_np})")
    if args.np < args.min_np:
        parser.error(f"-np {args.np} is below --min-np {args.min_np}")
    if args.max_np is not None and args.max_np < args.np:
        parser.error(f"--max-np {args.max_np} is below -np {args.np}")
    if args.slots is not None and args.slots < 1:
        parser.error(f"--slots-per-host must be at least 1 (got {args.slots})")
    if args.reset_limit is not None and args.reset_limit < 0:
        parser.error(f"--reset-limit must be >= 0 (got {args.reset_limit})")
    if args.host_discovery_script and (args.hosts or args.hostfile):
        parser.error("give --host-discovery-script or -H/--hostfile, not both")
    if args.nnodes is not None or args.servers:
        parser.error("elastic mode runs the job from one ddprun: it takes no --nnodes and no "
                     "--servers")
    if args.timeline_filename and "{rank}" not in args.timeline_filename:
        parser.error("in elastic mode ranks change: give --timeline-filename with {rank} (each "
                     "worker writes its own file, {rank} replaced by its worker id)")


def _decimal(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def server_command() -> list[str]:
    """What a parameter-server rank runs."""
    return [sys.executable, "-m", "ddp.ps.server"]


def _start_time(pid: int) -> int:
    """The kernel's start time of a process (field 22 of /proc/PID/stat), 0 if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return 0


_OFI_REGION_PREFIX = "ddp-ofi-"


def sweep_shm(shm_dir: str = "/dev/shm") -> list[str]:
    """Removes the shared-memory segments of this user's libddp processes that are gone, as
    libddp does when it creates one (segment.cc, Sweep): a rank killed before its local peers
    attached (SIGKILL, or SIGTERM during start-up, which no library can catch) leaves its
    segment, named /dev/shm/ddp-UID-PIDNS-PID-START-NONCE; a rank on libfabric's shm provider
    leaves its region, ddp-ofi-PID-RANDOM (ofi_plugin.cc). The launcher and each agent sweep
    after every rank of theirs that exits, so a failed job leaves nothing for the next one to
    find. Returns the names removed."""
    try:
        prefix = f"ddp-{os.getuid()}-{os.stat('/proc/self/ns/pid').st_ino}-"
        names = os.listdir(shm_dir)
    except OSError:
        return []
    removed = []
    for name in names:
        if name.startswith(_OFI_REGION_PREFIX):  # libfabric's shm provider, ofi_plugin.cc
            parts = name[len(_OFI_REGION_PREFIX):].split("-")
            if len(parts) != 2 or not parts[0].isdigit():
                continue
            pid, start = int(parts[0]), 0
        elif name.startswith(prefix):
            parts = name[len(prefix):].split("-")
            if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
                continue
            pid, start = int(parts[0]), int(parts[1])
        else:
            continue
        try:
            os.kill(pid, 0)
            now_start = _start_time(pid)
            gone = start != 0 and now_start != 0 and now_start != start
        except ProcessLookupError:
            gone = True
        except PermissionError:
            gone = False
        if gone:
            try:
                os.unlink(os.path.join(shm_dir, name))
                removed.append(name)
            except OSError:
                pass
    return removed


def _command(args: argparse.Namespace, rank: int) -> list[str]:
    return args.command if rank < args.workers else server_command()


def _tolerated(args: argparse.Namespace) -> frozenset:
    """With --servers, the workers: one that fails does not stop the job."""
    return frozenset(range(args.workers)) if args.servers else frozenset()


def _restartable(args: argparse.Namespace) -> frozenset:
    """With --restart-servers, the servers: one that fails is started again."""
    return frozenset(range(args.workers, args.np)) if args.restart_servers else frozenset()


def _rank_env(base, rank: int, args: argparse.Namespace, addr: str, port: int, token: str,
              where: Place | None = None) -> dict:
    """The environment of one rank: the launcher's, less other jobs' ranks, plus this job's."""
    env = {k: v for k, v in base.items()
           if k not in _SCRUBBED_NAMES and not k.startswith(_SCRUBBED_PREFIXES)}
    where = where or Place("", rank, args.np, 0, 1)
    env.update(DDP_RANK=str(rank), DDP_SIZE=str(args.np), DDP_LOCAL_RANK=str(where.local_rank),
               DDP_LOCAL_SIZE=str(where.local_size), DDP_CROSS_RANK=str(where.cross_rank),
               DDP_CROSS_SIZE=str(where.cross_size), DDP_RENDEZVOUS_ADDR=addr,
               DDP_RENDEZVOUS_PORT=str(port), DDP_RENDEZVOUS_EXTERNAL="1", DDP_JOB_TOKEN=token,
               PYTHONUNBUFFERED="1")
    env.update(zip(_HOROVOD_PLACE, (env["DDP_RANK"], env["DDP_SIZE"], env["DDP_LOCAL_RANK"],
                                    env["DDP_LOCAL_SIZE"], env["DDP_CROSS_RANK"],
                                    env["DDP_CROSS_SIZE"])))
    if where.host and args.places:  # the host as the launcher knows it: what libddp groups by
        env["DDP_HOSTNAME"] = where.host
    if args.servers:
        env["DDP_PS_SERVERS"] = str(args.servers)
    if args.restart_servers:
        env["DDP_TRANSPORT"] = "tcp"
        env.setdefault("DDP_PS_SERVER_RESTART_SECONDS", "120")
    if args.fusion_threshold_mb is not None:
        env["DDP_FUSION_THRESHOLD"] = str(int(args.fusion_threshold_mb * 1048576))
    if args.cycle_time_ms is not None:
        env["DDP_CYCLE_TIME_MS"] = _decimal(args.cycle_time_ms)
    if args.autotune:
        env["DDP_AUTOTUNE"] = "1"
    if args.start_timeout is not None:
        env["DDP_START_TIMEOUT_SECONDS"] = _decimal(args.start_timeout)
    timeline = args.timeline_filename
    if timeline and "{rank}" in timeline:
        env["DDP_TIMELINE"] = timeline.replace("{rank}", str(rank))
    elif timeline:
        if rank == 0:
            env["DDP_TIMELINE"] = timeline
        else:  # an inherited one would have every rank write rank 0's file
            env.pop("DDP_TIMELINE", None)
    return env


def _start_store(token: str, addr: str = _ADDR, port: int = 0):
    """Hosts the rendezvous store; returns its port and a function that stops it."""
    from ddp import _ddp  # here, so that argument errors need no compiled extension

    server = _ddp.StoreServer(addr, port, token)
    return server.port, server.close


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


def _address_toward(host: str) -> str:
    """The address of this machine that traffic to HOST leaves from (nothing is sent)."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(address)
            return probe.getsockname()[0]
    except OSError:  # not resolvable here (an ssh alias, say): this machine's own name
        return socket.gethostbyname(socket.gethostname())


# Variables of the launcher's session that say nothing about the job; every other one goes to
# the ranks on other hosts too (as horovodrun does), so that PATH, a virtual environment,
# PYTHONPATH and the user's DDP_* settings hold there as here.
_LOCAL_ONLY_NAMES = {"HOSTNAME", "HOST", "PWD", "OLDPWD", "SHLVL", "_", "DISPLAY", "XAUTHORITY",
                     "TERM", "TERMCAP", "COLUMNS", "LINES"}
_LOCAL_ONLY_PREFIXES = ("SSH_", "BASH_FUNC_", "XDG_")


def _remote_command(args: argparse.Namespace, host: str) -> list[str]:
    """How an agent is started on HOST: ssh (or --rsh) HOST 'python run.py --_agent'."""
    agent = shlex.join([sys.executable, os.path.abspath(__file__), "--_agent"])
    if args.rsh:
        return [*shlex.split(args.rsh), host, agent]
    ssh = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
    if args.ssh_port is not None:
        ssh += ["-p", str(args.ssh_port)]
    if args.ssh_identity_file:
        ssh += ["-i", args.ssh_identity_file]
    return [*ssh, host, agent]


def _describe(status: int) -> str:
    if status >= 0:
        return f"exited with status {status}"
    try:
        name = signal.Signals(-status).name
    except ValueError:
        name = "an unknown signal"
    return f"was killed by signal {name} ({-status})"


def _ranks(count: int) -> str:
    return f"{count} rank" if count == 1 else f"{count} ranks"


class _Sink:
    """A launcher output stream taking whole lines under one lock: no two writers interleave."""

    def __init__(self, stream):
        self._stream = stream
        self._lock = threading.Lock()
        self._broken = False

    def write(self, lines: list[bytes]) -> None:
        with self._lock:
            if self._broken or not lines:
                return
            try:
                for line in lines:
                    self._stream.write(line)
                self._stream.flush()
            except (OSError, ValueError):  # e.g. `ddprun ... | head`: keep draining the ranks
                self._broken = True


_LINE = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)")


class _Prefixer:
    """Cuts one stream of a rank into lines ending in "\\n", "\\r" or "\\r\\n", each prefixed with
    PREFIX. A "\\r" ends a line too, so a redrawn progress bar is shown as it is drawn."""

    def __init__(self, prefix: bytes):
        self._prefix = prefix
        self._partial: list[bytes] = []
        self._after_cr = False

    def feed(self, data: bytes) -> list[bytes]:
        lines = []
        if self._after_cr and data.startswith(b"\n"):  # the rest of a "\r\n" cut by a read
            lines.append(b"\n")
            data = data[1:]
        self._after_cr = False
        cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        if cut == 0:
            if data:
                self._partial.append(data)
            return lines
        head = b"".join(self._partial) + data[:cut]
        self._partial = [data[cut:]] if cut < len(data) else []
        lines.extend(self._prefix + line for line in _LINE.findall(head))
        self._after_cr = not self._partial and data.endswith(b"\r")
        return lines

    def close(self) -> list[bytes]:
        """The unterminated rest, ended with a newline so the next rank's line starts clean."""
        rest, self._partial = b"".join(self._partial), []
        return [self._prefix + rest + b"\n"] if rest else []


# An agent's word to the launcher: a line of its stderr starting with this (never printed).
_CONTROL = b"\x1eddprun "


class _OutputPump(threading.Thread):
    """Copies the output of every process the launcher started to the launcher's, line by line,
    prefixed; an agent's lines come prefixed already, and its control lines become events."""

    def __init__(self, out: _Sink, err: _Sink):
        super().__init__(name="ddprun-output", daemon=True)
        self._selector = selectors.DefaultSelector()
        self._sinks = (out, err)
        self._open: dict[int, int] = {}  # unit -> how many of its pipes are still open
        self._closed = threading.Condition()

    def add(self, unit: int, proc: subprocess.Popen, prefix: bytes, control=None,
            report: tuple | None = None) -> None:
        """Only before start(). CONTROL(line) takes the control lines of its stderr; REPORT, a
        (pipe, handler) pair, the lines of its libddp report pipe (handler(line), never shown)."""
        for pipe, sink, ctl in ((proc.stdout, self._sinks[0], None),
                                (proc.stderr, self._sinks[1], control)):
            self._selector.register(pipe, selectors.EVENT_READ, (unit, _Prefixer(prefix), sink,
                                                                 ctl))
        self._open[unit] = 2
        if report is not None:
            pipe, handler = report
            self._selector.register(pipe, selectors.EVENT_READ, (unit, _Prefixer(b""), None,
                                                                 handler))
            self._open[unit] = 3

    def run(self) -> None:
        while self._selector.get_map():
            for key, _ in self._selector.select():
                unit, prefixer, sink, control = key.data
                data = os.read(key.fd, 1 << 16)
                lines = prefixer.feed(data) if data else prefixer.close()
                if sink is None:  # a report pipe: every line goes to its handler
                    for line in lines:
                        control(line)
                    lines = []
                elif control is not None:
                    for line in [line for line in lines if line.startswith(_CONTROL)]:
                        control(line)
                    lines = [line for line in lines if not line.startswith(_CONTROL)]
                if lines:
                    sink.write(lines)
                if not data:
                    self._selector.unregister(key.fileobj)
                    key.fileobj.close()
                    with self._closed:
                        self._open[unit] -= 1
                        self._closed.notify_all()

    def wait_closed(self, unit: int, timeout: float) -> None:
        with self._closed:
            self._closed.wait_for(lambda: self._open.get(unit, 0) == 0, timeout)


def _copy_lines(pipe, prefix: bytes, sink: _Sink) -> None:
    """Copies a restarted process's output, prefixed, until it closes."""
    prefixer = _Prefixer(prefix)
    while True:
        data = os.read(pipe.fileno(), 1 << 16)
        sink.write(prefixer.feed(data) if data else prefixer.close())
        if not data:
            pipe.close()
            return


class _Unit:
    """One process the launcher starts: a rank here, or the agent that runs a host's ranks."""

    def __init__(self, ranks: list[int], argv: list[str], env: dict, prefix: str,
                 host: str = "", spec: dict | None = None):
        self.ranks, self.argv, self.env, self.host, self.spec = ranks, argv, env, host, spec
        self.prefix = prefix.encode()
        self.started = spec is None  # an agent has started once it says so
        self.proc: subprocess.Popen | None = None

    def describe(self) -> str:
        first, last = self.ranks[0], self.ranks[-1]
        what = f"rank {first}" if first == last else f"ranks {first}-{last}"
        return f"{what} on host {self.host}" if self.host else what


class _Job:
    """The processes of one job: starts them, watches them, stops them all when one fails.
    AGENT: this job is one host's part of a larger one; it reports each rank's end on stderr,
    says nothing of its own, and stops when its standard input closes."""

    def __init__(self, units: list[_Unit], out: _Sink, err: _Sink, agent: bool = False,
                 host: str = "", tolerated: frozenset = frozenset(),
                 restartable: frozenset = frozenset(), max_restarts: int = 0):
        self._units = units
        # Ranks started again when they fail (--restart-servers: parameter servers, which
        # rejoin the running job with DDP_REJOIN=1), and how often each was.
        self._restartable = restartable
        self._max_restarts = max_restarts
        self._restarts: dict[int, int] = {}
        self._out = out
        # Ranks whose failure does not stop the others (a parameter server's workers: the
        # library itself goes on without them in async mode, or fails the others, naming them).
        self._tolerated = tolerated
        self._tolerated_code: int | None = None
        self._err = err
        self._agent = agent
        self._host_of = {r: u.host for u in units for r in u.ranks}
        self._pump = _OutputPump(out, err)
        self._events: queue.SimpleQueue = queue.SimpleQueue()  # put() is safe in signal handlers
        self._alive: set[int] = set()
        self._stdin_closed: set[int] = set()
        self._remote = any(u.spec is not None for u in units)
        self._name = f"ddprun (on {host})" if agent else "ddprun"
        self.statuses: dict[int, int] = {}
        # What each rank's libddp reported on its report pipe when its job broke
        # (DDP_REPORT_FD, libddp's common/report.h): the ranks it blames, and why.
        self.reports: dict[int, tuple[list[int], str]] = {}
        self._code: int | None = None  # set by the first failure or interruption: the cause

    def say(self, message: str) -> None:
        self._err.write([f"{self._name}: {message}\n".encode()])

    def _report(self, rank: int, status: int) -> None:
        if self._agent:
            self._err.write([_CONTROL + f"exit {rank} {status}\n".encode()])

    def run(self) -> int:
        handlers = {} if self._agent else self._catch_signals()
        try:
            self._start()
            self._pump.start()
            if self._agent:
                self._err.write([_CONTROL + b"started\n"])
                threading.Thread(target=self._watch_stdin, name="ddprun-stdin",
                                 daemon=True).start()
            self._wait()
            self._pump.join(_DRAIN_SECONDS)
            return self._code or self._tolerated_code or 0
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)

    def _catch_signals(self) -> dict:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}
        # SIGHUP too (a closed terminal or ssh session): the ranks run in their own sessions and
        # would not get it, so they would outlive the launcher.
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            handler = signal.signal(signum, lambda s, _: self._events.put(("signal", s, None)))
            if handler is not None:
                previous[signum] = handler
        return previous

    def _watch_stdin(self) -> None:
        """An agent's input stays open while the launcher wants its ranks to run."""
        try:  # the raw descriptor: a buffered reader's lock would stop the interpreter's exit
            while os.read(0, 1 << 16):
                pass
        except OSError:
            pass
        self._events.put(("stop", None, None))

    def _report_line(self, rank: int, line: bytes) -> None:
        """A line of RANK's report pipe: `failure RANKS|- CODE MESSAGE`. An agent passes it on."""
        if self._agent:
            self._err.write([_CONTROL + f"report {rank} ".encode() + line.rstrip(b"\r\n") +
                             b"\n"])
            return
        words = line.decode(errors="replace").rstrip("\r\n").split(" ", 3)
        if len(words) < 3 or words[0] != "failure" or rank in self.reports:
            return
        blamed = [int(r) for r in words[1].split(",") if r.isdigit()]
        self.reports[rank] = (blamed, words[3] if len(words) > 3 else words[2])

    def _culprit(self, rank: int) -> tuple[int, int, str] | None:
        """The rank that RANK's report blames, if another; the rank that judged so (RANK, or the
        last rank whose abort RANK's error passes on); and the words that blame it."""
        blamed, message = self.reports.get(rank, ([], ""))
        if not blamed or blamed[0] == rank:
            return None
        culprit = blamed[0]
        # The innermost judgement: "rank C (host, address): why", else what follows the last
        # abort passed on ("rank J (...): aborted the job: why"), else the whole message.
        named = list(re.finditer(rf"rank {culprit} \([^)]*\): (?!aborted the job)", message))
        aborted = list(re.finditer(r"rank (\d+) \([^)]*\): aborted the job: ", message))
        cut = named[-1].start() if named else aborted[-1].end() if aborted else 0
        judges = [m for m in aborted if m.end() <= cut]
        return culprit, int(judges[-1].group(1)) if judges else rank, message[cut:]

    def _control(self, index: int, line: bytes) -> None:
        if line.startswith(_CONTROL + b"report "):
            rank, _, rest = line[len(_CONTROL) + 7:].partition(b" ")
            if rank.isdigit():
                self._report_line(int(rank), rest)
            return
        words = line[len(_CONTROL):].split()
        if words == [b"started"]:
            self._events.put(("started", index, None))
        elif len(words) == 3 and words[0] == b"exit":
            self._events.put(("rank", int(words[1]), int(words[2])))

    def _start(self) -> None:
        for index, unit in enumerate(self._units):
            remote = unit.spec is not None
            # Standard input goes to rank 0 here; an agent's is the launcher's line to it.
            first = unit.ranks[0] == 0 and not remote and not self._agent
            # A rank's libddp says on this pipe whom it blames when its job breaks.
            report_r, report_w = (-1, -1) if remote else os.pipe()
            try:
                unit.proc = subprocess.Popen(
                    unit.argv, env=unit.env if remote else {**unit.env,
                                                            "DDP_REPORT_FD": str(report_w)},
                    start_new_session=True, bufsize=0,
                    stdin=subprocess.PIPE if remote else None if first else subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    pass_fds=() if remote else (report_w,))
            except OSError as e:
                if not remote:
                    os.close(report_r)
                    os.close(report_w)
                not_found = isinstance(e, FileNotFoundError)
                why = "command not found" if not_found else e.strerror or str(e)
                self.say(f"cannot start {unit.describe()}: {unit.argv[0]}: {why}")
                self._code = 127 if not_found else 126
                for rank in unit.ranks:
                    self._report(rank, self._code)
                self._signal(signal.SIGKILL)
                return
            if remote:
                try:  # the job, token included, goes only through this pipe
                    unit.proc.stdin.write(json.dumps(unit.spec).encode() + b"\n")
                    unit.proc.stdin.flush()
                except OSError:
                    pass  # it ended at once; its exit says why
            report = None
            if not remote:
                os.close(report_w)
                report = (os.fdopen(report_r, "rb", buffering=0),
                          lambda line, r=unit.ranks[0]: self._report_line(r, line))
            self._alive.add(index)
            self._pump.add(index, unit.proc, unit.prefix,
                           (lambda line, i=index: self._control(i, line)) if remote else None,
                           report)
            threading.Thread(target=lambda i=index, p=unit.proc: self._events.put(
                ("exit", i, p.wait())), name=f"ddprun-wait-{index}", daemon=True).start()

    def _signal(self, signum: int) -> None:
        """Signals every process group still running (grandchildren included). An agent is
        asked to stop by closing its input, and it stops its ranks; only SIGKILL reaches it."""
        for index in self._alive:
            proc = self._units[index].proc
            if self._units[index].spec is not None and signum != signal.SIGKILL:
                if index not in self._stdin_closed:
                    self._stdin_closed.add(index)
                    try:
                        proc.stdin.close()
                    except OSError:
                        pass
                continue
            try:
                os.killpg(proc.pid, signum)
                if signum != signal.SIGKILL:  # a stopped rank acts on it only once continued
                    os.killpg(proc.pid, signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass  # it has just exited

    def _stop_all(self, signum: int = signal.SIGTERM) -> float:
        """Asks every process to stop; returns when to SIGKILL those still running."""
        self._signal(signum)
        return time.monotonic() + GRACE_SECONDS + (_AGENT_GRACE_SECONDS if self._remote else 0)

    def _wait(self) -> None:
        deadline = None  # when the processes asked to stop get SIGKILL
        while self._alive:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                kind, first, second = self._events.get(timeout=timeout)
            except queue.Empty:
                self._signal(signal.SIGKILL)
                deadline = None
                continue
            if kind == "exit" and self._units[first].spec is not None:
                # Its control lines first: they are queued once its output has closed.
                self._pump.wait_closed(first, _DRAIN_SECONDS)
                self._events.put(("gone", first, second))
            elif kind == "exit":
                self._alive.discard(first)
                sweep_shm()  # what a rank killed during start-up left in /dev/shm
                rank = self._units[first].ranks[0]
                if second != 0 or self._agent:  # its last words before what is said of it
                    self._pump.wait_closed(first, _LAST_WORDS_SECONDS)
                if second != 0 and self._code is None and self._restart(first, rank, second):
                    continue
                self.statuses[rank] = second
                self._report(rank, second)
                if second != 0 and self._code is None and not self._tolerate(rank, second):
                    deadline = self._fail(rank, second)
            elif kind == "rank":
                self.statuses[first] = second
                if second != 0 and self._code is None and not self._tolerate(first, second):
                    deadline = self._fail(first, second)
            elif kind == "started":
                self._units[first].started = True
            elif kind == "gone":
                self._alive.discard(first)
                if second != 0 and self._code is None:
                    deadline = self._lost(self._units[first], second)
            elif kind == "stop":  # an agent's launcher is done with it
                if self._code is None:
                    self._code = 128 + signal.SIGTERM
                    deadline = self._stop_all()
            elif self._code is None:  # the first SIGINT/SIGTERM/SIGHUP to the launcher
                self._code = 128 + first
                verb = {signal.SIGINT: "interrupted", signal.SIGHUP: "hung up"}.get(first,
                                                                                 "terminated")
                self.say(f"{verb}, stopping {_ranks(self._running())}")
                deadline = self._stop_all(signal.SIGTERM if first == signal.SIGHUP else first)
            else:  # a second signal: no more waiting
                self._signal(signal.SIGKILL)
                deadline = None

    def _restart(self, index: int, rank: int, status: int) -> bool:
        """Starts a failed restartable rank again, as its new process (DDP_REJOIN=1)."""
        done = self._restarts.get(rank, 0)
        if rank not in self._restartable or done >= self._max_restarts:
            if rank in self._restartable:
                self.say(f"server rank {rank} {_describe(status)}; it was restarted "
                         f"{done} times already (--max-restarts {self._max_restarts})")
            return False
        self._restarts[rank] = done + 1
        unit = self._units[index]
        host = f" on host {unit.host}" if unit.host else ""
        self.say(f"server rank {rank}{host} {_describe(status)}; restarting it "
                 f"({done + 1} of {self._max_restarts}): it restores its checkpoint and rejoins")
        env = {**unit.env, "DDP_REJOIN": "1"}
        try:
            proc = subprocess.Popen(unit.argv, env=env, start_new_session=True, bufsize=0,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
        except OSError as e:
            self.say(f"cannot restart server rank {rank}: {e.strerror or e}")
            return False
        unit.proc = proc
        self._alive.add(index)
        for pipe, sink in ((proc.stdout, self._out), (proc.stderr, self._err)):
            threading.Thread(target=_copy_lines, args=(pipe, unit.prefix, sink),
                             name=f"ddprun-output-{index}", daemon=True).start()
        threading.Thread(target=lambda: self._events.put(("exit", index, proc.wait())),
                         name=f"ddprun-wait-{index}", daemon=True).start()
        return True

    def _tolerate(self, rank: int, status: int) -> bool:
        """A tolerated rank's failure: said, remembered for the exit status, nothing stopped."""
        if rank not in self._tolerated:
            return False
        if self._tolerated_code is None:
            self._tolerated_code = 128 - status if status < 0 else status
        if not self._agent:
            host = self._host_of.get(rank)
            self.say(f"worker rank {rank}{f' on host {host}' if host else ''} {_describe(status)}"
                     f"; parameter-server mode: the others go on (the servers decide: async "
                     f"training continues, sync steps fail naming it unless "
                     f"DDP_PS_ON_WORKER_LOSS=continue)")
        return True

    def _running(self) -> int:
        return sum(len([r for r in self._units[i].ranks if r not in self.statuses])
                   for i in self._alive)

    def _fail(self, rank: int, status: int) -> float:
        self._code = 128 - status if status < 0 else status  # as a shell says
        if not self._agent:
            host = self._host_of.get(rank)
            culprit = self._culprit(rank)
            reason = ""
            if culprit is not None:  # a survivor: say first whom it blames
                blamed, judge, why = culprit
                where = self._host_of.get(blamed)
                self.say(f"rank {blamed}{f' on host {where}' if where else ''} broke the job, "
                         f"as rank {judge} reports: {why}")
            elif rank in self.reports:  # no other rank to blame: why it failed, in one line
                reason = f": {self.reports[rank][1]}"
            self.say(f"rank {rank}{f' on host {host}' if host else ''} {_describe(status)}"
                     f"{reason}")
            if self._running():
                self.say(f"stopping the other {_ranks(self._running())}")
        return self._stop_all()

    def _lost(self, unit: _Unit, status: int) -> float:
        """An agent ended badly without a failing rank to show for it."""
        self._code = status if 0 < status < 256 else 1
        how = _describe(status)
        if unit.started:
            self.say(f"lost host {unit.host} ({unit.describe()}): its agent {how}")
        else:
            self.say(f"cannot start {unit.describe()}: {shlex.join(unit.argv[:-2])} {unit.host} "
                     f"{how} (is the host up and reachable, with ddp installed at the same "
                     "path?)")
        if self._running():
            self.say(f"stopping the other {_ranks(self._running())}")
        return self._stop_all()


def _forwarded_env() -> dict:
    return {k: v for k, v in os.environ.items()
            if k not in _LOCAL_ONLY_NAMES and not k.startswith(_LOCAL_ONLY_PREFIXES)}


def _host_units(args: argparse.Namespace, addr: str, port: int, token: str) -> list[_Unit]:
    """A unit per rank on this machine's hosts, one agent per other host."""
    by_host: dict[str, list[int]] = {}
    for rank, where in enumerate(args.places):
        by_host.setdefault(where.host, []).append(rank)
    forwarded = _forwarded_env()
    units = []
    for host, ranks in by_host.items():
        if host in args.local_hosts:
            units += [_Unit([r], _command(args, r), _rank_env(os.environ, r, args, addr, port, token,
                                                         args.places[r]), f"[{host}:{r}] ", host)
                      for r in ranks]
            continue
        spec = {"host": host, "cwd": os.getcwd(), "command": args.command,
                "server_command": server_command(), "first_server": args.workers,
                "tolerated": sorted(_tolerated(args)),
                "restartable": sorted(_restartable(args)), "max_restarts": args.max_restarts,
                "ranks": {str(r): _rank_env(forwarded, r, args, addr, port, token,
                                            args.places[r]) for r in ranks}}
        units.append(_Unit(ranks, _remote_command(args, host), dict(os.environ), "", host, spec))
    return units


def _agent_main() -> int:
    """One host's part of a job started elsewhere: the job comes as one JSON line on stdin."""
    out, err = _Sink(sys.stdout.buffer), _Sink(sys.stderr.buffer)
    try:
        line = b""
        while not line.endswith(b"\n"):  # only this line: what follows is the launcher's EOF
            piece = os.read(0, 1)
            if not piece:
                break
            line += piece
        spec = json.loads(line)
        host, command, ranks = spec["host"], spec["command"], spec["ranks"]
    except (ValueError, KeyError, TypeError) as e:
        err.write([f"ddprun agent: no job on standard input ({e})\n".encode()])
        return 2
    try:
        os.chdir(spec.get("cwd") or ".")
    except OSError:
        pass  # this host has no such directory: the ranks start in the login directory
    base = {k: v for k, v in os.environ.items()
            if k not in _SCRUBBED_NAMES and not k.startswith(_SCRUBBED_PREFIXES)}
    first_server = int(spec.get("first_server", 1 << 30))
    units = [_Unit([int(r)], spec["server_command"] if int(r) >= first_server else command,
                   {**base, **env}, f"[{host}:{r}] ", host)
             for r, env in sorted(ranks.items(), key=lambda item: int(item[0]))]
    return _Job(units, out, err, agent=True, host=host,
                tolerated=frozenset(spec.get("tolerated", [])),
                restartable=frozenset(spec.get("restartable", [])),
                max_restarts=int(spec.get("max_restarts", 0))).run()


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


def _node_units(args: argparse.Namespace, token: str) -> list[_Unit]:
    """This node's ranks: node I of K runs ranks I*L .. I*L+L-1, L = N/K."""
    per_node = args.np // args.nnodes
    host = os.environ.get("DDP_HOSTNAME") or socket.gethostname()
    first = args.node_rank * per_node
    return [_Unit([r], args.command,
                  _rank_env(os.environ, r, args, args.rendezvous_host, args.rendezvous_port, token,
                            Place(host, r - first, per_node, args.node_rank, args.nnodes)),
                  f"[{host}:{r}] ") for r in range(first, first + per_node)]


def main(argv: list[str] | None = None) -> int:
    """Runs ddprun with `argv` (default: sys.argv[1:]); returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--_agent"]:
        return _agent_main()
    try:
        args = _parse_args(argv)
    except SystemExit as e:  # argparse's --help and usage errors
        return e.code if isinstance(e.code, int) else 2
    out, err = _Sink(sys.stdout.buffer), _Sink(sys.stderr.buffer)
    say = lambda message: err.write([f"ddprun: {message}\n".encode()])  # noqa: E731
    if args.elastic:
        from . import _elastic_driver

        return _elastic_driver.main(args, out, err, secrets.token_hex(16))
    try:
        token = _read_token(args) if args.nnodes else secrets.token_hex(16)  # never printed
    except (OSError, ValueError) as e:
        say(f"{e.strerror or e}: {args.token_file}" if isinstance(e, OSError) else str(e))
        return 2
    bind, addr, port = _ADDR, _ADDR, 0
    remote: list[str] = []
    if args.nnodes:
        bind, addr, port = "0.0.0.0", args.rendezvous_host, args.rendezvous_port
    elif args.places:
        hosts = list(dict.fromkeys(p.host for p in args.places))
        args.local_hosts = {h for h in hosts if is_local(h)}
        remote = [h for h in hosts if h not in args.local_hosts]
        if remote:  # the other hosts reach the store at an address of this machine
            bind, addr = "0.0.0.0", args.rendezvous_addr or _address_toward(remote[0])
    close_store = lambda: None  # noqa: E731
    if not args.nnodes or args.node_rank == 0:
        try:
            port, close_store = _start_store(token, bind, port)
        except Exception as e:  # noqa: BLE001 - any failure here means no job, said clearly
            say(f"cannot start the rendezvous store on {bind}:{port}: {e}")
            return 1
    if args.nnodes:
        units = _node_units(args, token)
    elif args.places:
        units = _host_units(args, addr, port, token)
    else:
        units = [_Unit([r], _command(args, r), _rank_env(os.environ, r, args, addr, port, token),
                       f"[{r}] ") for r in range(args.np)]
    job = _Job(units, out, err, tolerated=_tolerated(args), restartable=_restartable(args),
               max_restarts=args.max_restarts)
    try:
        if args.verbose:
            where = f"; on hosts here {sorted(args.local_hosts)}, over " \
                    f"{(shlex.split(args.rsh) if args.rsh else ['ssh'])[0]} {remote}" \
                    if args.places else ""
            job.say(f"rendezvous store on {addr}:{port}{where}; starting "
                    f"{_ranks(sum(len(u.ranks) for u in units))}: {shlex.join(args.command)}")
        code = job.run()
    finally:
        close_store()
    if args.verbose:
        for rank, status in sorted(job.statuses.items()):
            job.say(f"rank {rank} {_describe(status)}")
    return code


if __name__ == "__main__":
    sys.exit(main())
