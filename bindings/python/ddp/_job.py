# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The job in this process: joining it (init, with an elastic job's generation), leaving it
(shutdown, also when the main thread dies of an exception), join, the engine's timeline,
counters, stragglers and flight record, and what this installation was built with, under
Horovod's names."""

import atexit
import json
import os
import re
import sys
from typing import Callable

from . import _ddp, _generations, _ops, _rendezvous
from ._ops import error

is_initialized = _ddp.is_initialized
rank = _ddp.rank
size = _ddp.size
local_rank = _ddp.local_rank
local_size = _ddp.local_size
cross_rank = _ddp.cross_rank
cross_size = _ddp.cross_size

atexit.register(_ddp.shutdown)


def _shutdown_on_uncaught_exception(hook):
    """An exception that ends the main thread leaves the job at once: otherwise a non-daemon
    thread still waiting on a collective would keep the process (and the job) alive, since
    Python joins such threads before it runs atexit handlers."""
    def excepthook(*args):
        hook(*args)
        _ddp.shutdown()
    return excepthook


sys.excepthook = _shutdown_on_uncaught_exception(sys.excepthook)

def start_timeline(file_path, mark_cycles=False):
    """Starts recording the engine's timeline (Chrome trace JSON: each tensor's negotiation,
    queueing and collective phases; a marker per engine cycle with mark_cycles) into file_path,
    as Horovod's start_timeline. As with `ddprun --timeline-filename`, '{rank}' in the path gives
    each rank its own file; without it only rank 0 records (Horovod's rule), so that ranks do
    not write over each other. Starting again finishes the file being written."""
    _ops.require_init("start_timeline")
    path = str(file_path)
    if "{rank}" in path or _ddp.rank() == 0:  # the engine puts the rank in
        _ddp.start_timeline(path, bool(mark_cycles))


def stop_timeline():
    """Stops recording the timeline; the file is complete JSON when this returns."""
    _ops.require_init("stop_timeline")
    _ddp.stop_timeline()


def join(device=-1):
    """This rank has no more data: until every rank has joined it contributes the identity to the
    others' allreduces (and counts in an Average with it, as in Horovod; DDP_JOIN_AVERAGE=
    contributors divides by the ranks with data instead). Returns the rank that
    joined last. `device` is Horovod's (where its zero tensors go); libddp makes the identity
    where each tensor lives, so it is checked and otherwise unused."""
    if not isinstance(device, int) or isinstance(device, bool) or device < -1:
        raise error(f"ddp.join: device must be -1 (CPU) or a CUDA device index, got {device!r}")
    _ops.require_init("join")
    native = _ddp.join_async()
    native.wait()
    return native.join_last_rank


def init(comm=None, process_sets=None):
    """Joins the job that the launcher's variables describe: ddprun's DDP_*, torchrun's, mpirun's
    or srun's (docs/launching.md has the table and the order of precedence). `process_sets`
    (Horovod's): ProcessSet objects (or lists of ranks) to add at once, the same on every rank.
    `comm` (Horovod's MPI communicator) is not supported: libddp's job is the whole launch.
    A worker of an elastic job (ddprun --min-np/--max-np/--host-discovery-script) joins the newest
    generation of the job that has it (ddp.elastic)."""
    if comm is not None:
        raise error("ddp.init: comm= (an MPI communicator) is not supported; libddp's job is every "
                    "rank the launcher started (use process sets for subsets)")
    if _generations.enabled() and not _ddp.is_initialized():
        _generations.join_and_init()
    elif not _ddp.is_initialized():
        _ddp.init(_rendezvous.overrides())
    if process_sets is not None:
        for ps in process_sets:
            _ops.add_process_set(ps)


# Called before the job is left (ddp.tensorflow lets go of the context its ops hold).
shutdown_hooks: list[Callable[[], None]] = []


def shutdown():
    """Leaves the job; safe to call twice. The job's process sets go with it."""
    for hook in list(shutdown_hooks):
        hook()
    _ops.forget_process_sets()
    _ddp.shutdown()
    _rendezvous.close()


# What this installation and job have, under Horovod's names (its scripts branch on them).
def mpi_built():
    """True when this installation has the MPI plugin (libddp_mpi.so): a job may run over MPI."""
    return any(name == "mpi" for name, _ in _ddp.transports())


