# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Elastic mode on Ray: `RayExecutor(settings, min_workers=2, max_workers=8).run(train)` (or
Horovod's older `ElasticRayExecutor`), a job that goes on as Ray's nodes come and go.

It is ddprun's elastic driver (run/elastic_driver.py: generations, the blacklist, --min-np's wait,
the reset limit), with Ray's nodes for hosts and Ray's actors for worker processes:

- The hosts are the cluster's live nodes (`ray.nodes()`, asked every second), each with as many
  slots as it has room for workers (its CPUs over cpus_per_worker; its GPUs over gpus_per_worker
  with use_gpu). A node is named by its host name and the start of its Ray node ID
  ("node-2/3f2a9c1b"): a node that comes back is a new node (Ray gives it a new ID), so the
  blacklist of a failed node never keeps its successor out; with cooldown_range a node where a
  worker failed gets workers again after its cooldown (run/blacklist.py).
- A worker is an actor pinned to its node (NodeAffinitySchedulingStrategy, not soft) running the
  user's function in the environment ddprun gives an elastic worker: the function calls
  `ddp.init()` and wraps its loop in `ddp.elastic.run` / `ddp.torch.elastic.run` as under
  ddprun; within a node its ranks meet over shared memory, across nodes over TCP.
- A worker whose function raises fails as a process that exits non-zero does (its node gets no
  new workers; the others go back to their last commit in a generation without it); one whose
  actor dies (its node lost, its process killed) is said as lost, with Ray's reason; a node that
  leaves the cluster has its workers stopped; a node that joins gets workers, up to
  max_workers, who join at the running workers' next commit.
- `run` returns what the workers returned, in the rank order of the last generation each was in
  (a worker started as training ended leaves without joining and gives nothing); it raises
  when the job ends in failure, saying why and naming the first failure.
- A worker whose actor its node does not start within placement_group_timeout_s (the node's
  slots are counted from its total resources, as Horovod counts them; other work may hold
  them) fails as a worker that could not start.

Ray learns that a node is gone from its health checks (by default about 15-30 s after it stops
answering); the surviving ranks learn it from libddp at once and wait, at their last commit, for
the generation without it.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any, Callable

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..run.cluster import enter, job_settings, new_token
from ..run.elastic_driver import Driver, Worker, elastic_worker_env
from ..run.output import Sink

_LEFT = "left"  # what a worker's function gives when the job finished before it could join


@ray.remote(max_restarts=0)
class _ElasticWorker:
    """One elastic worker: the user's function in an elastic worker's environment."""

    def ready(self) -> bool:
        return True

    def run(self, env: dict, extra: dict, fn: Callable, args, kwargs) -> tuple[str, Any]:
        enter(env, extra)
        try:
            return "returned", fn(*args, **kwargs)
        except SystemExit as e:  # ddp.elastic: the job finished before this worker joined
            if e.code in (0, None):
                return _LEFT, None
            raise


def _lost(error: Exception) -> str:
    """Ray's reason for an actor's death, in a clause: "its node has died"."""
    text = " ".join(str(error).split())
    if "because " in text:  # ActorDiedError: "... The actor is dead because its node has died."
        return text[text.index("because ") + 8:].split(". ")[0]
    if "RpcError: " in text:  # ActorUnavailableError: its process no longer answers
        return f"its process stopped answering ({text.rsplit('RpcError: ', 1)[1]})"
    return text.split(". ")[0]


class RayWorker(Worker):
    def __init__(self, wid: str, host: str, slot: int, serial: int):
        super().__init__(wid, host, slot, serial)
        self.actor: Any = None
        self.result: Any = None
        self.returned = False  # its function returned (not: left without joining)
        self.placed = False  # its actor started on its node
        self.why = ""  # how it ended, when it failed


