# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddprun's supervisor: the processes of one job (ranks here, agents on other hosts), started,
watched, and all stopped when one fails, with the failure explained."""
from __future__ import annotations

import json
import os
import queue
import re
import shlex
import signal
import subprocess
import threading
import time
from typing import Callable

from . import stragglers as _stragglers
from .output import CONTROL, OutputPump, RankFiles, Sink, copy_lines, rank_prefix
from .procs import count_ranks, describe, sweep_shm

GRACE_SECONDS = 5.0  # between asking ranks to stop (SIGTERM/SIGINT) and SIGKILL
_LAST_WORDS_SECONDS = 1.0  # lets a failed rank's last output out before the launcher blames it
_DRAIN_SECONDS = 5.0  # output still open after every rank ended belongs to a stray grandchild
_AGENT_GRACE_SECONDS = 3.0  # an agent gets its own ranks' grace, and this, before SIGKILL
# What the supervisor adds to a rank's environment (libddp/src/rank_environment.tsv,
# "ddprun-supervisor"): the pipe of libddp's report, and, for a restarted rank, rejoin.
REPORT_FD, REJOIN = "DDP_REPORT_FD", "DDP_REJOIN"
SUPERVISOR_VARIABLES = (REPORT_FD, REJOIN)


class Unit:
    """One process the launcher starts: a rank here, or the agent that runs a host's ranks."""

    def __init__(self, ranks: list[int], argv: list[str], env: dict, prefix: str,
                 host: str = "", spec: dict | None = None):
        self.ranks, self.argv, self.env, self.host, self.spec = ranks, argv, env, host, spec
        self.prefix = prefix.encode()
        self.started = spec is None  # an agent has started once it says so
        self.proc: subprocess.Popen | None = None

    def running(self) -> subprocess.Popen:
        """Its process: only for a unit that was started."""
        assert self.proc is not None, f"{self.describe()} was never started"
        return self.proc

    def prefixes(self) -> dict[bytes, int]:
        """The prefix of each of its ranks' lines (an agent's come prefixed by the agent)."""
        if self.spec is None:
            return {self.prefix: self.ranks[0]}
        return {rank_prefix(r, self.host).encode(): r for r in self.ranks}

    def describe(self) -> str:
        first, last = self.ranks[0], self.ranks[-1]
        what = f"rank {first}" if first == last else f"ranks {first}-{last}"
        return f"{what} on host {self.host}" if self.host else what


