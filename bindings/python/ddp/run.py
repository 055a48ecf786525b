"""ddprun: runs N ranks of a command on this machine around a rendezvous store, rank-prefixed.

    ddprun -np 4 python train.py          (or: python -m ddp.run -np 4 python train.py)

The launcher hosts the store the ranks meet at, gives each rank its DDP_* environment, copies
their output line by line with "[rank] " in front, and, when one rank fails, stops the others
so that a job never hangs on a dead peer. Its exit status is the first failing rank's.
"""
from __future__ import annotations

import argparse
import math
import os
import queue
import re
import secrets
import selectors
import shlex
import signal
import subprocess
import sys
import threading
import time

GRACE_SECONDS = 5.0  # between asking ranks to stop (SIGTERM/SIGINT) and SIGKILL
_LAST_WORDS_SECONDS = 1.0  # lets a failed rank's last output out before the launcher blames it
_DRAIN_SECONDS = 5.0  # output still open after every rank ended belongs to a stray grandchild
_ADDR = "127.0.0.1"

# Inherited variables that would tell a rank it belongs to some other job.
_SCRUBBED_PREFIXES = ("OMPI_", "PMI_", "PMIX_", "DDP_LOCAL_", "DDP_CROSS_", "DDP_RENDEZVOUS_")
_SCRUBBED_NAMES = {"DDP_RANK", "DDP_SIZE", "DDP_JOB_TOKEN", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}


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
        prog="ddprun", usage="%(prog)s -np N [--timeline-filename F] [--fusion-threshold-mb M]\n"
        "              [--cycle-time-ms C] [--autotune] [--start-timeout S] [--verbose] COMMAND...",
        description="Run N ranks of COMMAND on this machine as one libddp job.",
        epilog="Every output line is prefixed with its rank. If a rank fails, the others are "
        "stopped and ddprun exits with the failing rank's status (128+N for signal N).")
    add = parser.add_argument
    add("-np", "--num-proc", dest="np", type=int, required=True, metavar="N",
        help="number of ranks to start")
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


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("missing COMMAND: the program each rank runs")
    if args.np < 1:
        parser.error(f"-np must be at least 1 (got {args.np})")
    return args


