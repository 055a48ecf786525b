# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""RayExecutor: a libddp job on a Ray cluster, with the API and semantics of Horovod's
`horovod.ray.RayExecutor` (start, run, run_remote, execute, execute_single, shutdown;
num_workers or num_hosts x num_workers_per_host, cpus_per_worker, use_gpu, placement groups;
min_workers/max_workers for elastic mode, ray/elastic.py).

The workers are Ray actors placed by a placement group (PACK for num_workers, STRICT_SPREAD, a
bundle per host, for num_hosts). Each tells the driver its host; the driver gives the ranks as
ddprun does (run/cluster.py: a host's workers together), hosts the rendezvous store, and sets in
each actor the environment ddprun would have set: `ddp.init()`, `ddp.torch`'s
`init_process_group("ddp")` and torch's env:// all work inside the functions it runs. Ranks on
the same host meet over shared memory, the others over TCP, as under ddprun. A function that
fails on a rank fails the call with that rank named; libddp makes the others' collectives fail
rather than wait."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ..run.cluster import Member, describe, enter, environments, new_token, picklable
from ..run.static_job import start_store
from .elastic import run_elastic


@dataclasses.dataclass
class Settings:
    """What RayExecutor.create_settings returns: how long to wait for the workers' placement
    (seconds) and for a call's results (None: as long as it takes)."""
    timeout_s: float | None = None
    placement_group_timeout_s: float = 100


@ray.remote
class _Worker:
    """One rank: its environment, an optional executable object, and the functions run in it."""

    def __init__(self):
        self.executable = None

    def member(self, driver: str) -> Member:
        return describe(driver)

    def enter(self, env: dict, extra: dict) -> None:
        enter(env, extra)

    def start_executable(self, cls, args, kwargs) -> None:
        self.executable = cls(*args, **kwargs)

    def execute(self, fn: Callable) -> Any:
        return fn(self.executable)

    def run(self, fn: Callable, args, kwargs) -> Any:
        return fn(*args, **kwargs)


class RayExecutor:
    """A libddp job on the current Ray cluster (`ray.init()` first)."""

    @staticmethod
    def create_settings(timeout_s: float | None = None, placement_group_timeout_s: float = 100,
                        **_horovod_only) -> Settings:
        """Horovod's settings; its ssh and NIC options have no meaning on Ray and are ignored."""
        return Settings(timeout_s, placement_group_timeout_s)

    def __init__(self, settings: Settings | None = None, num_workers: int | None = None,
                 num_hosts: int | None = None, num_workers_per_host: int = 1,
                 cpus_per_worker: int = 1, use_gpu: bool = False,
                 gpus_per_worker: int | None = None, use_current_placement_group: bool = True,
                 min_workers: int | None = None, max_workers: int | None = None,
                 reset_limit: int | None = None, cooldown_range: tuple | None = None,
                 elastic_timeout: float = 600, override_discovery: bool = True,
                 verbose: bool = False):
        self.elastic = _elastic_params(num_workers, num_hosts, min_workers, max_workers,
                                       reset_limit, cooldown_range, elastic_timeout,
                                       override_discovery)
        if self.elastic is None and (num_workers is None) == (num_hosts is None):
            raise ValueError("RayExecutor: give num_workers, or num_hosts (with "
                             "num_workers_per_host), not both; or min_workers (elastic mode)")
        if (num_workers or 0) < 0 or (num_hosts or 0) < 0 or num_workers_per_host < 1:
            raise ValueError("RayExecutor: the numbers of workers and hosts must be positive")
        if gpus_per_worker and not use_gpu:
            raise ValueError("RayExecutor: gpus_per_worker needs use_gpu=True")
        self.settings = settings or Settings()
        self.num_hosts = num_hosts
        self.num_workers_per_host = num_workers_per_host
        self.num_workers = num_workers if num_workers is not None else \
            (num_hosts or 0) * num_workers_per_host
        self.cpus_per_worker, self.use_gpu = cpus_per_worker, use_gpu
        self.gpus_per_worker = (gpus_per_worker or 1) if use_gpu else 0
        self.use_current_placement_group = use_current_placement_group
        self.workers: list = []  # in rank order once started
        self._group = None
        self._own_group = False
        self._close_store: Callable[[], None] | None = None
        self._extra_env: dict | None = None  # elastic mode: start() keeps extra_env_vars
        self._hosts: list[str] = []  # each rank's host, once started
        self.verbose = verbose

    # Starting -----------------------------------------------------------------------------

    def _placement(self):
        """The placement group the workers go into, and each worker's bundle."""
        current = ray.util.get_current_placement_group()
        if self.use_current_placement_group and current is not None:
            count = len(current.bundle_specs)
            return current, [i % count for i in range(self.num_workers)], False
        one = self._resources()
        if self.num_hosts is not None:
            bundle = {k: v * self.num_workers_per_host for k, v in one.items()}
            group = placement_group([bundle] * self.num_hosts, strategy="STRICT_SPREAD")
            bundles = [i // self.num_workers_per_host for i in range(self.num_workers)]
        else:
            group = placement_group([one] * self.num_workers, strategy="PACK")
            bundles = list(range(self.num_workers))
        ready, _ = ray.wait([group.ready()], timeout=self.settings.placement_group_timeout_s)
        if not ready:
            remove_placement_group(group)
            raise TimeoutError(
                f"RayExecutor: the cluster could not place {self._asked()} within "
                f"{self.settings.placement_group_timeout_s:g} s; it has "
                f"{ray.cluster_resources()} ({len(ray.nodes())} nodes)")
        return group, bundles, True

    def _resources(self) -> dict:
        """What one worker takes of a node."""
        one = {"CPU": self.cpus_per_worker}
        if self.use_gpu:
            one["GPU"] = self.gpus_per_worker
        return one

    def _asked(self) -> str:
        gpus = f" and {self.gpus_per_worker} GPU(s)" if self.use_gpu else ""
        where = (f" on {self.num_hosts} distinct hosts" if self.num_hosts is not None else "")
        return (f"{self.num_workers} workers of {self.cpus_per_worker} CPU(s){gpus} "
                f"each{where}")

    def start(self, executable_cls: type | None = None, executable_args: list | None = None,
              executable_kwargs: dict | None = None, extra_env_vars: dict | None = None) -> None:
        """Places the workers, gives them their ranks and environment and, with
        executable_cls, makes an instance of it in each (after the environment is set)."""
        if self.workers or self._extra_env is not None:
            raise RuntimeError("RayExecutor: already started")
        if executable_cls is not None:
            picklable("RayExecutor.start", ray.cloudpickle.dumps, executable_cls,
                      executable_args, executable_kwargs)
        if self.elastic is not None:
            if executable_cls is not None:
                raise ValueError("RayExecutor: elastic mode runs functions (run), not "
                                 "executables: its workers come and go")
            self._extra_env = dict(extra_env_vars or {})  # the workers start in run()
            return
        try:
            self._start(executable_cls, executable_args, executable_kwargs, extra_env_vars)
        except BaseException:
            self.shutdown()  # nothing half-started is left: actors, placement, store
            raise

    def _start(self, executable_cls, executable_args, executable_kwargs, extra_env_vars):
        self._group, bundles, self._own_group = self._placement()
        self.workers = [_Worker.options(
            num_cpus=self.cpus_per_worker, num_gpus=self.gpus_per_worker,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                self._group, placement_group_bundle_index=b)).remote() for b in bundles]
        driver = ray.util.get_node_ip_address()
        token = new_token()
        port, self._close_store = start_store(token, driver)
        members = self._get([w.member.remote(driver) for w in self.workers], "start")
        envs = environments(members, (driver, port), token)
        order = sorted(range(len(envs)), key=lambda i: int(envs[i]["DDP_RANK"]))
        self.workers = [self.workers[i] for i in order]
        self._hosts = [members[i].host for i in order]
        self._get([w.enter.remote(envs[i], dict(extra_env_vars or {}))
                   for w, i in zip(self.workers, order)], "start")
        if executable_cls is not None:
            self._get([w.start_executable.remote(executable_cls, executable_args or [],
                                                 executable_kwargs or {})
                       for w in self.workers], "start")

    # Running ------------------------------------------------------------------------------

    def _get(self, refs: list, what: str) -> list:
        """The results in rank order; the first rank that fails fails the call, named."""
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=self.settings.timeout_s)
            if not done:
                raise TimeoutError(f"RayExecutor.{what}: no result from ranks "
                                   f"{[refs.index(r) for r in pending]} within "
                                   f"{self.settings.timeout_s:g} s")
            try:
                ray.get(done[0])
            except Exception as e:  # re-raised with the rank (and its host) named
                rank = refs.index(done[0])
                where = f" (host {self._hosts[rank]})" if rank < len(self._hosts) else ""
                cause = getattr(e, "cause", None) or e  # a RayTaskError's: the function's own
                raise RuntimeError(f"RayExecutor.{what}: rank {rank}{where} failed: "
                                   f"{type(cause).__name__}: {cause}") from e
        return ray.get(refs)

    def _started(self, what: str = "") -> None:
        if self.elastic is not None and what != "run":
            raise NotImplementedError(f"RayExecutor.{what}: not in elastic mode (as Horovod's): "
                                      "use run(), whose workers come and go with the nodes")
        if not self.workers and self._extra_env is None:
            raise RuntimeError("RayExecutor: call start() first")

    def run_remote(self, fn: Callable, args: list | None = None,
                   kwargs: dict | None = None) -> list:
        """fn(*args, **kwargs) on every rank; their ObjectRefs, in rank order."""
        self._started("run_remote")
        picklable("RayExecutor.run", ray.cloudpickle.dumps, fn, args, kwargs)
        return [w.run.remote(fn, args or [], kwargs or {}) for w in self.workers]

    def run(self, fn: Callable, args: list | None = None, kwargs: dict | None = None,
            callbacks: list | None = None) -> list:
        """fn(*args, **kwargs) on every rank; the results in rank order. callbacks: Horovod's
        (results are not streamed from Ray's workers here): each is called with the list.
        In elastic mode: fn on every worker as the nodes allow, from min_workers to max_workers
        (fn uses ddp.elastic.run); the results of the last generation's workers."""
        if self.elastic is not None:
            self._started("run")
            picklable("RayExecutor.run", ray.cloudpickle.dumps, fn, args, kwargs)
            results = run_elastic(fn, list(args or []), dict(kwargs or {}), **self.elastic,
                                  resources=self._resources(), extra_env=self._extra_env or {},
                                  placement_timeout=self.settings.placement_group_timeout_s,
                                  verbose=self.verbose)
            for callback in callbacks or []:
                callback(results)
            return results
        results = self._get(self.run_remote(fn, args, kwargs), "run")
        for callback in callbacks or []:
            callback(results)
        return results

    def execute(self, fn: Callable, callbacks: list | None = None) -> list:
        """fn(executable) on every rank (the object start() made); results in rank order."""
        self._started("execute")
        picklable("RayExecutor.execute", ray.cloudpickle.dumps, fn)
        results = self._get([w.execute.remote(fn) for w in self.workers], "execute")
        for callback in callbacks or []:
            callback(results)
        return results

    def execute_single(self, fn: Callable) -> Any:
        """fn(executable) on rank 0 alone."""
        self._started("execute_single")
        picklable("RayExecutor.execute_single", ray.cloudpickle.dumps, fn)
        return self._get([self.workers[0].execute.remote(fn)], "execute_single")[0]

    def shutdown(self) -> None:
        """Stops the workers, releases their placement and the rendezvous store."""
        for worker in self.workers:
            ray.kill(worker)
        self.workers = []
        self._hosts = []
        self._extra_env = None
        if self._group is not None and self._own_group:
            remove_placement_group(self._group)
        self._group = None
        if self._close_store is not None:
            self._close_store()
            self._close_store = None


