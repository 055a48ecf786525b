# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""run(fn, args, num_proc, ...): a libddp job on the executors of the active Spark session, with
the API and semantics of Horovod's `horovod.spark.run`: fn runs once per rank, the results come
back in rank order, and a rank whose fn raises fails the job with the rank named.

Each rank is one task of a barrier stage (Spark starts them all at once or not at all). The
tasks tell each other their hosts through the barrier's allGather and each works out the same
ranks (run/cluster.py: a host's tasks together, as ddprun places ranks); the driver hosts the
rendezvous store; each task gets the environment ddprun would have set (`ddp.init()`,
`init_process_group("ddp")` and torch's env:// work inside fn). Spark starts a failed barrier
stage again as a whole (spark.stage.maxConsecutiveAttempts); run() fails once Spark gives up."""
from __future__ import annotations

import json
import pickle
import re
import socket
import sys
import time
from typing import Any, Callable

from pyspark import BarrierTaskContext, SparkContext, cloudpickle
from pyspark.sql import SparkSession

from .. import _ddp
from ..run.cluster import Member, describe, enter, environments, new_token, picklable
from ..run.static_job import start_store

_FAILED = re.compile(r"ddp\.spark\.run: (rank \d+ \(host [^)\n]*\)) failed: ([^\n]*)")
# Spark's words for a barrier task that ended without an exception of its own (its Python
# worker died): the task's partition, and the first line of the reason.
_LOST = re.compile(r"barrier task ResultTask\(\d+, (\d+)\) finished unsuccessfully\.\s*\n"
                   r"(?:[\w.$]+(?:Exception|Error): )?([^\n]*)")


def _context() -> SparkContext:
    session = SparkSession.getActiveSession()
    if session is None:
        raise ValueError("ddp.spark.run: no active SparkContext: make a SparkSession first")
    return session.sparkContext


# A rank whose collective failed because another rank failed (libddp's error names that rank)
# waits this long before failing its task: Spark reports the first task failure it hears, and
# the stage's failure should name the rank where it began, not one of those it stopped.
PEER_FAILURE_GRACE_SECONDS = 3.0


def _from_a_peer(error: BaseException) -> bool:
    """Whether ERROR is libddp's (Horovod API or torch backend): another rank's failure."""
    ddp = sys.modules.get("ddp")
    return (ddp is not None and isinstance(error, ddp.DDPError)) or \
        type(error).__name__ == "BackendError"


def _task(fn, args, kwargs, driver, rendezvous, token, extra):
    """What each barrier task runs: its place, its environment, then fn."""

    def task(_partition):
        ctx = BarrierTaskContext.get()
        everyone = [Member(*json.loads(m)) for m in ctx.allGather(json.dumps(describe(driver)))]
        env = environments(everyone, rendezvous, token)[ctx.partitionId()]
        enter(env, extra)
        rank, host = int(env["DDP_RANK"]), everyone[ctx.partitionId()].host
        try:
            _note_place(rendezvous, token, ctx.partitionId(), rank, host)
            result = fn(*args, **kwargs)
        except BaseException as e:  # re-raised naming the rank: Spark shows it
            if _from_a_peer(e):  # the rank whose failure made this one: Spark hears it first
                time.sleep(PEER_FAILURE_GRACE_SECONDS)
            raise RuntimeError(f"ddp.spark.run: rank {rank} (host {host}) failed: "
                               f"{type(e).__name__}: {e}") from e
        yield rank, pickle.dumps(result)

    return task


def _note_place(rendezvous, token, partition: int, rank: int, host: str) -> None:
    """Tells the driver which rank and host this task is, so that a task whose process dies
    (it can say nothing then) is named by them. A stage that Spark starts again writes its
    tasks' places over the last attempt's (a task that dies before it writes would be named as
    its partition's task was in that attempt: the same rank where the executors are the
    same)."""
    client = _ddp.StoreClient(rendezvous[0], rendezvous[1], token, 30.0)
    client.set(f"spark/partition/{partition}", json.dumps([rank, host]).encode())


def _place_of(rendezvous, token, partition: int) -> str:
    """"rank R (host H)" of a barrier task, from what it noted; its partition if it noted
    nothing (it died before it had a rank)."""
    try:
        client = _ddp.StoreClient(rendezvous[0], rendezvous[1], token, 5.0)
        rank, host = json.loads(client.get(f"spark/partition/{partition}", 1.0))
        return f"rank {rank} (host {host})"
    except Exception:  # noqa: BLE001 - it never said: named by its task
        return f"the task of partition {partition} (before it had a rank)"


# Horovod's options that mean nothing here: the ranks' output goes to the executors' logs, as
# Spark's tasks' does, and there is no mpirun.
_HOROVOD_ONLY = {"stdout", "stderr", "verbose", "nics", "prefix_output_with_timestamp",
                 "extra_mpi_args", "executable"}


def run(fn: Callable, args: tuple = (), kwargs: dict | None = None, num_proc: int | None = None,
        start_timeout: float | None = None, env: dict | None = None,
        **horovod_only: Any) -> list[Any]:
    """fn(*args, **kwargs) on num_proc ranks (default: the context's default parallelism); the
    results in rank order. start_timeout: seconds for the job's start-up (the rendezvous); env:
    more variables for the ranks. Horovod's stdout, stderr, verbose, nics,
    prefix_output_with_timestamp, extra_mpi_args and executable are accepted and have no
    effect."""
    unknown = sorted(set(horovod_only) - _HOROVOD_ONLY)
    if unknown:
        raise TypeError(f"ddp.spark.run: unexpected keyword argument(s) {', '.join(unknown)}")
    sc = _context()
    picklable("ddp.spark.run", cloudpickle.dumps, fn, args, kwargs)
    num_proc = num_proc or sc.defaultParallelism
    if num_proc < 1:
        raise ValueError(f"ddp.spark.run: num_proc must be at least 1, not {num_proc}")
    driver = sc.getConf().get("spark.driver.host") or socket.gethostname()
    driver_addr = socket.gethostbyname(driver)
    token = new_token()
    port, close = start_store(token, driver_addr)
    extra = dict(env or {})
    if start_timeout is not None:
        extra["DDP_START_TIMEOUT_SECONDS"] = str(start_timeout)
    task = _task(fn, tuple(args), dict(kwargs or {}), driver, (driver_addr, port), token, extra)
    try:
        pairs = sc.parallelize(range(num_proc), num_proc).barrier().mapPartitions(task).collect()
    except Exception as e:  # Py4J's error, with the failed rank in its text
        failed = _FAILED.search(str(e))
        if failed:
            raise RuntimeError(f"ddp.spark.run: {failed[1]} failed: {failed[2]}") from e
        lost = _LOST.search(str(e))
        if lost:
            where = _place_of((driver_addr, port), token, int(lost[1]))
            raise RuntimeError(f"ddp.spark.run: {where} was lost: {lost[2].strip()}") from e
        raise
    finally:
        close()
    return [pickle.loads(result) for _, result in sorted(pairs)]