class Job:
    """The processes of one job: starts them, watches them, stops them all when one fails.
    AGENT: this job is one host's part of a larger one; it reports each rank's end on stderr,
    says nothing of its own, and stops when its standard input closes."""

    def __init__(self, units: list[Unit], out: Sink, err: Sink, agent: bool = False,
                 host: str = "", tolerated: frozenset = frozenset(),
                 restartable: frozenset = frozenset(), max_restarts: int = 0,
                 files: RankFiles | None = None):
        self._units = units
        self._files = files  # --output-filename's, beside the launcher's streams
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
        self._pump = OutputPump(out, err, files)
        self._events: queue.SimpleQueue = queue.SimpleQueue()  # put() is safe in signal handlers
        self._alive: set[int] = set()
        self._stdin_closed: set[int] = set()
        self._remote = any(u.spec is not None for u in units)
        self._name = f"ddprun (on {host})" if agent else "ddprun"
        self.statuses: dict[int, int] = {}
        # What each rank's libddp reported on its report pipe when its job broke
        # (DDP_REPORT_FD, libddp's common/report.h): the ranks it blames, and why.
        self.reports: dict[int, tuple[list[int], str]] = {}
        self.started_at = time.monotonic()
        # Called with the failed rank before the others are stopped (ddprun --flight-recorder:
        # their flight records are asked for first).
        self.before_stop: Callable[[int], None] | None = None
        # The straggler scores each rank's libddp reported at its shutdown (the same on every
        # rank: run/stragglers.py), by rank.
        self.stragglers: dict[int, list[_stragglers.Straggler]] = {}
        self._code: int | None = None  # set by the first failure or interruption: the cause
        self._deadline: float | None = None  # when the processes asked to stop get SIGKILL

    def say(self, message: str) -> None:
        self._err.write([f"{self._name}: {message}\n".encode()])

    def _report(self, rank: int, status: int) -> None:
        if self._agent:
            self._err.write([CONTROL + f"exit {rank} {status}\n".encode()])

    def run(self) -> int:
        handlers = {} if self._agent else self._catch_signals()
        try:
            self.started_at = time.monotonic()
            self._start()
            self._pump.start()
            if self._agent:
                self._err.write([CONTROL + b"started\n"])
                threading.Thread(target=self._watch_stdin, name="ddprun-stdin",
                                 daemon=True).start()
            self._wait()
            self._pump.join(_DRAIN_SECONDS)
            return self._code or self._tolerated_code or 0
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)

    @property
    def hosts(self) -> dict[int, str]:
        """Each rank's host, where the job has named hosts (-H, --hostfile)."""
        return {rank: host for rank, host in self._host_of.items() if host}

    def say_stragglers(self, size: int, always: bool) -> None:
        """The stragglers table of a job of SIZE ranks (run/stragglers.py), from the lowest
        rank's report."""
        if not self.stragglers:
            return
        hosts = self.hosts
        rows = self.stragglers[min(self.stragglers)]
        for line in _stragglers.table(rows, size, time.monotonic() - self.started_at, hosts,
                                      always):
            self.say(line)

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

    # ---- what the ranks' libddp and the agents say ---------------------------------------------

    def _report_line(self, rank: int, line: bytes) -> None:
        """A line of RANK's report pipe: `failure RANKS|- CODE MESSAGE`, or the straggler scores
        (run/stragglers.py). An agent passes it on."""
        if self._agent:
            self._err.write([CONTROL + f"report {rank} ".encode() + line.rstrip(b"\r\n") +
                             b"\n"])
            return
        text = line.decode(errors="replace").rstrip("\r\n")
        scores = _stragglers.parse(text)
        if scores is not None:
            self.stragglers.setdefault(rank, scores)
            return
        words = text.split(" ", 3)
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
        if line.startswith(CONTROL + b"report "):
            rank, _, rest = line[len(CONTROL) + 7:].partition(b" ")
            if rank.isdigit():
                self._report_line(int(rank), rest)
            return
        words = line[len(CONTROL):].split()
        if words == [b"started"]:
            self._events.put(("started", index, None))
        elif len(words) == 3 and words[0] == b"exit":
            self._events.put(("rank", int(words[1]), int(words[2])))

    # ---- starting --------------------------------------------------------------------------------

    def _start(self) -> None:
        for index, unit in enumerate(self._units):
            if not self._start_unit(index, unit):
                return

    def _start_unit(self, index: int, unit: Unit) -> bool:
        remote = unit.spec is not None
        # Standard input goes to rank 0 here; an agent's is the launcher's line to it.
        first = unit.ranks[0] == 0 and not remote and not self._agent
        # A rank's libddp says on this pipe whom it blames when its job breaks.
        report_r, report_w = (-1, -1) if remote else os.pipe()
        try:
            unit.proc = subprocess.Popen(
                unit.argv, env=unit.env if remote else {**unit.env,
                                                        REPORT_FD: str(report_w)},
                start_new_session=True, bufsize=0,
                stdin=subprocess.PIPE if remote else None if first else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                pass_fds=() if remote else (report_w,))
        except OSError as e:
            if not remote:
                os.close(report_r)
                os.close(report_w)
            self._cannot_start(unit, e)
            return False
        report = None
        if remote:
            self._send_job(unit)
        else:
            os.close(report_w)
            report = (os.fdopen(report_r, "rb", buffering=0),
                      lambda line, r=unit.ranks[0]: self._report_line(r, line))
        self._alive.add(index)
        self._pump.add(index, unit.running(), unit.prefix,
                       (lambda line, i=index: self._control(i, line)) if remote else None,
                       report)
        self._watch(index, unit.running())
        return True

    def _cannot_start(self, unit: Unit, e: OSError) -> None:
        not_found = isinstance(e, FileNotFoundError)
        why = "command not found" if not_found else e.strerror or str(e)
        self.say(f"cannot start {unit.describe()}: {unit.argv[0]}: {why}")
        self._code = 127 if not_found else 126
        for rank in unit.ranks:
            self._report(rank, self._code)
        self._signal(signal.SIGKILL)

    @staticmethod
    def _send_job(unit: Unit) -> None:
        try:  # the job, token included, goes only through this pipe
            stdin = unit.running().stdin
            assert stdin is not None  # an agent is started with a pipe for its input
            stdin.write(json.dumps(unit.spec).encode() + b"\n")
            stdin.flush()
        except OSError:
            pass  # it ended at once; its exit says why

    def _watch(self, index: int, proc: subprocess.Popen) -> None:
        threading.Thread(target=lambda: self._events.put(("exit", index, proc.wait())),
                         name=f"ddprun-wait-{index}", daemon=True).start()

    # ---- stopping --------------------------------------------------------------------------------

    def _signal(self, signum: int) -> None:
        """Signals every process group still running (grandchildren included). An agent is
        asked to stop by closing its input, and it stops its ranks; only SIGKILL reaches it."""
        for index in self._alive:
            proc = self._units[index].running()
            if self._units[index].spec is not None and signum != signal.SIGKILL:
                if index not in self._stdin_closed:
                    self._stdin_closed.add(index)
                    try:
                        if proc.stdin is not None:
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

    def _stop_all(self, signum: int = signal.SIGTERM) -> None:
        """Asks every process to stop, and sets when to SIGKILL those still running."""
        self._signal(signum)
        self._deadline = (time.monotonic() + GRACE_SECONDS +
                          (_AGENT_GRACE_SECONDS if self._remote else 0))

    # ---- waiting ---------------------------------------------------------------------------------

    def _wait(self) -> None:
        handlers = {"exit": self._on_exit, "rank": self._on_rank, "started": self._on_started,
                    "gone": self._on_gone, "stop": self._on_stop, "signal": self._on_signal}
        while self._alive:
            timeout = None if self._deadline is None else max(0.0,
                                                              self._deadline - time.monotonic())
            try:
                kind, first, second = self._events.get(timeout=timeout)
            except queue.Empty:
                self._signal(signal.SIGKILL)
                self._deadline = None
                continue
            handlers[kind](first, second)

    def _on_exit(self, index: int, status: int) -> None:
        if self._units[index].spec is not None:
            # Its control lines first: they are queued once its output has closed.
            self._pump.wait_closed(index, _DRAIN_SECONDS)
            self._events.put(("gone", index, status))
            return
        self._alive.discard(index)
        sweep_shm()  # what a rank killed during start-up left in /dev/shm
        rank = self._units[index].ranks[0]
        if status != 0 or self._agent:  # its last words before what is said of it
            self._pump.wait_closed(index, _LAST_WORDS_SECONDS)
        if status != 0 and self._code is None and self._restart(index, rank, status):
            return
        self.statuses[rank] = status
        self._report(rank, status)
        self._judge(rank, status)

    def _on_rank(self, rank: int, status: int) -> None:
        self.statuses[rank] = status
        self._judge(rank, status)

    def _judge(self, rank: int, status: int) -> None:
        if status != 0 and self._code is None and not self._tolerate(rank, status):
            self._fail(rank, status)

    def _on_started(self, index: int, _) -> None:
        self._units[index].started = True

    def _on_gone(self, index: int, status: int) -> None:
        self._alive.discard(index)
        if status != 0 and self._code is None:
            self._lost(self._units[index], status)

    def _on_stop(self, *_) -> None:  # an agent's launcher is done with it
        if self._code is None:
            self._code = 128 + signal.SIGTERM
            self._stop_all()

    def _on_signal(self, signum: int, _) -> None:
        if self._code is not None:  # a second signal: no more waiting
            self._signal(signal.SIGKILL)
            self._deadline = None
            return
        self._code = 128 + signum  # the first SIGINT/SIGTERM/SIGHUP to the launcher
        verb = {signal.SIGINT: "interrupted", signal.SIGHUP: "hung up"}.get(
            signal.Signals(signum), "terminated")
        self.say(f"{verb}, stopping {count_ranks(self._running())}")
        self._stop_all(signal.SIGTERM if signum == signal.SIGHUP else signum)

    # ---- failures --------------------------------------------------------------------------------

    def _restart(self, index: int, rank: int, status: int) -> bool:
        """Starts a failed restartable rank again, as its new process (DDP_REJOIN=1)."""
        done = self._restarts.get(rank, 0)
        if rank not in self._restartable or done >= self._max_restarts:
            if rank in self._restartable:
                self.say(f"server rank {rank} {describe(status)}; it was restarted "
                         f"{done} times already (--max-restarts {self._max_restarts})")
            return False
        self._restarts[rank] = done + 1
        unit = self._units[index]
        host = f" on host {unit.host}" if unit.host else ""
        self.say(f"server rank {rank}{host} {describe(status)}; restarting it "
                 f"({done + 1} of {self._max_restarts}): it restores its checkpoint and rejoins")
        env = {**unit.env, REJOIN: "1"}
        try:
            proc = subprocess.Popen(unit.argv, env=env, start_new_session=True, bufsize=0,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
        except OSError as e:
            self.say(f"cannot restart server rank {rank}: {e.strerror or e}")
            return False
        unit.proc = proc
        self._alive.add(index)
        for stream, pipe, sink in ((0, proc.stdout, self._out), (1, proc.stderr, self._err)):
            threading.Thread(target=copy_lines,
                             args=(pipe, unit.prefix, sink, self._files, stream),
                             name=f"ddprun-output-{index}", daemon=True).start()
        self._watch(index, proc)
        return True

    def _tolerate(self, rank: int, status: int) -> bool:
        """A tolerated rank's failure: said, remembered for the exit status, nothing stopped."""
        if rank not in self._tolerated:
            return False
        if self._tolerated_code is None:
            self._tolerated_code = 128 - status if status < 0 else status
        if not self._agent:
            host = self._host_of.get(rank)
            self.say(f"worker rank {rank}{f' on host {host}' if host else ''} {describe(status)}"
                     f"; parameter-server mode: the others go on (the servers decide: async "
                     f"training continues, sync steps fail naming it unless "
                     f"DDP_PS_ON_WORKER_LOSS=continue)")
        return True

    def _running(self) -> int:
        return sum(len([r for r in self._units[i].ranks if r not in self.statuses])
                   for i in self._alive)

    def _fail(self, rank: int, status: int) -> None:
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
            self.say(f"rank {rank}{f' on host {host}' if host else ''} {describe(status)}"
                     f"{reason}")
            if self._running():
                if self.before_stop is not None:
                    self.before_stop(rank)
                self.say(f"stopping the other {count_ranks(self._running())}")
        self._stop_all()

    def _lost(self, unit: Unit, status: int) -> None:
        """An agent ended badly without a failing rank to show for it."""
        self._code = status if 0 < status < 256 else 1
        how = describe(status)
        if unit.started:
            self.say(f"lost host {unit.host} ({unit.describe()}): its agent {how}")
        else:
            self.say(f"cannot start {unit.describe()}: {shlex.join(unit.argv[:-2])} {unit.host} "
                     f"{how} (is the host up and reachable, with ddp installed at the same "
                     "path?)")
        if self._running():
            self.say(f"stopping the other {count_ranks(self._running())}")
        self._stop_all()