def _elastic_params(num_workers, num_hosts, min_workers, max_workers, reset_limit,
                    cooldown_range, elastic_timeout, override_discovery) -> dict | None:
    """Elastic mode's settings (None: a fixed job), checked as Horovod checks them."""
    if min_workers is None and max_workers is None:
        return None
    if not min_workers or min_workers < 1:
        raise ValueError("RayExecutor: max_workers needs min_workers (at least 1): elastic "
                         "mode starts when min_workers workers can run")
    if max_workers is not None and max_workers < min_workers:
        raise ValueError(f"RayExecutor: max_workers ({max_workers}) is below min_workers "
                         f"({min_workers})")
    if num_workers is not None or num_hosts is not None:
        raise ValueError("RayExecutor: give min_workers/max_workers (elastic mode) or "
                         "num_workers/num_hosts (a fixed job), not both")
    if elastic_timeout <= 0:
        raise ValueError(f"RayExecutor: elastic_timeout must be positive (got "
                         f"{elastic_timeout})")
    if cooldown_range is not None:
        lowest, highest = (float(x) for x in cooldown_range)
        if not 0 < lowest <= highest:
            raise ValueError(f"RayExecutor: cooldown_range needs 0 < low <= high (got "
                             f"{cooldown_range})")
        cooldown_range = (lowest, highest)
    if not override_discovery:
        raise ValueError("RayExecutor: override_discovery=False (a discovery script of the "
                         "user's) is not supported: the hosts are Ray's live nodes")
    return {"min_workers": min_workers, "max_workers": max_workers,
            "reset_limit": reset_limit, "cooldown_range": cooldown_range,
            "elastic_timeout": float(elastic_timeout)}


