# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Faults under the 'ddp' backend: a rank dies (os._exit, as a killed process ends), or the ranks
disagree on a tensor's size. Every survivor's collective raises torch's backend error
(DistBackendError where torch has it; also a ddp.DDPError) naming the rank, and carrying the
ranks as data, within the job's timeout. Modes: kill (the error from the call), kill-async (from
Work.wait()), mismatch, late (a group made with timeout=2 s: rank 0's barrier fails after those 2 s
with torch's "Timed out", blaming the ranks that never came; they wait and leave), future (a
failed operation's future raises torch's backend error, for an operation the engine completes
(allreduce) and one the Python side finishes (all_gather_into_tensor); on torch 2 the Work says
it failed too), future-python (the same on torch 2 without the backend's C++ part: the future
fails, not hands the error back as its value). Prints "survived <rank>: ..."."""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import ddp
import ddp.torch  # registers the backend

mode = sys.argv[1]
if mode == "future-python":  # torch 2 without the backend's C++ part (as workers/c10d_ddp.py)
    ddp.torch._native.module = None
    ddp.torch.c10d.backend._backend_constructible = True
dist.init_process_group("ddp")
rank = dist.get_rank()
t = torch.ones(1000)
dist.all_reduce(t)
if mode.startswith("kill") and rank == 1:
    os._exit(9)
blamed = [1]
if mode == "late":
    group = dist.new_group(timeout=timedelta(seconds=2))
    blamed = list(range(1, dist.get_world_size()))
    if rank != 0:  # never comes to the barrier: waits for rank 0's verdict, then leaves
        time.sleep(6)
        print(f"survived {rank}: stayed away", flush=True)
        os._exit(0)
if mode.startswith("future"):  # rank 1's tensors are float64, the others' float32
    dtype = torch.float64 if rank == 1 else torch.float32
    size = dist.get_world_size()
    starts = {
        "allreduce": lambda: dist.all_reduce(torch.ones(10, dtype=dtype), async_op=True),
        "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(
            torch.empty(10 * size, dtype=dtype), torch.ones(10, dtype=dtype), async_op=True),
    }
    for what, start in starts.items():
        work = None
        try:
            work = start()  # torch 1.13: the second raises the first one's error here
            value = work.get_future().wait()
        except Exception as e:  # noqa: BLE001 - the type is what is checked
            # future-python: torch's C++ reads the future through a callback that raises the
            # error, which torch's futures turn into a RuntimeError holding its message.
            wanted = RuntimeError if mode == "future-python" else \
                getattr(dist, "DistBackendError", RuntimeError)
            assert isinstance(e, wanted), (type(e), e)
            assert "disagree" in str(e), str(e)
            raised = type(e).__name__
        else:
            sys.exit(f"rank {rank}: {what}'s future gave {value!r}")
        # torch 2: the Work's own account (torch's wrapper of a Work written in Python asks it
        # for wait() and get_future() alone: future-python has only the future's)
        if hasattr(dist, "DistBackendError") and mode != "future-python":
            assert work is not None, what
            assert not work.is_success() and "disagree" in str(work.exception()), what
        print(f"{what}: {raised}", flush=True)
    # No rank leaves before all are done (on torch 1.13 a rank's second call fails at once, and
    # a rank that left would be the others' error): the ranks meet through torch's store.
    # Rank 0 hosts the store: it leaves last.
    store = dist.distributed_c10d._get_default_store()
    for key in ("future-done", "future-left") if rank == 0 else ("future-done",):
        store.add(key, 1)
        while store.add(key, 0) < dist.get_world_size():
            time.sleep(0.01)
    if rank != 0:
        store.add("future-left", 1)
    print(f"survived {rank}: futures raised", flush=True)
    os._exit(0)
try:
    if mode == "late":
        started = time.monotonic()
        try:
            dist.barrier(group)
        finally:
            waited = time.monotonic() - started
        sys.exit(f"rank 0: the barrier passed without ranks {blamed}")

    if mode == "mismatch":  # rank 1 reduces one element more than the others
        dist.all_reduce(torch.ones(100 + (rank == 1)))
    for _ in range(50):  # the dead rank is found by the first collective that needs it
        if mode == "kill-async":
            dist.all_reduce(t, async_op=True).wait()
        else:
            dist.all_reduce(t)
except Exception as e:  # noqa: BLE001 - the type is what is checked
    assert isinstance(e, getattr(dist, "DistBackendError", RuntimeError)), (type(e), e)
    assert isinstance(e, ddp.DDPError), (type(e), e)
    if mode == "mismatch":  # each rank blames the ones that disagree with it
        assert e.ranks and "allreduce" in str(e), (e.ranks, str(e))
    elif mode == "late":  # torch's words, the absent ranks, and not before the group's timeout
        assert " Timed out " in str(e) and e.ranks == blamed, (e.ranks, str(e))
        assert waited >= 2, f"failed after {waited:.2f} s, before the group's 2 s timeout"
    else:
        assert "rank 1" in str(e) and e.ranks == blamed, (e.ranks, str(e))
    print(f"survived {rank}: {type(e).__name__} ranks={e.ranks}: {str(e)[:800]}", flush=True)
    sys.exit(0)
sys.exit(f"rank {rank}: no error")
