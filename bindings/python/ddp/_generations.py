# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""How a worker of an elastic job (ddprun --min-np/--max-np/--host-discovery-script) finds its
place: ddprun's driver forms the job in generations (a set of workers with their ranks, and a
fresh store to meet at); init() asks the driver's store for the newest generation that has this
worker and joins that job (ddp.elastic says the whole story; this is the part init() needs)."""
from __future__ import annotations

import json
import os
import sys
import time

from . import _ddp, _ops
from ._ddp import DDPError, DDPValueError

# What a worker of an elastic job gets from ddprun (besides DDP_RENDEZVOUS_ADDR, DDP_JOB_TOKEN
# and DDP_HOSTNAME): its identity and the driver's store.
_ID, _PORT, _TIMEOUT = "DDP_ELASTIC_ID", "DDP_ELASTIC_PORT", "DDP_ELASTIC_TIMEOUT"


def enabled() -> bool:
    """Whether this process is a worker of an elastic job (started by ddprun in elastic mode)."""
    return os.environ.get("DDP_ELASTIC") == "1"


def place_variables(rank: int, hosts: list[str], port: int) -> dict[str, str]:
    """What a worker that is RANK of a generation (HOSTS: each rank's host; PORT: its store's)
    is told, as ddprun tells a rank of a static job: DDP_*, Horovod's and torchrun's names
    (libddp requires torchrun's to agree with DDP_*, and scripts that read them see this
    generation's place). libddp/src/rank_environment.tsv lists them ("elastic-init")."""
    host = hosts[rank]
    order = list(dict.fromkeys(hosts))
    local = [r for r, h in enumerate(hosts) if h == host]
    place = {"RANK": rank, "SIZE": len(hosts), "LOCAL_RANK": local.index(rank),
             "LOCAL_SIZE": len(local), "CROSS_RANK": order.index(host), "CROSS_SIZE": len(order)}
    env = {f"{prefix}_{name}": str(value) for name, value in place.items()
           for prefix in ("DDP", "HOROVOD")}
    env["DDP_RENDEZVOUS_PORT"] = str(port)
    env.update(RANK=str(rank), WORLD_SIZE=str(len(hosts)), LOCAL_RANK=env["DDP_LOCAL_RANK"],
               LOCAL_WORLD_SIZE=env["DDP_LOCAL_SIZE"], GROUP_RANK=env["DDP_CROSS_RANK"],
               GROUP_WORLD_SIZE=env["DDP_CROSS_SIZE"])
    return env


class _Membership:
    """This worker's place in the elastic job: which generation it is in, through the driver's
    store. Keys there: elastic/latest (the newest generation), elastic/generation/G (its plan:
    the ranks by worker, the hosts by rank, the port of its store, the update counter at its
    forming, or the error that ends the job), elastic/updates (bumped on a new generation that the
    running workers are to join at their next commit)."""

    def __init__(self) -> None:
        self.id = os.environ.get(_ID, "")
        self.generation = -1  # the generation this worker is in (or last was)
        self.member = False  # it was in some generation
        self.updates = 0
        self.dump_folder: str | None = None  # DDP_FLIGHT_RECORDER_DUMP as the driver gave it
        self._client = None

    def timeout(self) -> float:
        try:
            return max(1.0, float(os.environ.get(_TIMEOUT, "600")))
        except ValueError:
            return 600.0

    def client(self):
        if self._client is None:
            self._client = _ddp.StoreClient(os.environ.get("DDP_RENDEZVOUS_ADDR", "127.0.0.1"),
                                            int(os.environ[_PORT]),
                                            os.environ.get("DDP_JOB_TOKEN", ""), 30.0)
        return self._client

    def _plan(self, generation: int, timeout: float) -> dict:
        return json.loads(self.client().get(f"elastic/generation/{generation}", timeout))

    def join(self, cause: str = "") -> None:
        """Waits for the next generation that has this worker and sets this process's DDP_*
        variables to its place there (init() then joins it). CAUSE: why the last try failed,
        said if no generation comes."""
        deadline = time.monotonic() + self.timeout()
        want = self.generation + 1
        if not self.member:  # a replacement is formed into the job once it is here
            self.client().add(f"elastic/ready/{self.id}", 1)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _ops.error(
                    f"ddp elastic: no new generation of the job came within "
                    f"{self.timeout():g} s (DDP_ELASTIC_TIMEOUT) for worker {self.id}"
                    + (f"; the last one failed: {cause}" if cause else ""), "DEADLINE_EXCEEDED")
            try:
                self._plan(want, left)  # waits until generation `want` has been formed
            except DDPError as e:
                if getattr(e, "code", "") == "DEADLINE_EXCEEDED":
                    continue  # said above, with the cause
                raise
            latest = int(self.client().get("elastic/latest", 30.0))
            generation = max(want, latest)
            plan = self._plan(generation, 30.0)
            if plan.get("finished"):
                # Training ended (a worker returned) before this worker's generation formed:
                # it has nothing to do.
                print(f"ddp elastic: worker {self.id}: the job finished before it could join; "
                      "leaving", file=sys.stderr, flush=True)
                raise SystemExit(0)
            if plan.get("error"):
                raise _ops.error(f"ddp elastic: the job ended: {plan['error']}", "ABORTED")
            if self.id in plan["ranks"]:
                break
            if self.member:
                raise _ops.error(f"ddp elastic: worker {self.id} is not in generation "
                                 f"{generation} of the job (the driver stopped it or its host)",
                                 "ABORTED")
            want = generation + 1  # started for a later generation than this one
        os.environ.update(place_variables(plan["ranks"][self.id], plan["hosts"], plan["port"]))
        self.generation, self.member, self.updates = generation, True, int(plan["updates"])
        # A flight record at a failure goes to the generation's own folder: each generation's
        # ranks are numbered afresh, and a later one's rank N must not overwrite this one's.
        if self.dump_folder is None:
            self.dump_folder = os.environ.get("DDP_FLIGHT_RECORDER_DUMP", "")
        if self.dump_folder:
            os.environ["DDP_FLIGHT_RECORDER_DUMP"] = os.path.join(self.dump_folder,
                                                                  f"generation-{generation}")

    def report(self, ranks: list[int]) -> None:
        """Tells the driver which ranks of this worker's generation its failure names (keys
        elastic/blamed/G/RANK, then elastic/reports/G): a worker whose process lives on, cut
        off or frozen, is then stopped and left out (Driver._judge) instead of keeping the
        others waiting for a generation only its exit would bring. Best effort: a driver out
        of reach is this worker's own failure, which its next join meets."""
        if self.generation < 0 or not ranks:
            return
        try:
            client = self.client()
            for rank in sorted(set(ranks)):
                client.add(f"elastic/blamed/{self.generation}/{rank}", 1)
            client.add(f"elastic/reports/{self.generation}", 1)
        except DDPError:
            pass

    def pending(self):
        """(the driver's update counter, whether only workers left) when it formed a generation
        newer than this one for the running workers to join; else None."""
        counter = self.client().add("elastic/updates", 0)
        if counter <= self.updates:
            return None
        return counter, False


_membership: _Membership | None = None


def member() -> _Membership:
    global _membership
    if _membership is None:
        _membership = _Membership()
    return _membership


def join_and_init() -> None:
    """init() of an elastic worker: joins the newest generation that has it. A generation whose
    start fails (one of its workers died as it formed) is left for the next one, which the driver
    forms once it sees the death."""
    this = member()
    cause = ""
    while True:
        this.join(cause)
        try:
            _ddp.init()
            return
        except DDPValueError:
            raise
        except DDPError as e:
            cause = str(e)
            _ddp.shutdown()


def generation() -> int:
    """The generation of the elastic job this worker is in (-1 outside elastic mode)."""
    return member().generation if enabled() else -1
