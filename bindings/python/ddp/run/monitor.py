# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""What the ranks publish in ddprun's store while a job runs (libddp's monitor, DDP_MONITOR:
libddp/src/monitor.h), read back: each rank's status every second, and flight records on
request. `ddprun status`, `ddprun dump`, ddprun's metrics and its dump at a failure use it."""
from __future__ import annotations

import json
import time
from typing import Any

STATUS = "ddp/monitor/status/{rank}"
DUMP_COUNTER = "ddp/monitor/dump"
DUMP = "ddp/monitor/dump/{rank}"  # "<request number>\n<record>"
# How long a reader waits to see heartbeats move: the monitor speaks every second, so a rank
# that is merely slow (a loaded host) still speaks twice in this time.
BEAT_WAIT_SECONDS = 2.5


def _ddp():
    from ddp import _ddp as module  # lazy: ddp/run is loaded alone too (the agent)

    return module


def connect(addr: str, port: int, token: str, timeout: float = 5.0):
    return _ddp().StoreClient(addr, port, token, timeout)


class Fixed:
    """A static job's ranks: one store, the same ranks from start to end."""

    def __init__(self, addr: str, port: int, token: str, ranks: int, timeout: float = 5.0):
        self._client, self._ranks = connect(addr, port, token, timeout), ranks

    def current(self) -> tuple[Any, int, int]:
        """(the store the ranks publish in, how many ranks, the generation: -1, none)."""
        return self._client, self._ranks, -1


class NoRanks(RuntimeError):
    """An elastic job has no generation to show: none formed yet, or the job is ending."""


class Generations:
    """An elastic job's ranks: those of its newest generation. The driver's store says which
    generation that is (elastic/latest) and where its ranks met (its plan's port, a store of its
    own, where each rank's monitor publishes); followed as the job forms new ones."""

    def __init__(self, addr: str, port: int, token: str, timeout: float = 5.0):
        self._addr, self._token, self._timeout = addr, token, timeout
        self._driver = connect(addr, port, token, timeout)
        self._now: tuple[Any, int, int] | None = None

    def current(self) -> tuple[Any, int, int]:
        """As Fixed.current; NoRanks when there is no generation to show."""
        try:
            latest = int(bytes(self._driver.get("elastic/latest", 0.2)).decode())
        except Exception as e:  # absent (DEADLINE_EXCEEDED): none formed yet; else raised
            if "DEADLINE" not in str(e).upper():
                raise
            raise NoRanks("no generation formed yet (waiting for workers)") from None
        if self._now is None or self._now[2] != latest:
            plan = json.loads(bytes(self._driver.get(f"elastic/generation/{latest}",
                                                     self._timeout)))
            if plan.get("error"):
                raise NoRanks(f"the job is stopping: {plan['error']}")
            if plan.get("finished") or not plan.get("ranks") or not plan.get("port"):
                raise NoRanks("the job is finishing (its workers finished training)")
            self._now = (connect(self._addr, plan["port"], self._token, self._timeout),
                         len(plan["ranks"]), latest)
        return self._now


def source(job: dict, timeout: float = 5.0):
    """Where a job's ranks publish (a job's file, run/jobs.py): Fixed or Generations."""
    if job.get("elastic"):
        return Generations(job["addr"], job["port"], job["token"], timeout)
    return Fixed(job["addr"], job["port"], job["token"], job["np"], timeout)


def read(client, ranks: int, wait: float = 0.05) -> dict[int, dict | None]:
    """Each rank's last status (None: it has published none)."""
    out: dict[int, dict | None] = {}
    for rank in range(ranks):
        try:
            out[rank] = json.loads(bytes(client.get(STATUS.format(rank=rank), wait)))
        except Exception:  # noqa: BLE001 - absent (DEADLINE_EXCEEDED) or unreadable: no status
            out[rank] = None
    return out


def read_twice(ranks_of) -> tuple[dict, dict, int]:
    """Two reads BEAT_WAIT_SECONDS apart (of RANKS_OF, a Fixed or Generations): a rank whose
    heartbeat did not move has stopped speaking (stopped, hung outside libddp, or gone). Both of
    one generation (the second's, when the job formed a new one in between); its number too."""
    client, ranks, generation = ranks_of.current()
    first = read(client, ranks)
    time.sleep(BEAT_WAIT_SECONDS)
    client, ranks, now = ranks_of.current()
    if now != generation:
        first = read(client, ranks)
        time.sleep(BEAT_WAIT_SECONDS)
    return first, read(client, ranks), now


def silent(first: dict, second: dict) -> list[int]:
    """The ranks whose heartbeat stood still between two reads (or that never spoke), but for
    those whose last word was that they left."""
    return [r for r in second if second[r] is None or
            (first.get(r) is not None and first[r]["beat"] == second[r]["beat"] and
             not second[r].get("left"))]


