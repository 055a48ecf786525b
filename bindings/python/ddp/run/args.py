# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddprun's command line: the flags, and the checks that turn a wrong combination into a usage
error before anything starts."""
from __future__ import annotations

import argparse
import math
import os
import sys

from .hosts import parse_hostfile, parse_hosts, place
from .nodes import add_node_flags, check_nodes, elastic_nodes, resolve_count, torchrun_flags


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


def _add_host_flags(parser: argparse.ArgumentParser) -> None:
    hosts = parser.add_argument_group("several hosts, started from here")
    hosts.add_argument("-H", "--hosts", metavar="HOST:SLOTS,...",
                       help="hosts and how many ranks each takes, filled in order "
                       "(HOST alone: 1 slot); hosts of this machine are started directly")
    hosts.add_argument("-hostfile", "--hostfile", dest="hostfile", metavar="FILE",
                       help="one host per line: 'HOST slots=N' (as the MPI operator writes "
                       "it), 'HOST:N' or 'HOST'; '#' starts a comment")
    hosts.add_argument("-p", "--ssh-port", dest="ssh_port", type=int, metavar="PORT",
                       help="ssh's port on the hosts")
    hosts.add_argument("-i", "--ssh-identity-file", dest="ssh_identity_file", metavar="FILE",
                       help="ssh's private key")
    hosts.add_argument("--rsh", metavar="CMD",
                       help="replaces ssh: run as CMD HOST COMMAND, COMMAND one shell command "
                       "line, as ssh takes it (e.g. a script running `ip netns exec`)")
    hosts.add_argument("--rendezvous-addr", metavar="ADDR",
                       help="the address of this machine the other hosts reach its store at "
                       "(default: the one the route to the first other host leaves from)")


def _add_elastic_flags(parser: argparse.ArgumentParser) -> None:
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
    elastic.add_argument("--blacklist-cooldown-range", dest="cooldown_range", type=float,
                         nargs=2, metavar=("LOW", "HIGH"),
                         help="a host where a worker failed gets no new workers for LOW to HIGH "
                         "seconds, doubling with each failure there (default: for the rest of "
                         "the job)")


def _add_server_flags(add) -> None:
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
    add("--max-restarts", type=int, metavar="N",
        help="torchrun's: in elastic mode (alone, it makes a job of -np elastic), a failed "
        "worker is replaced on its slot, N times in the job (default 0: left out, as "
        "horovodrun); the others go on without waiting, and the new one joins at their next "
        "commit. With --restart-servers: restarts allowed per server (default 3)")


def _add_engine_flags(add) -> None:
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


# horovodrun's --log-level names, as DDP_LOG_LEVEL takes them (libddp has no "fatal": its errors).
LOG_LEVELS = {"trace": "trace", "debug": "debug", "info": "info", "warning": "warning",
              "error": "error", "fatal": "error", "off": "off"}


def _log_level(text: str) -> str:
    level = LOG_LEVELS.get(text.lower())
    if level is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not one of {', '.join(n.upper() for n in LOG_LEVELS)}")
    return level


def _interface(text: str) -> str:
    """--network-interfaces: horovodrun takes a comma-separated list; libddp listens on one."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if len(names) != 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give one interface; libddp listens and connects on one (DDP_IFACE)")
    return names[0]


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (1-65535)")
    return port


def version() -> str:
    """ddp's version: its extension's (the CMake project's), else the installed package's."""
    try:
        from ddp import __version__  # lazy: ddp/run is loaded alone too (the agent)

        return __version__
    except ImportError:
        from importlib import metadata  # lazy: only without ddp

        try:
            return metadata.version("libddp")
        except metadata.PackageNotFoundError:
            return "unknown (ddp is neither importable nor installed)"