@dataclasses.dataclass
class ElasticSettings:
    """What ElasticRayExecutor.create_settings returns (Horovod's names)."""
    min_np: int = 1
    max_np: int | None = None
    reset_limit: int | None = None
    elastic_timeout: float = 600
    verbose: bool = False


class ElasticRayExecutor:
    """Horovod's older elastic API on Ray (`horovod.ray.ElasticRayExecutor`): RayExecutor's
    elastic mode under the names it had (min_np/max_np, cpus_per_slot)."""

    @staticmethod
    def create_settings(min_np: int = 1, max_np: int | None = None,
                        reset_limit: int | None = None, elastic_timeout: float = 600,
                        verbose: bool = False, min_num_proc: int | None = None,
                        max_num_proc: int | None = None, **horovod_only) -> ElasticSettings:
        """Horovod's settings (min_num_proc/max_num_proc or their older names min_np/max_np);
        its ssh, NIC and timeout options have no meaning here; other keywords are refused."""
        unknown = sorted(set(horovod_only) - {"timeout_s", "ssh_identity_file", "ssh_str",
                                              "nics", "placement_group_timeout_s"})
        if unknown:
            raise TypeError(f"ElasticRayExecutor.create_settings: unexpected keyword "
                            f"argument(s) {', '.join(unknown)}")
        return ElasticSettings(min_num_proc if min_num_proc is not None else min_np,
                               max_num_proc if max_num_proc is not None else max_np,
                               reset_limit, elastic_timeout, verbose)

    def __init__(self, settings: ElasticSettings, use_gpu: bool = False, cpus_per_slot: int = 1,
                 gpus_per_slot: int | None = None, env_vars: dict | None = None,
                 override_discovery: bool = True):
        self._executor = RayExecutor(
            cpus_per_worker=cpus_per_slot, use_gpu=use_gpu, gpus_per_worker=gpus_per_slot,
            min_workers=settings.min_np, max_workers=settings.max_np,
            reset_limit=settings.reset_limit, elastic_timeout=settings.elastic_timeout,
            override_discovery=override_discovery, verbose=settings.verbose)
        self._env_vars = dict(env_vars or {})

    def start(self) -> None:
        self._executor.start(extra_env_vars=self._env_vars)

    def run(self, worker_fn: Callable, callbacks: list | None = None) -> list:
        """worker_fn() on every worker, elastically; the last generation's results by rank."""
        return self._executor.run(worker_fn, callbacks=callbacks)
