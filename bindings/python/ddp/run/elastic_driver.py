# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddprun's elastic mode: the driver of a job that goes on when workers fail, hosts leave or
hosts join (ddprun --min-np/--max-np/--host-discovery-script, as horovodrun's).

The driver starts a worker on every slot of the hosts it has (from the discovery script, polled
every second, or -H/--hostfile, or this machine), up to --max-np, and forms the job in
generations: a plan (each worker's rank, each rank's host) and a fresh rendezvous store for that
generation's ranks to meet at, published in the driver's own store (ddp/elastic.py reads it).

- A worker that fails (exits non-zero) is said, its host is left out of later starts (as
  Horovod's blacklist: for good, or for --blacklist-cooldown-range's while, run/blacklist.py),
  and the driver forms a generation of the others; they learn of the failure from libddp (a
  DDPError naming it), put their state back to the last commit and join.
- A worker whose peers name it as their failure's cause while its process lives on (its host cut
  off, the process frozen: an exit that comes late or never) is stopped and handled as failed:
  the workers report the ranks their error blames to the driver's store.
- With --max-restarts N, a failed worker is replaced instead (N times in the job, torchrun's
  flag): a new worker starts on its slot at once, the others go on in a generation without it,
  and once the new one has reached init() a generation is formed with it, which the running
  workers join at their next commit (as added hosts'), so no one waits for a process starting.
- A host the script no longer lists has its workers stopped, and a generation is formed without
  them.
- A host that appears gets workers (up to --max-np) and a generation is formed with them; the
  running workers join it at their next commit (the update counter).
- Fewer than --min-np workers: the driver waits up to --elastic-timeout for hosts, then stops.
- The job is over when its workers have ended: with status 0 if none failed after the first
  finished (a worker that returns ends the job for all: the others finish too).
"""
from __future__ import annotations

import json
import os
import queue
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from typing import Any

from .agent import remote_command
from .blacklist import Blacklist
from .discovery import DISCOVERY_SECONDS, discover
from .env import decimal, forwarded_env, server_command, worker_env
from .hosts import LOOPBACK, address_toward, is_local
from .job import GRACE_SECONDS
from .observe import Observers
from .output import copy_lines
from .procs import alive, describe, sweep_shm

# How long a superseded generation's store stays open (Driver.form says why).
RETIRE_SECONDS = 5.0
# How long after a worker ends the driver waits for others to end with it (Driver._next_event).
SETTLE_SECONDS = 0.25
# How often the driver looks whether a replacement has reached init() (Driver._admit).
ADMIT_SECONDS = 0.1
# How often it reads the workers' reports of a failed generation (Driver._judge).
REPORT_SECONDS = 0.25


def elastic_worker_env(base: Mapping[str, str], args: Any, addr: str, token: str,
                       store_port: int, worker_id: str, host: str) -> dict:
    """The environment of an elastic worker: the job's settings, no place (each generation
    gives it one), and where the driver publishes the generations (the "ddprun-elastic" rows
    of libddp/src/rank_environment.tsv)."""
    env = worker_env(base, args, addr, token)
    env.update(DDP_ELASTIC="1", DDP_ELASTIC_ID=worker_id, DDP_ELASTIC_PORT=str(store_port),
               # Longer than the driver's own wait: the driver decides, and says so.
               DDP_ELASTIC_TIMEOUT=decimal(args.elastic_timeout + 30))
    if args.host_discovery_script or args.host_list:
        env["DDP_HOSTNAME"] = host
    # A new worker waits in its first generation's start-up for the running ones to reach
    # their next commit: as long as the driver waits for hosts, unless the user said.
    if args.start_timeout is None and "DDP_START_TIMEOUT_SECONDS" not in base:
        env["DDP_START_TIMEOUT_SECONDS"] = decimal(args.elastic_timeout)
    timeline = args.timeline_filename
    if timeline:
        env["DDP_TIMELINE"] = timeline.replace("{rank}", worker_id.replace(":", "-"))
    return env


class Worker:
    """One worker process: on a slot of a host, started here or through an agent there."""

    def __init__(self, wid: str, host: str, slot: int, serial: int):
        self.id, self.host, self.slot, self.serial = wid, host, slot, serial
        self.proc: subprocess.Popen | None = None
        self.remote = False
        self.rank: int | None = None  # in the newest generation that has it
        self.status: int | None = None  # its exit status once it ended
        self.stopping = False  # the driver asked it to stop (its host left, or the job ended)
        # A replacement (--max-restarts) until it reaches init(): in no generation before then,
        # so the running workers never wait for a process still starting.
        self.joining = False

    def describe(self) -> str:
        rank = f"rank {self.rank}, " if self.rank is not None else ""
        return f"worker {self.id} ({rank}host {self.host})"


def _workers(count: int) -> str:
    return f"{count} worker" if count == 1 else f"{count} workers"


class Driver:
    """The elastic job's driver for ddprun: its workers are processes, here or through an agent
    on their host; ddp.ray's RayDriver runs the same job with Ray's actors on Ray's nodes."""

    PREFIX = "ddprun: elastic"  # what its lines begin with
    WORKER: type[Worker] = Worker  # what it makes of each worker (a subclass may add to it)
    # The settings as its user gives them, in what it says.
    FLAGS = {"min_np": "--min-np", "elastic_timeout": "--elastic-timeout",
             "reset_limit": "--reset-limit", "max_restarts": "--max-restarts"}

    def __init__(self, args, out, err, token: str):
        self.args, self.out, self.err, self.token = args, out, err, token
        self.events: queue.SimpleQueue = queue.SimpleQueue()
        self.workers: dict[str, Worker] = {}
        self.hosts: dict[str, int] = {}  # the hosts there are now, in order, with their slots
        self.blacklist = Blacklist(getattr(args, "cooldown_range", None))
        self.local_hosts: set[str] = set()
        self.serial = 0
        self.generation = -1
        self.updates = 0
        self.resets = 0
        self.restarts = 0  # replacements started for failed workers (--max-restarts)
        self.reports = 0  # the workers' failure reports of the newest generation, read so far
        self.finishing = False  # a worker returned: the job is ending, no more generations
        self.code: int | None = None  # the job's exit status once decided
        self.failure_code: int | None = None  # of a failure after the job began to end
        self.last_failure: int | None = None  # the status of the last failed worker
        self.servers: dict[int, Any] = {}  # generation -> its rendezvous store (_ddp's)
        self.retiring: list[tuple[float, Any]] = []  # (when to close, a superseded store)
        self.bind, self.addr = LOOPBACK, LOOPBACK
        self.short_since: float | None = None  # when the workers fell below --min-np
        self.short_why = ""  # the failure (or leaving) that took them below it
        self.observers: Any = None  # ddprun's (run/observe.py); a subclass (Ray's) has none
        self.store: Any = None  # the driver's own store (_ddp.StoreServer) and its client
        self.client: Any = None

    # ---- saying -----------------------------------------------------------------------------

    def say(self, message: str) -> None:
        self.err.write([f"{self.PREFIX}: {message}\n".encode()])

    def ended(self, worker: Worker, status: int) -> str:
        """How WORKER ended, as a sentence's end ("exited with status 3")."""
        return describe(status)

    # ---- hosts ------------------------------------------------------------------------------

    def discover(self) -> dict[str, int] | None:
        """The hosts there are now; None when the script failed (said; the last answer holds)."""
        if not self.args.host_discovery_script:
            return dict(self.hosts)
        return discover(self.args.host_discovery_script, self.args.slots or 1, self.say)

    def _note_host(self, host: str) -> None:
        if host in self.local_hosts or is_local(host):
            self.local_hosts.add(host)
        elif self.addr == LOOPBACK:  # the first other host: the address they reach us at
            self.addr = self.args.rendezvous_addr or address_toward(host)

    def running(self) -> list[Worker]:
        return [w for w in self.workers.values() if w.status is None]

    def occupying(self) -> list[Worker]:
        """The workers that hold a slot: running and not being stopped."""
        return [w for w in self.running() if not w.stopping]

    def members(self) -> list[Worker]:
        """The workers a generation is formed of: holding a slot, and not a replacement still
        starting."""
        return [w for w in self.occupying() if not w.joining]

    def fill(self) -> list[Worker]:
        """Starts workers on the free slots of usable hosts, up to --max-np; returns them."""
        started: list[Worker] = []
        limit = self.args.max_np
        for host, slots in self.hosts.items():
            if host in self.blacklist:
                continue
            used = {w.slot for w in self.occupying() if w.host == host}
            for slot in range(slots):
                if limit is not None and len(self.occupying()) >= limit:
                    return started
                if slot in used:
                    continue
                worker = self.start(host, slot)
                if worker is None:
                    return started
                started.append(worker)
        return started

    # ---- processes ----------------------------------------------------------------------------

    def _env(self, worker: Worker, base: Mapping[str, str]) -> dict:
        return elastic_worker_env(base, self.args, self.addr, self.token, self.store.port,
                                  worker.id, worker.host)

    def new_worker(self, host: str, slot: int) -> Worker:
        """A worker for SLOT of HOST, not yet started: its id names the slot (and how many
        workers that slot had before)."""
        self._note_host(host)
        self.serial += 1
        uses = sum(1 for w in self.workers.values() if w.host == host and w.slot == slot)
        return self.WORKER(f"{host}:{slot}" + (f".{uses}" if uses else ""), host, slot,
                           self.serial)

    def start(self, host: str, slot: int) -> Worker | None:
        worker = self.new_worker(host, slot)
        wid = worker.id
        prefix = f"[{wid}] ".encode()
        remote = host not in self.local_hosts
        try:
            if remote:
                spec = {"host": host, "cwd": os.getcwd(), "command": self.args.command,
                        "server_command": server_command(), "first_server": 1 << 30,
                        "ranks": {str(slot): self._env(worker, forwarded_env())}}
                proc = subprocess.Popen(remote_command(self.args, host),
                                        start_new_session=True, bufsize=0,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE)
                try:
                    assert proc.stdin is not None  # stdin=PIPE
                    proc.stdin.write(json.dumps(spec).encode() + b"\n")
                    proc.stdin.flush()
                except OSError:
                    pass  # it ended at once; its exit says why
                prefix = b""  # the agent prefixes its rank's lines ("[host:slot] ")
            else:
                proc = subprocess.Popen(self.args.command, env=self._env(worker, os.environ),
                                        start_new_session=True, bufsize=0,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE)
        except OSError as e:
            self.say(f"cannot start a worker on {host}: {self.args.command[0]}: "
                     f"{e.strerror or e}")
            self.blacklist.add(host)
            return None
        worker.proc, worker.remote = proc, remote
        self.workers[wid] = worker
        for pipe, sink in ((proc.stdout, self.out), (proc.stderr, self.err)):
            threading.Thread(target=copy_lines, args=(pipe, prefix, sink), daemon=True,
                             name=f"ddprun-output-{wid}").start()
        threading.Thread(target=lambda: self.events.put(("exit", wid, proc.wait())),
                         name=f"ddprun-wait-{wid}", daemon=True).start()
        return worker

    def stop(self, worker: Worker, signum: int = signal.SIGTERM) -> None:
        worker.stopping = True
        proc = worker.proc
        if proc is None or worker.status is not None:
            return
        if worker.remote and signum != signal.SIGKILL:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()  # the agent stops its rank
            except OSError:
                pass
            return
        try:
            os.killpg(proc.pid, signum)
            if signum != signal.SIGKILL:
                os.killpg(proc.pid, signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            pass

    # ---- generations ----------------------------------------------------------------------------

    def form(self, why: str) -> bool:
        """Publishes a generation of the members; False (and the job stops) past --reset-limit."""
        members = self.members()
        if self.generation >= 0:
            self.resets += 1
            limit = self.args.reset_limit
            if limit is not None and self.resets > limit:
                self.end(f"{why}, and the job was reset {limit} times already "
                         f"({self.FLAGS['reset_limit']})")
                return False
        order = {h: i for i, h in enumerate(self.hosts)}
        # Rank 0 is a worker that has the state (the lowest rank of the last generation), so that
        # sync() brings the new ones up to date; the others by host, then slot.
        veterans = sorted((w for w in members if w.rank is not None), key=lambda w: w.rank or 0)
        first = veterans[:1]
        rest = sorted((w for w in members if w not in first),
                      key=lambda w: (order.get(w.host, len(order)), w.host, w.slot, w.serial))
        ranked = first + rest
        server = _ddp().StoreServer(self.bind, 0, self.token)
        self.generation += 1
        self.reports = 0
        for rank, worker in enumerate(ranked):
            worker.rank = rank
        plan = {"generation": self.generation, "port": server.port,
                "ranks": {w.id: w.rank for w in ranked}, "hosts": [w.host for w in ranked],
                "updates": self.updates}
        self.servers[self.generation] = server
        self.client.set(f"elastic/generation/{self.generation}", json.dumps(plan).encode())
        self.client.set("elastic/latest", str(self.generation).encode())
        # The last generation's store is done with: its ranks met long ago, or (one of them died
        # as they met) they fail when it closes instead of waiting out the start timeout, and
        # join this. It closes a few seconds from now, not at once: a worker that read the
        # last generation's plan just before this one was published is connecting to it, and a
        # closed port would have it retry until its start timeout; a store that closes while
        # it waits there fails it at once.
        for old in [g for g in self.servers if g < self.generation]:
            self.retiring.append((time.monotonic() + RETIRE_SECONDS, self.servers.pop(old)))
        self.say(f"generation {self.generation}: {_workers(len(ranked))} ({why})" +
                 ("" if not self.args.verbose else ": " +
                  ", ".join(f"{w.id}={w.rank}" for w in ranked)))
        return True

    def end(self, reason: str) -> None:
        """The job cannot go on: said, the workers stopped, and waiting workers told why."""
        if self.code is None:
            self.code = self.last_failure or 1
        self.say(f"stopping the job: {reason}")
        error = {"generation": self.generation + 1, "error": reason, "ranks": {}, "hosts": [],
                 "port": 0, "updates": self.updates}
        try:
            self.client.set(f"elastic/generation/{self.generation + 1}", json.dumps(error).encode())
            self.client.set("elastic/latest", str(self.generation + 1).encode())
        except Exception:  # noqa: BLE001 - the store is ours; nothing more to tell then
            pass
        self.generation += 1
        for worker in self.running():
            self.stop(worker)

    # ---- the loop -------------------------------------------------------------------------------

    def run(self) -> int:
        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                handlers[signum] = signal.signal(
                    signum, lambda s, _: self.events.put(("signal", s, None)))
        try:
            return self._run()
        finally:
            for signum, handler in handlers.items():  # None: not set from Python (the default)
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
            for server in self.servers.values():
                server.close()
            self._retire(everything=True)
            if self.store is not None:
                self.store.close()

    def _run(self) -> int:
        self._first_hosts()
        self.store = _ddp().StoreServer(self.bind, 0, self.token)
        self.client = _ddp().StoreClient(LOOPBACK, self.store.port, self.token, 30.0)
        self.client.add("elastic/updates", 0)
        if self.observers is not None:  # ddprun status, dump and metrics follow the generations
            self.observers.start_elastic(self.addr, self.store.port, self.token)
        code = self._wait_to_start()
        if code is not None:
            return code
        self.fill()
        if len(self.members()) < self.args.min_np:
            self.end(f"{_workers(len(self.members()))} started, fewer than "
                     f"{self.FLAGS['min_np']} {self.args.min_np}")
        else:
            self.form("the start")
        self._supervise()
        if self.code is not None:
            return self.code
        if not self.finishing:  # every worker ended, none by finishing training
            self.say("no worker is left")
            return self.last_failure or 1
        return self.failure_code or 0

    def _first_hosts(self) -> None:
        """The hosts to start with, and where the store listens for them."""
        args = self.args
        if args.host_discovery_script:
            found = self.discover()
            self.hosts = found or {}
            self.bind = "0.0.0.0"  # hosts may come from anywhere later
        elif args.host_list:
            self.hosts = {}
            for h in args.host_list:
                self.hosts[h.name] = self.hosts.get(h.name, 0) + h.slots
        else:
            self.hosts = {"localhost": args.max_np or args.np}
        for host in self.hosts:
            self._note_host(host)
        if self.addr != LOOPBACK:
            self.bind = "0.0.0.0"

    def _wait_to_start(self) -> int | None:
        """Waits until -np workers can run (Horovod's rule), for hosts up to the timeout;
        returns the exit status when the job ends before it starts."""
        args = self.args
        waited_from = time.monotonic()
        next_discovery = time.monotonic()
        while True:
            free = sum(s for h, s in self.hosts.items() if h not in self.blacklist)
            if args.max_np is not None:
                free = min(free, args.max_np)
            if free >= args.np:
                return None
            if time.monotonic() - waited_from > args.elastic_timeout:
                self.say(f"{free} slots within {self.FLAGS['elastic_timeout']} "
                         f"{args.elastic_timeout:g} s, "
                         f"fewer than the {args.np} needed to start")
                return 1
            kind = self._next_event(next_discovery)
            if kind == "signal":
                return self.code
            if time.monotonic() >= next_discovery:
                next_discovery = time.monotonic() + DISCOVERY_SECONDS
                found = self.discover()
                if found is not None:
                    self.hosts = found

    def _supervise(self) -> None:
        """Until every worker has ended, and while none runs, for as long as hosts may still
        come: events, discovery, and the grace of workers asked to stop."""
        next_discovery = time.monotonic() + DISCOVERY_SECONDS
        grace_until = None
        while self.running() or (self.code is None and not self.finishing and
                                 self.short_since is not None):
            timeout_at = next_discovery if grace_until is None else min(next_discovery,
                                                                        grace_until)
            timeout_at = min(timeout_at, time.monotonic() + (
                ADMIT_SECONDS if self._joining() else REPORT_SECONDS))
            kind = self._next_event(timeout_at)
            self._retire()
            self._admit()
            self._judge()
            if grace_until is not None and time.monotonic() >= grace_until:
                for worker in self.running():
                    self.stop(worker, signal.SIGKILL)
                grace_until = None
            if kind == "signal" and grace_until is None:
                grace_until = time.monotonic() + GRACE_SECONDS
                continue
            if time.monotonic() >= next_discovery:
                next_discovery = time.monotonic() + DISCOVERY_SECONDS
                if self.code is None and not self.finishing:
                    self._rediscover()
            if self.code is None and not self.finishing and self.short_since is not None:
                self._wait_for_hosts()
            if self.code is not None and grace_until is None and self.running():
                grace_until = time.monotonic() + GRACE_SECONDS

    def _next_event(self, until: float) -> str | None:
        """Handles the events that come before UNTIL; returns the kind of the last one. Workers
        that end within SETTLE_SECONDS of each other (a lost host takes all of its workers) are
        handled together: one generation is formed without all of them, not one per worker
        (whose store would keep the survivors waiting for a worker already gone)."""
        try:
            batch = [self.events.get(timeout=max(0.0, until - time.monotonic()))]
        except queue.Empty:
            return None
        settle = time.monotonic() + SETTLE_SECONDS
        while batch[-1][0] == "exit":
            try:
                batch.append(self.events.get(timeout=max(0.0, settle - time.monotonic())))
            except queue.Empty:
                break
        failures = []
        for kind, first, second in batch:
            if kind == "exit":
                failure = self._exited(self.workers[first], second)
                if failure:
                    failures.append(failure)
            elif kind == "signal":
                self._signalled(first)
        if failures and self.code is None and not self.finishing:
            more = len(failures) - 1
            self._reform(failures[0] + (f", and {_workers(more)} more" if more else ""))
        return batch[-1][0]

    def _signalled(self, signum: int) -> None:
        if self.code is None:
            self.code = 128 + signum
            verb = {int(signal.SIGINT): "interrupted", int(signal.SIGHUP): "hung up"}.get(
                signum, "terminated")
            self.say(f"{verb}, stopping {_workers(len(self.running()))}")
            for worker in self.running():
                self.stop(worker, signal.SIGTERM if signum == signal.SIGHUP else signum)
        else:
            for worker in self.running():
                self.stop(worker, signal.SIGKILL)

    def _exited(self, worker: Worker, status: int) -> str | None:
        """Notes how WORKER ended; returns the failure a new generation is to be formed for."""
        worker.status = status
        sweep_shm()
        if status == 0:
            if not self.finishing:
                self.finishing = True
                self._finish(worker)
            return None
        if worker.stopping or self.code is not None:
            return None  # the driver stopped it
        self.last_failure = 128 - status if status < 0 else status
        if self.finishing:
            self.failure_code = self.failure_code or self.last_failure
            self.say(f"{worker.describe()} {self.ended(worker, status)} after the job began "
                     "to end")
            return None
        ended = self.ended(worker, status) + (" before it joined the job" if worker.joining
                                              else "")
        self._handle_failed(worker, ended)
        if worker.joining:
            return None  # in no generation: no one waits for it
        return f"{worker.describe()} {ended}"

    def _handle_failed(self, worker: Worker, ended: str) -> None:
        """A failed worker is replaced (--max-restarts) or its host left out (the blacklist)."""
        if self.restarts < (getattr(self.args, "max_restarts", None) or 0):
            self._replace(worker, ended)
        else:
            cooldown = self.blacklist.add(worker.host)
            self.say(f"{worker.describe()} {ended}; host {worker.host} gets no new workers" +
                     ("" if cooldown is None else f" for {cooldown:.1f} s"))

    def _replace(self, worker: Worker, ended: str) -> None:
        """Starts a worker on the failed one's slot (--max-restarts): it joins the job once it
        has reached init() (_admit), the running ones at their next commit."""
        self.restarts += 1
        self.say(f"{worker.describe()} {ended}; starting a replacement on its slot (restart "
                 f"{self.restarts} of {self.args.max_restarts}, {self.FLAGS['max_restarts']})")
        replacement = self.start(worker.host, worker.slot)
        if replacement is not None:
            replacement.joining = True

    def _judge(self) -> None:
        """Reads the newest generation's failure reports (ddp/_generations.py, report): a worker
        its peers name as the cause whose process lives on (a host cut off, a frozen process,
        whose exit would come late or never) is stopped and the generation formed without it,
        as for a failure; one that has exited is left to its exit's event."""
        if self.client is None or self.code is not None or self.finishing or \
                self.generation < 0:
            return
        generation = self.generation
        reports = self.client.add(f"elastic/reports/{generation}", 0)
        if reports <= self.reports:
            return
        self.reports = reports
        culprits = [w for w in self.members() if w.rank is not None and
                    w.proc is not None and alive(w.proc.pid) and
                    self.client.add(f"elastic/blamed/{generation}/{w.rank}", 0) > 0]
        for worker in culprits:
            self.stop(worker)  # a remote one through its agent, which stops its rank
            ended = f"was named by its peers as the cause of generation {generation}'s failure"
            self.last_failure = self.last_failure or 1
            self._handle_failed(worker, ended)
        if culprits:
            more = len(culprits) - 1
            self._reform(f"{culprits[0].describe()} stopped" +
                         (f", and {_workers(more)} more" if more else ""))

    def _joining(self) -> list[Worker]:
        return [w for w in self.occupying() if w.joining]

    def _admit(self) -> None:
        """Replacements that have reached init() (their "elastic/ready/ID" key) join: a
        generation is formed with them, which the running workers join at their next commit
        (as added hosts'), or, while the job is short of --min-np, _wait_for_hosts forms it."""
        ready = [w for w in self._joining() if self.client.add(f"elastic/ready/{w.id}", 0) > 0]
        for worker in ready:
            worker.joining = False
        if not ready or self.code is not None or self.finishing or self.short_since is not None:
            return
        names = ", ".join(w.id for w in ready)
        self._form_for_running(f"{len(ready)} replacement{'s' if len(ready) > 1 else ''} "
                               f"ready: {names}")

    def _form_for_running(self, why: str) -> None:
        """A generation with newcomers, which the running workers join at their next commit
        (the update counter they read there)."""
        self.updates += 1
        if self.form(why):
            self.client.add("elastic/updates", 1)

    def _finish(self, worker: Worker) -> None:
        """A worker returned: training is over. The workers of its generation finish too; one
        still waiting for a generation (started for one its peers never joined) is told to
        leave, and the newest generation's store closes, so no one waits for the finished."""
        if self.args.verbose:
            self.say(f"{worker.describe()} finished: the job is ending")
        done = {"generation": self.generation + 1, "finished": True, "ranks": {}, "hosts": [],
                "port": 0, "updates": self.updates}
        self.client.set(f"elastic/generation/{self.generation + 1}", json.dumps(done).encode())
        self.client.set("elastic/latest", str(self.generation + 1).encode())
        self.generation += 1
        for old in list(self.servers):
            self.servers.pop(old).close()
        self._retire(everything=True)

    def _retire(self, everything: bool = False) -> None:
        """Closes the superseded stores whose time has come (all of them: EVERYTHING)."""
        now = time.monotonic()
        for entry in [e for e in self.retiring if everything or e[0] <= now]:
            self.retiring.remove(entry)
            entry[1].close()

    def _reform(self, why: str) -> None:
        if len(self.members()) >= self.args.min_np:
            self.short_since = None
            self.form(why)
            return
        if self.short_since is None:
            self.short_since = time.monotonic()
            self.short_why = why
            self.say(f"{_workers(len(self.members()))} left, fewer than "
                     f"{self.FLAGS['min_np']} {self.args.min_np}: waiting up to "
                     f"{self.args.elastic_timeout:g} s ({self.FLAGS['elastic_timeout']}) "
                     f"for {'replacements' if self._joining() else 'hosts'}")
            # What the script gives now may already do.
            self.fill()
            if len(self.members()) >= self.args.min_np:
                self.short_since = None
                self.form(why)

    def _wait_for_hosts(self) -> None:
        self.fill()
        if len(self.members()) >= self.args.min_np:
            self.short_since = None
            self.form(f"{self.FLAGS['min_np']} {self.args.min_np} reached again")
        elif self.short_since is not None and \
                time.monotonic() - self.short_since > self.args.elastic_timeout:
            self.end(f"{_workers(len(self.members()))} for {self.args.elastic_timeout:g} s "
                     f"({self.FLAGS['elastic_timeout']}), fewer than {self.FLAGS['min_np']} "
                     f"{self.args.min_np}, since {self.short_why}")

    def _rediscover(self) -> None:
        found = self.discover()
        back = self.blacklist.returned()
        for host in back:
            self.say(f"host {host} may get workers again (its cooldown is over)")
        removed: list[Worker] = []
        if found is not None and found != self.hosts:
            gone = [h for h in self.hosts if h not in found]
            shrunk = {h: s for h, s in found.items() if h in self.hosts and s < self.hosts[h]}
            self.hosts = found
            removed = [w for w in self.members()
                       if w.host in gone or (w.host in shrunk and w.slot >= shrunk[w.host])]
            for worker in removed:
                self.say(f"host {worker.host} left: stopping {worker.describe()}")
                self.stop(worker)
        elif not back:
            return
        if self.short_since is not None:
            return  # _wait_for_hosts fills and forms
        added = self.fill()
        if added:
            names = sorted({w.host for w in added})
            self._form_for_running(f"{len(added)} new on {', '.join(names)}")
        elif removed:
            self._reform(f"{len(removed)} stopped as their host left")


def _ddp():
    from ddp import _ddp as module  # lazy: ddp/run is loaded alone too (the agent)

    return module


def main(args, out, err, token: str) -> int:
    driver = Driver(args, out, err, token)
    try:
        driver.observers = Observers(args, driver.say)  # a port in use: before any worker
    except OSError as e:
        driver.say(str(e))
        return 2
    if args.verbose:
        driver.say(f"min {args.min_np}, max {args.max_np or 'unbounded'}, start with {args.np}; "
                   f"{shlex.join(args.command)}")
    code = 1
    try:
        code = driver.run()
    finally:
        driver.observers.end(code)
    return code