def mpi_enabled():
    """True when this job's data moves over MPI (DDP_TRANSPORT=mpi); Horovod's MPI controller."""
    _ops.require_init("mpi_enabled")
    return _ddp.uses_mpi()


def mpi_threads_supported():
    """Whether other MPI libraries (mpi4py) may be used beside this job's MPI: libddp initialises
    MPI with MPI_THREAD_MULTIPLE and refuses a lower level, so True whenever MPI is in use."""
    _ops.require_init("mpi_threads_supported")
    if not _ddp.uses_mpi():
        raise error("ddp.mpi_threads_supported(): this job does not use MPI (DDP_TRANSPORT=mpi)",
                    "FAILED_PRECONDITION")
    return True


def gloo_built():
    """False: libddp has its own TCP and shared-memory transports, not Gloo."""
    return False


def gloo_enabled():
    return False


def nccl_built():
    """When libddp's NCCL plugin (libddp_nccl.so) loads, so that CUDA tensors can be reduced: the
    NCCL version code, as Horovod returns it (major * 10000 + minor * 100 + patch: 22809 for
    2.28.9; scripts compare it, e.g. >= 2700 for alltoall); else 0."""
    if not _ddp.nccl_built():
        return 0
    found = re.match(r"NCCL (\d+)\.(\d+)\.(\d+)", _ddp.nccl_version())
    if found is None:
        return 1
    major, minor, patch = (int(g) for g in found.groups())
    return major * 10000 + minor * 100 + patch


def cuda_built():
    """True when CUDA tensors can be reduced: they go through the NCCL plugin (nccl_built())."""
    return bool(_ddp.nccl_built())


def rocm_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def engine_stats():
    """Counters of the fusion engine: rounds, cache hits/misses, fused tensors, bytes, ..."""
    return _ddp.engine_stats()


def flight_record():
    """This rank's flight record: its last operations (DDP_FLIGHT_RECORDER_ENTRIES, 2048 by
    default) with their state, times and errors, and totals per kind, as a dict (libddp's
    flight-recorder format, docs/observability.md); in a torch.distributed job, the records of
    its new_group groups under "groups"."""
    return json.loads(_ddp.flight_record("on demand"))


def dump_flight_recorder(folder):
    """Writes this rank's flight record to FOLDER/ddp_flight_recorder_rank_<rank>.json (the
    folder is created); returns the file's path. `python -m ddp.flight_recorder torch FOLDER`
    turns a job's files into the dumps torch's flight-recorder analyzer reads."""
    return _ddp.dump_flight_record(os.fspath(folder), "on demand")


def stats(since=None):
    """The engine's counters (engine_stats()) and the job's stragglers: `stats()["stragglers"]`
    lists the ranks the others waited for, most first, each a dict with `rank`,
    `waited_for_seconds` (how long the other ranks waited for it, summed over them) and `rounds`
    (the negotiation rounds in which it was the one they waited for). The figures are agreed:
    the same on every rank. `stats()["wire_bytes"]` has the bytes this rank's collectives sent and
    received through the transport, by compression ("none", "bf16", "fp16", "int8"), and
    `residual_floats` what error feedback keeps. Cumulative since init; with `since`, an earlier
    call's result, the figures since then: taken at the ends of a training step, that step's
    stragglers and bytes

        before = ddp.stats()
        train_step()
        print(ddp.stats(since=before)["stragglers"])"""
    counters = _ddp.engine_stats()
    seconds = counters.pop("waited_for_seconds")
    rounds = counters.pop("waited_for_rounds")
    if since is not None:
        earlier = {s["rank"]: s for s in since["stragglers"]}
        for r in earlier:
            if r < len(seconds):
                seconds[r] -= earlier[r]["waited_for_seconds"]
                rounds[r] -= earlier[r]["rounds"]
        for key in ("cycles", "cache_hits", "cache_misses", "tensors", "collectives",
                    "fused_tensors", "bytes"):
            counters[key] -= since.get(key, 0)
        for codec, moved in counters["wire_bytes"].items():
            before = since.get("wire_bytes", {}).get(codec, {})
            for way in ("sent", "received"):
                moved[way] -= before.get(way, 0)
    ranks = sorted((r for r, n in enumerate(rounds) if n > 0), key=lambda r: -seconds[r])
    counters["stragglers"] = [{"rank": r, "waited_for_seconds": seconds[r], "rounds": rounds[r]}
                              for r in ranks]
    return counters