def request_dump(client, ranks: int, timeout: float) -> tuple[dict[int, str], list[int]]:
    """Asks every rank for its flight record; the records (JSON text) that came within TIMEOUT,
    and the ranks that gave none."""
    n = client.add(DUMP_COUNTER, 1)
    deadline = time.monotonic() + timeout
    records: dict[int, str] = {}
    while len(records) < ranks and time.monotonic() < deadline:
        for rank in range(ranks):
            if rank in records:
                continue
            try:  # the rank's key holds its answer to the latest request it saw
                value = bytes(client.get(DUMP.format(rank=rank), 0.01)).decode()
            except Exception:  # noqa: BLE001 - not there yet
                continue
            number, _, record = value.partition("\n")
            if number == str(n):
                records[rank] = record
        if len(records) < ranks:
            time.sleep(0.1)
    return records, [r for r in range(ranks) if r not in records]


def _op(entry: dict[str, Any]) -> str:
    return f"{entry['kind']} '{entry['name']}' (#{entry['seq']})"


def _doing(status: dict | None) -> str:
    if status is None:
        return "no status yet (not started, or before ddp's init)"
    engine = status["engine"]
    flight = engine["in_flight"]
    if not flight:
        last = engine.get("last")
        return "idle" + (f"; last: {_op(last)}" if last else "")
    oldest = flight[0]
    more = engine["in_flight_count"] - 1
    what = ("waiting for the others to submit " if oldest["state"] == "scheduled"
            else "running ")
    return (f"{what}{_op(oldest)} for {oldest['age_seconds']:.1f} s"
            + (f" (+{more} more)" if more > 0 else ""))


def rank_list(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _wait(ranks: list[int]) -> str:
    return "waits" if len(ranks) == 1 else "wait"


def waiting(statuses: dict[int, dict | None], quiet: list[int]) -> list[str]:
    """Who waits for whom: the ranks with work in flight wait for the silent ones; otherwise, the
    ranks that submitted the oldest operation in flight wait for the members of its process set
    that did not."""
    busy = [r for r, s in statuses.items() if s and s["engine"]["in_flight"] and r not in quiet]
    if quiet and busy:
        return [f"{rank_list(busy)} {_wait(busy)} for {rank_list(quiet)}, which "
                f"{'does' if len(quiet) == 1 else 'do'} not answer (stopped, hung outside "
                "libddp, or gone)"]
    oldest = None
    for r in busy:
        head = statuses[r]["engine"]["in_flight"][0]  # type: ignore[index]
        if oldest is None or head["age_seconds"] > oldest["age_seconds"]:
            oldest = head
    if oldest is None:
        return []
    key = [oldest["process_set"], oldest["name"]]
    have = [r for r, s in statuses.items() if s and key in s["engine"]["in_flight_names"]]
    members = next((s["engine"]["sets"].get(str(key[0])) for s in statuses.values()
                    if s and str(key[0]) in s["engine"]["sets"]), list(statuses))
    lacking = [r for r in members if r not in have]
    if not lacking or oldest["state"] != "scheduled":
        return []
    return [f"{rank_list(have)} {_wait(have)} for {rank_list(lacking)} to submit {_op(oldest)}"]


def render(job: dict, first: dict, second: dict, generation: int = -1) -> list[str]:
    quiet = silent(first, second)
    started = time.strftime("%H:%M:%S", time.localtime(job["started"]))
    ranks = (f"elastic, generation {generation}: {len(second)} ranks" if generation >= 0
             else f"{job['np']} ranks")
    lines = [f"job {job['id']}: {' '.join(job['command'])} ({ranks}, started {started})",
             f"{'rank':>5}  {'host':<16} {'pid':>8}  doing"]
    errors = []
    for rank, status in sorted(second.items()):
        shown = status or first.get(rank)
        host = shown["host"] if shown else "-"
        pid = str(shown["pid"]) if shown else "-"
        doing = _doing(shown)
        if shown is not None and shown.get("left"):
            doing = "left the job (shut down); its last word: " + doing
        elif rank in quiet and shown is not None:
            age = time.time() - shown["time_ns"] / 1e9
            doing = f"NOT ANSWERING for {age:.1f} s; its last word: {doing}"
        lines.append(f"{rank:>5}  {host[:16]:<16} {pid:>8}  {doing}")
        if shown and shown["engine"].get("error"):
            errors.append(f"rank {rank}: {shown['engine']['error']}")
    lines += waiting(second, quiet) or ["nobody waits for anybody"]
    lines.append("last error: " + (errors[0] if errors else "none"))
    return lines