def _decimal(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def _rank_env(base, rank: int, args: argparse.Namespace, port: int, token: str) -> dict:
    """The environment of one rank: the launcher's, less other jobs' ranks, plus this job's."""
    env = {k: v for k, v in base.items()
           if k not in _SCRUBBED_NAMES and not k.startswith(_SCRUBBED_PREFIXES)}
    size = str(args.np)
    env.update(DDP_RANK=str(rank), DDP_SIZE=size, DDP_LOCAL_RANK=str(rank), DDP_LOCAL_SIZE=size,
               DDP_CROSS_RANK="0", DDP_CROSS_SIZE="1", DDP_RENDEZVOUS_ADDR=_ADDR,
               DDP_RENDEZVOUS_PORT=str(port), DDP_RENDEZVOUS_EXTERNAL="1", DDP_JOB_TOKEN=token,
               PYTHONUNBUFFERED="1")
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


def _start_store(token: str):
    """Hosts the rendezvous store; returns its port and a function that stops it."""
    from ddp import _ddp  # here, so that argument errors need no compiled extension

    server = _ddp.StoreServer(_ADDR, 0, token)
    return server.port, server.close


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
    "[rank] ". A "\\r" ends a line too, so a redrawn progress bar is shown as it is drawn."""

    def __init__(self, rank: int):
        self._prefix = f"[{rank}] ".encode()
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


class _OutputPump(threading.Thread):
    """Copies every rank's stdout and stderr to the launcher's, line by line, prefixed."""

    def __init__(self, out: _Sink, err: _Sink):
        super().__init__(name="ddprun-output", daemon=True)
        self._selector = selectors.DefaultSelector()
        self._sinks = (out, err)
        self._open: dict[int, int] = {}  # rank -> how many of its pipes are still open
        self._closed = threading.Condition()

    def add(self, rank: int, proc: subprocess.Popen) -> None:
        """Only before start()."""
        for pipe, sink in zip((proc.stdout, proc.stderr), self._sinks):
            self._selector.register(pipe, selectors.EVENT_READ, (rank, _Prefixer(rank), sink))
        self._open[rank] = 2

    def run(self) -> None:
        while self._selector.get_map():
            for key, _ in self._selector.select():
                rank, prefixer, sink = key.data
                data = os.read(key.fd, 1 << 16)
                sink.write(prefixer.feed(data) if data else prefixer.close())
                if not data:
                    self._selector.unregister(key.fileobj)
                    key.fileobj.close()
                    with self._closed:
                        self._open[rank] -= 1
                        self._closed.notify_all()

    def wait_closed(self, rank: int, timeout: float) -> None:
        with self._closed:
            self._closed.wait_for(lambda: self._open.get(rank, 0) == 0, timeout)


class _Job:
    """The ranks of one job: starts them, watches them, stops them all when one fails."""

    def __init__(self, size: int, out: _Sink, err: _Sink):
        self._size = size
        self._err = err
        self._pump = _OutputPump(out, err)
        self._events: queue.SimpleQueue = queue.SimpleQueue()  # put() is safe in signal handlers
        self._procs: dict[int, subprocess.Popen] = {}
        self._alive: set[int] = set()
        self.statuses: dict[int, int] = {}
        self._code: int | None = None  # set by the first failure or interruption: the cause

    def say(self, message: str) -> None:
        self._err.write([f"ddprun: {message}\n".encode()])

    def run(self, command: list[str], env_of_rank) -> int:
        handlers = self._catch_signals()
        try:
            self._start(command, env_of_rank)
            self._pump.start()
            self._wait()
            self._pump.join(_DRAIN_SECONDS)
            return self._code or 0
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

    def _start(self, command: list[str], env_of_rank) -> None:
        for rank in range(self._size):
            try:
                proc = subprocess.Popen(
                    command, env=env_of_rank(rank), start_new_session=True, bufsize=0,
                    stdin=None if rank == 0 else subprocess.DEVNULL,  # stdin goes to rank 0
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            except OSError as e:
                not_found = isinstance(e, FileNotFoundError)
                why = "command not found" if not_found else e.strerror or str(e)
                self.say(f"cannot start rank {rank}: {command[0]}: {why}")
                self._code = 127 if not_found else 126
                self._signal(signal.SIGKILL)
                return
            self._procs[rank] = proc
            self._alive.add(rank)
            self._pump.add(rank, proc)
            threading.Thread(target=lambda r=rank, p=proc: self._events.put(("exit", r, p.wait())),
                             name=f"ddprun-wait-{rank}", daemon=True).start()

    def _signal(self, signum: int) -> None:
        """Signals the process group of every rank still running (grandchildren included)."""
        for rank in self._alive:
            try:
                os.killpg(self._procs[rank].pid, signum)
            except (ProcessLookupError, PermissionError):
                pass  # it has just exited

    def _wait(self) -> None:
        deadline = None  # when the ranks asked to stop get SIGKILL
        while self._alive:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                kind, first, second = self._events.get(timeout=timeout)
            except queue.Empty:
                self._signal(signal.SIGKILL)
                deadline = None
                continue
            if kind == "exit":
                self._alive.discard(first)
                self.statuses[first] = second
                if second != 0 and self._code is None:
                    self._fail(first, second)
                    deadline = time.monotonic() + GRACE_SECONDS
            elif self._code is None:  # the first SIGINT/SIGTERM/SIGHUP to the launcher
                self._code = 128 + first
                verb = {signal.SIGINT: "interrupted", signal.SIGHUP: "hung up"}.get(first,
                                                                                 "terminated")
                self.say(f"{verb}, stopping {_ranks(len(self._alive))}")
                self._signal(signal.SIGTERM if first == signal.SIGHUP else first)
                deadline = time.monotonic() + GRACE_SECONDS
            else:  # a second signal: no more waiting
                self._signal(signal.SIGKILL)
                deadline = None

    def _fail(self, rank: int, status: int) -> None:
        self._code = 128 - status if status < 0 else status  # as a shell says
        self._pump.wait_closed(rank, _LAST_WORDS_SECONDS)  # its traceback first, then our word
        self.say(f"rank {rank} {_describe(status)}")
        if self._alive:
            self.say(f"stopping the other {_ranks(len(self._alive))}")
            self._signal(signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    """Runs ddprun with `argv` (default: sys.argv[1:]); returns the exit status."""
    try:
        args = _parse_args(argv)
    except SystemExit as e:  # argparse's --help and usage errors
        return e.code if isinstance(e.code, int) else 2
    out, err = _Sink(sys.stdout.buffer), _Sink(sys.stderr.buffer)
    job = _Job(args.np, out, err)
    token = secrets.token_hex(16)  # never printed: it is what lets a process into the job
    try:
        port, close_store = _start_store(token)
    except Exception as e:  # noqa: BLE001 - any failure here means no job, said clearly
        job.say(f"cannot start the rendezvous store: {e}")
        return 1
    try:
        if args.verbose:
            job.say(f"rendezvous store on {_ADDR}:{port}; starting {_ranks(args.np)}: "
                    f"{shlex.join(args.command)}")
        code = job.run(args.command, lambda rank: _rank_env(os.environ, rank, args, port, token))
    finally:
        close_store()
    if args.verbose:
        for rank, status in sorted(job.statuses.items()):
            job.say(f"rank {rank} {_describe(status)}")
    return code


if __name__ == "__main__":
    sys.exit(main())