class _Version(argparse.Action):
    """--version, as horovodrun's: the version alone on standard output, then exit 0."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.write(version() + "\n")
        sys.stdout.flush()
        parser.exit()


def _add_output_flags(parser: argparse.ArgumentParser) -> None:
    output = parser.add_argument_group("output, logging and the network (as horovodrun's)")
    output.add_argument("--output-filename", metavar="DIR",
                        help="also write each rank's stdout and stderr to DIR/rank.N/stdout and "
                        "DIR/rank.N/stderr (N zero-padded to the width of the last rank), as "
                        "horovodrun does; the terminal still gets every line")
    output.add_argument("-prefix-timestamp", "--prefix-output-with-timestamp",
                        dest="prefix_timestamp", action="store_true",
                        help="put the time before every line ddprun prints (and writes to "
                        "--output-filename's files), as horovodrun does: 'Fri Nov 27 16:41:22 "
                        "2026 [0] ...'")
    output.add_argument("--log-level", type=_log_level, metavar="LEVEL",
                        help="libddp's log level (DDP_LOG_LEVEL): TRACE, DEBUG, INFO, WARNING, "
                        "ERROR, FATAL (as ERROR) or OFF, any case")
    output.add_argument("--network-interfaces", "--network-interface", dest="iface",
                        type=_interface, metavar="IFACE",
                        help="the network interface the ranks listen and connect on "
                        "(DDP_IFACE, and NCCL_SOCKET_IFNAME for NCCL's own sockets); one name")
    output.add_argument("--stragglers", choices=("auto", "always", "never"), default="auto",
                        help="the table of the ranks the others waited for, at the end of the "
                        "job: auto (default) prints it when one rank held each of the others 10%% "
                        "of the job's time and at least a second (and with --verbose), always, "
                        "never")
    output.add_argument("--job-timeline", metavar="FILE",
                        help="one timeline of the whole job in FILE at its end: every rank's "
                        "(Chrome/Perfetto trace, a track group per rank) on rank 0's clock, "
                        "measured at start (ddp-timeline merge; the ranks' own files go to "
                        "FILE.ranks/, which must be visible from every host)")
    output.add_argument("--flight-recorder", metavar="DIR",
                        help="where the ranks' flight records go when the job breaks "
                        "(DDP_FLIGHT_RECORDER_DUMP; ddp_flight_recorder_rank_N.json): a rank "
                        "whose job broke writes its own, and when a rank fails ddprun asks the "
                        "others for theirs before it stops them")
    output.add_argument("--metrics-port", type=_port, metavar="PORT",
                        help="serve Prometheus metrics of every rank at http://HOST:PORT/metrics "
                        "while the job runs (bytes, operations, busbw, wait time, errors, by rank "
                        "and operation)")
    output.add_argument("--version", action=_Version, help="print ddp's version and exit")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ddprun",
        usage="%(prog)s -np N [-H HOST:SLOTS,... | --hostfile FILE | --nnodes K --node-rank I "
        "--rendezvous HOST:PORT]\n              [options] COMMAND...\n"
        "       %(prog)s --nproc-per-node L [--nnodes K --node-rank I --master-addr HOST "
        "[--master-port PORT] | --standalone]\n              [options] COMMAND...",
        description="Run N ranks of COMMAND as one libddp job: on this machine, on the hosts "
        "given (started over ssh), or, run once per node, on the node it runs on.",
        epilog="Every output line is prefixed with its rank ([host:rank] on several hosts). If a "
        "rank fails, or a host cannot be reached, the others are stopped and ddprun exits with "
        "the failing rank's status (128+N for signal N).")
    add = parser.add_argument
    add("-np", "--num-proc", dest="np", type=int, metavar="N",
        help="number of ranks to start (in all); in elastic mode, how many workers must be able "
        "to run before the job starts (default: --min-np)")
    _add_host_flags(parser)
    add_node_flags(parser)
    _add_elastic_flags(parser)
    _add_server_flags(add)
    _add_engine_flags(add)
    _add_output_flags(parser)
    add("--verbose", action="store_true", help="print the store's port and the ranks' statuses")
    add("command", nargs=argparse.REMAINDER, metavar="COMMAND...",
        help="the program every rank runs, with its arguments")
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line, checked; a usage error exits (SystemExit 2), as argparse does."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("missing COMMAND: the program each rank runs")
    if isinstance(args.nnodes, tuple):
        elastic_nodes(parser, args)
    args.elastic = (args.min_np is not None or args.max_np is not None or
                    bool(args.host_discovery_script) or
                    (args.max_restarts is not None and not args.servers))
    if args.elastic:
        _check_elastic(parser, args)
    else:
        resolve_count(parser, args)
    if args.slots is not None or args.elastic_timeout != 600.0 or args.reset_limit is not None \
            or args.cooldown_range is not None:
        if not args.elastic:
            parser.error("--slots-per-host, --elastic-timeout, --reset-limit and "
                         "--blacklist-cooldown-range are for elastic mode (--min-np, --max-np or "
                         "--host-discovery-script)")
    if args.np < 1:
        parser.error(f"-np must be at least 1 (got {args.np})")
    if args.hosts and args.hostfile:
        parser.error("give -H or --hostfile, not both")
    check_nodes(parser, args)
    _check_servers(parser, args)
    if args.output_filename and args.elastic:
        parser.error("--output-filename names each rank's files, and an elastic job's ranks "
                     "change: it is for a static job")
    if args.elastic and (args.stragglers != "auto" or args.job_timeline is not None):
        parser.error("--stragglers and --job-timeline are for a static job (an elastic job's "
                     "ranks change with each generation; ddp.stats() has its stragglers)")
    if args.job_timeline is not None and args.timeline_filename:
        parser.error("give --job-timeline (one merged file) or --timeline-filename (a rank's "
                     "own), not both")
    args.workers = args.np
    args.np += args.servers  # every rank of the job: the workers, then the servers
    _read_hosts(parser, args)
    return args


def _check_servers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.servers < 0:
        parser.error(f"--servers must be >= 0 (got {args.servers})")
    if args.servers and args.nnodes:
        parser.error("--servers starts servers from one launcher: use -H/--hostfile, or "
                     "DDP_PS_SERVERS under a per-node launch")
    if args.restart_servers and not args.servers:
        parser.error("--restart-servers restarts parameter servers: give --servers K too")
    if args.max_restarts is not None and args.max_restarts < 0:
        parser.error(f"--max-restarts must be >= 0 (got {args.max_restarts})")
    if args.max_restarts is None:
        args.max_restarts = 0 if args.elastic else 3
    if args.restart_servers and os.environ.get("DDP_TRANSPORT", "auto") not in ("auto", "tcp"):
        parser.error(f"--restart-servers needs DDP_TRANSPORT=tcp (a restarted server rejoins over "
                     f"TCP), not {os.environ['DDP_TRANSPORT']}")


def _read_hosts(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """args.host_list from -H or --hostfile, and args.places, each rank's (None: one machine)."""
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
    if args.cooldown_range is not None and not 0 < args.cooldown_range[0] <= \
            args.cooldown_range[1]:
        parser.error("--blacklist-cooldown-range needs 0 < LOW <= HIGH (got "
                     f"{args.cooldown_range[0]:g} {args.cooldown_range[1]:g})")
    if args.host_discovery_script and (args.hosts or args.hostfile):
        parser.error("give --host-discovery-script or -H/--hostfile, not both")
    if args.nnodes is not None or args.servers:
        parser.error("elastic mode runs the job from one ddprun: it takes no --nnodes and no "
                     "--servers")
    per_node = torchrun_flags(args) + (["--node-rank"] if args.node_rank is not None else [])
    if per_node:
        parser.error(f"elastic mode runs the job from one ddprun: it takes no {per_node[0]}")
    if args.timeline_filename and "{rank}" not in args.timeline_filename:
        parser.error("in elastic mode ranks change: give --timeline-filename with {rank} (each "
                     "worker writes its own file, {rank} replaced by its worker id)")
