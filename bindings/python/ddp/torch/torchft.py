# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""torchft on libddp: ProcessGroupDDP, the reconfigurable process group that torchft's Manager
re-forms among the replicas of each quorum, on the `ddp` backend (needs `torchft`).

    from ddp.torch.torchft import ProcessGroupDDP
    manager = torchft.Manager(pg=ProcessGroupDDP(), ...)  # where ProcessGroupGloo() was

Each configure() makes a libddp job of its own among the quorum's replicas through the store
torchft hands it (its own connections, engine and liveness; nothing shared with the process's
other groups or with other replicas' groups in the same process). A peer that dies, stalls or
aborts fails the operations in flight at once, naming it (its closed connection, its missed
heartbeats, its abort's reason), not after a timeout: torchft's Manager then skips the step
(errored()) and forms the next quorum without it. docs/torchft.md says how to use it.
"""
from __future__ import annotations

from datetime import timedelta

from ..run.cluster import require

require("torchft", "torchft", "ddp.torch.torchft")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torchft.process_group import ProcessGroupWrapper  # noqa: E402 - after the check

from .. import _ddp  # noqa: E402
from .c10d import backend as _backend  # noqa: E402

__all__ = ["ProcessGroupDDP"]


class ProcessGroupDDP(ProcessGroupWrapper):
    """torchft's reconfigurable process group on libddp (as its ProcessGroupGloo is on Gloo):
    CPU tensors and, where NCCL is, CUDA tensors; every collective torch's ProcessGroup serves,
    reduce_scatter included. `timeout`: how long configure() waits for the quorum's replicas,
    and each operation for its peers when none of them is found dead sooner."""

    def __init__(self, timeout: timedelta = timedelta(seconds=60)) -> None:
        super().__init__(timeout=timeout)
        self._ops = None  # the current group's operations (c10d.Operations)
        self._error: Exception | None = None  # what broke the current group, noted here

    def _create_pg(self, store, rank: int, world_size: int):
        self._error = None
        group, self._ops = _backend.own_group(store, rank, world_size, self._timeout)
        return group

    def _wrap_work(self, work, opts):
        return _Noted(work, self)

    def _operation(self, name, *args, **kwargs):
        """ProcessGroupWrapper's `name` (its profiler context, _wrap_work); a failure of the
        group at the call (a group an earlier operation found broken raises there) is noted and
        given a Work that is done, as a failure after the call is: torchft's Manager meets
        neither until should_commit() asks errored(). Bad input still raises."""
        try:
            return getattr(ProcessGroupWrapper, name)(self, *args, **kwargs)
        except _ddp.DDPError as e:
            self._note(e)
            return _Noted(None, self)

    def _note(self, error: Exception) -> None:
        if self._error is None:
            self._error = error

    def abort(self, errored: bool = True) -> None:
        """Fails every operation of the current group here and at its peers (which hear this
        replica's reason at once), and leaves it; errored() says so until the next configure()."""
        ops, self._ops = self._ops, None
        self._pg = None  # torch's group goes with it; the base class only logs
        if ops is not None:
            reason = f"replica {self._replica_id} (rank {self._rank}) aborted the process group"
            if self._quorum_id is not None:
                reason += f" of quorum {self._quorum_id}"
            if errored and self._error is None:
                self._error = ops.health() or RuntimeError(reason)
            ops.abort(reason)
        super().abort(errored=errored)

    def shutdown(self) -> None:
        ops, self._ops = self._ops, None
        if ops is not None:
            ops.shutdown()
        super().shutdown()

    def errored(self) -> Exception | None:
        """The error that broke the current group (torch's backend error naming the ranks), or
        None: what an operation failed with, or what libddp's liveness found since."""
        if self._error is not None:
            return self._error
        return self._ops.health() if self._ops is not None else None

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return "torchft-ddp"


# The operations torchft's wrapper forwards, each through ProcessGroupDDP._operation.
_OPERATIONS = ("allgather", "allgather_into_tensor_coalesced", "allreduce", "allreduce_coalesced",
               "alltoall_base", "barrier", "broadcast", "recv", "reduce_scatter",
               "reduce_scatter_tensor_coalesced", "send")


def _forwarding(name):
    def operation(self, *args, **kwargs):
        return self._operation(name, *args, **kwargs)
    operation.__name__ = operation.__qualname__ = name
    operation.__doc__ = getattr(ProcessGroupWrapper, name).__doc__
    return operation


for _name in _OPERATIONS:
    setattr(ProcessGroupDDP, _name, _forwarding(_name))


class _Noted(dist._Work):  # noqa: SLF001 - torch's Work, as torchft's own wrappers subclass it
    """An operation's Work as torchft's Manager expects it: a failure reaches errored() alone
    (torchft's Manager asks it in should_commit(), then discards the step and re-forms the
    quorum). wait() does not raise, and the future completes with None instead of the error:
    torchft 0.2.0's DDP comm hook reads the future chain that its Manager builds after wait(),
    which a raising wait() leaves unbuilt (an AssertionError), and a Manager that heard of the
    error mid-step hands the step's next bucket a Work without that chain (an AttributeError):
    either would end the replica. `work` None: the operation failed at the call."""

    def __init__(self, work, group: ProcessGroupDDP) -> None:
        super().__init__()
        self._work, self._group = work, group

    def wait(self, timeout=None) -> bool:
        if self._work is None:
            return False
        try:
            return self._work.wait() if timeout is None else self._work.wait(timeout)
        except Exception as e:  # noqa: BLE001 - every failure is the group's, for errored()
            self._group._note(e)  # noqa: SLF001 - its own group
            return False

    def get_future(self):
        if self._work is None:
            done = torch.futures.Future()
            done.set_result(None)
            return done
        group = self._group

        def settled(fut):
            try:
                return fut.value()
            except Exception as e:  # noqa: BLE001 - every failure is the group's
                group._note(e)  # noqa: SLF001 - its own group
                return None
        return self._work.get_future().then(settled)

    def is_completed(self) -> bool:
        return self._work is None or self._work.is_completed()

    def block_current_stream(self, timeout=None) -> None:
        if self._work is not None:
            self._work.block_current_stream()

    def synchronize(self) -> None:
        if self._work is not None:
            self._work.synchronize()