class RayDriver(Driver):
    """The elastic driver with Ray's live nodes for hosts and actors for processes."""

    PREFIX = "ddp.ray: elastic"
    WORKER = RayWorker
    FLAGS = {"min_np": "min_workers", "elastic_timeout": "elastic_timeout",
             "reset_limit": "reset_limit"}

    def __init__(self, args, err, fn: Callable, fn_args, fn_kwargs, extra_env: dict,
                 resources: dict, placement_timeout: float = 100.0):
        super().__init__(args, None, err, new_token())
        self.placement_timeout = placement_timeout
        self.first_failure = ""  # the first worker's failure, for run()'s error
        self.fn, self.fn_args, self.fn_kwargs = fn, fn_args, fn_kwargs
        self.extra_env, self.resources = extra_env, resources
        self.driver_node = ray.get_runtime_context().get_node_id()  # where this driver runs
        self.names: dict[str, str] = {}  # Ray node ID -> its name here (a host of the driver's)
        self.node_of: dict[str, str] = {}  # and back
        self.last_said = ""

    def say(self, message: str) -> None:
        self.last_said = message
        super().say(message)

    # ---- hosts: Ray's live nodes -------------------------------------------------------------

    def _slots(self, resources: dict) -> int:
        counts = [int(resources.get(name, 0) // amount)
                  for name, amount in self.resources.items() if amount > 0]
        return max(0, min(counts)) if counts else 0

    def discover(self) -> dict[str, int] | None:
        try:
            nodes = ray.nodes()
        except Exception as e:  # noqa: BLE001 - said; the last answer holds
            self.say(f"cannot list Ray's nodes: {e}")
            return None
        found: dict[str, int] = {}
        for node in nodes:
            if not node.get("Alive"):
                continue
            node_id = node["NodeID"]
            name = self.names.get(node_id)
            if name is None:
                name = f"{node.get('NodeManagerHostname') or node['NodeManagerAddress']}/" \
                       f"{node_id[:8]}"
                self.names[node_id], self.node_of[name] = name, node_id
            slots = self._slots(node.get("Resources", {}))
            if slots:
                found[name] = slots
        # The hosts seen before keep their order (ranks go by it); new ones come after, the
        # driver's own node first (rank 0 where the driver is, as under ddprun), then by name.
        ordered = {h: found[h] for h in self.hosts if h in found}
        new = sorted((h for h in found if h not in ordered),
                     key=lambda h: (self.node_of[h] != self.driver_node, h))
        ordered.update((h, found[h]) for h in new)
        return ordered

    def _first_hosts(self) -> None:
        self.hosts = self.discover() or {}
        self.bind = "0.0.0.0"  # the workers reach the driver's stores from their nodes
        self.addr = ray.util.get_node_ip_address()

    def _note_host(self, host: str) -> None:
        """Every worker is an actor: none is started as a local process."""

    # ---- workers: actors -----------------------------------------------------------------------

    def start(self, host: str, slot: int) -> Worker | None:
        worker = self.new_worker(host, slot)
        assert isinstance(worker, RayWorker)
        env = elastic_worker_env({}, self.args, self.addr, self.token, self.store.port,
                                 worker.id, host)
        env["DDP_HOSTNAME"] = host  # what libddp groups ranks by: one node, one host
        strategy = NodeAffinitySchedulingStrategy(self.node_of[host], soft=False)
        worker.actor = _ElasticWorker.options(
            num_cpus=self.resources.get("CPU", 0), num_gpus=self.resources.get("GPU", 0),
            scheduling_strategy=strategy).remote()
        ready = worker.actor.ready.remote()
        ref = worker.actor.run.remote(env, self.extra_env, self.fn, self.fn_args,
                                      self.fn_kwargs)
        self.workers[worker.id] = worker
        threading.Thread(target=self._wait, args=(worker, ref, ready), daemon=True,
                         name=f"ddp-ray-wait-{worker.id}").start()
        return worker

    def _wait(self, worker: RayWorker, ref, ready) -> None:
        """Waits for the worker's actor to start (a node whose resources others hold may never
        start it: after the placement timeout it counts as failed) and for its function; its
        end goes to the driver as an exit status, whatever happens here."""
        status = 1
        try:
            status = self._outcome(worker, ref, ready)
        except Exception as e:  # noqa: BLE001 - said as the worker's end
            worker.why = f"failed: {type(e).__name__}: {e}"
        finally:
            if status != 0 and not worker.stopping and not self.first_failure:
                self.first_failure = f"{worker.describe()} {worker.why}"
            if status != 0 and worker.actor is not None:
                try:
                    ray.kill(worker.actor, no_restart=True)  # its slot is free again
                except Exception:  # noqa: BLE001 - gone already
                    pass
            self.events.put(("exit", worker.id, status))

    def _outcome(self, worker: RayWorker, ref, ready) -> int:
        placed, _ = ray.wait([ready], timeout=self.placement_timeout)
        if not placed:
            worker.why = (f"was not started on its node within {self.placement_timeout:g} s "
                          "(placement_group_timeout_s): the node's resources are taken")
            return 1
        worker.placed = True
        try:
            kind, worker.result = ray.get(ref)
            worker.returned = kind != _LEFT
            return 0
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None) or e
            worker.why = f"raised {type(cause).__name__}: {cause}"
            return 1
        except ray.exceptions.RayActorError as e:
            worker.why = f"was lost: {_lost(e)}"
            return -signal.SIGKILL

    def ended(self, worker: Worker, status: int) -> str:
        return getattr(worker, "why", "") or super().ended(worker, status)

    def stop(self, worker: Worker, signum: int = signal.SIGTERM) -> None:
        worker.stopping = True
        actor = getattr(worker, "actor", None)
        if actor is not None and worker.status is None:
            ray.kill(actor, no_restart=True)

    def _finish(self, worker: Worker) -> None:
        """Training is over: a worker whose actor has not started yet never will be needed."""
        super()._finish(worker)
        for other in self.running():
            if isinstance(other, RayWorker) and not other.placed:
                self.stop(other)

    def results(self) -> list:
        """What the workers that returned gave, in the rank order of the last generation each
        was in (a worker started as training ended, which left without joining, gives
        nothing)."""
        done = [w for w in self.workers.values()
                if isinstance(w, RayWorker) and w.status == 0 and w.returned]
        return [w.result for w in sorted(done, key=lambda w: (w.rank is None, w.rank or 0))]

    def release(self) -> None:
        for worker in self.workers.values():
            actor = getattr(worker, "actor", None)
            if actor is not None:
                ray.kill(actor, no_restart=True)


def _args(min_workers: int, max_workers: int | None, reset_limit: int | None,
          cooldown_range: tuple[float, float] | None, elastic_timeout: float,
          verbose: bool) -> argparse.Namespace:
    """The driver's settings, as ddprun's parser would give them for this job (the job settings
    at ddprun's defaults: the workers take DDP_* settings from extra_env_vars)."""
    args = job_settings()
    args.__dict__.update(
        np=min_workers, min_np=min_workers, max_np=max_workers, reset_limit=reset_limit,
        cooldown_range=cooldown_range, elastic_timeout=float(elastic_timeout), verbose=verbose,
        host_discovery_script=None, host_list=None, slots=None, rendezvous_addr=None,
        command=["<ray>"], places=None)
    return args


def run_elastic(fn: Callable, args: list, kwargs: dict, *, min_workers: int,
                max_workers: int | None, reset_limit: int | None,
                cooldown_range: tuple[float, float] | None, elastic_timeout: float,
                resources: dict, extra_env: dict, placement_timeout: float = 100.0,
                verbose: bool = False) -> list:
    """Runs fn(*args, **kwargs) as an elastic job on the cluster's nodes; what its workers
    returned, in rank order (RayDriver.results)."""
    driver = RayDriver(_args(min_workers, max_workers, reset_limit, cooldown_range,
                             elastic_timeout, verbose),
                       Sink(sys.stderr.buffer if hasattr(sys.stderr, "buffer") else _Text()),
                       fn, args, kwargs, extra_env, resources, placement_timeout)
    try:
        code = driver.run()
    finally:
        driver.release()
    if code == 128 + signal.SIGINT:
        raise KeyboardInterrupt
    if code != 0:
        first = driver.first_failure
        raise RuntimeError(f"RayExecutor.run: the elastic job failed (status {code}): "
                           f"{driver.last_said}" +
                           (f"; its first failure: {first}" if first and
                            first not in driver.last_said else ""))
    return driver.results()


class _Text:
    """sys.stderr when it has no binary buffer (a notebook's, pytest's capsys)."""

    def write(self, data: bytes) -> None:
        sys.stderr.write(data.decode(errors="replace"))

    def flush(self) -> None:
        sys.stderr.flush()
