# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Horovod's names in ddp.torch, with Horovod's semantics: the deprecated average flag, the
*_built()/*_enabled() queries, join(device), HorovodInternalError."""

import sys
import warnings

import torch

import ddp.torch as hvd


def fail(what):
    sys.exit(f"rank {hvd.rank()}: {what}")


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()

    # What this installation and job have: booleans, and consistent with each other.
    for query in (hvd.mpi_built, hvd.gloo_built, hvd.gloo_enabled, hvd.cuda_built,
                  hvd.rocm_built, hvd.ddl_built, hvd.ccl_built, hvd.mpi_enabled):
        if not isinstance(query(), bool):
            fail(f"{query.__name__}() returned {query()!r}")
    # nccl_built() is NCCL's version code, as Horovod's (0 without it): scripts compare it.
    nccl = hvd.nccl_built()
    if not isinstance(nccl, int) or isinstance(nccl, bool) or (nccl != 0 and nccl < 2000):
        fail(f"nccl_built() returned {nccl!r}")
    if hvd.cuda_built() != bool(nccl) or hvd.gloo_built() or hvd.ccl_built():
        fail("inconsistent *_built()")
    if hvd.mpi_enabled():  # ddprun on one host: shared memory, not MPI
        fail("mpi_enabled() under ddprun")
    try:
        hvd.mpi_threads_supported()
        fail("mpi_threads_supported() without MPI did not raise")
    except hvd.DDPError as e:
        if "does not use MPI" not in str(e):
            fail(f"mpi_threads_supported: {e}")

    # average=: True is Average, False is Sum, with a DeprecationWarning; with op, an error.
    x = torch.full((5,), float(rank + 1))
    total = size * (size + 1) / 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        avg = hvd.allreduce(x, average=True, name="compat.avg")
        summed = hvd.allreduce(x, average=False, name="compat.sum")
        inplace = x.clone()
        hvd.allreduce_(inplace, average=False, name="compat.inplace")
        handle = hvd.allreduce_async(x, average=True, name="compat.async")
        group = hvd.grouped_allreduce([x, x.clone()], average=False, name="compat.group")
        async_avg = hvd.synchronize(handle)
    if not torch.all(avg == total / size) or not torch.all(summed == total):
        fail(f"average=: {avg} {summed}")
    if not torch.all(inplace == total) or not torch.all(async_avg == total / size):
        fail(f"average= in place / async: {inplace} {async_avg}")
    if not all(torch.all(g == total) for g in group):
        fail(f"grouped average=False: {group}")
    if sum(issubclass(w.category, DeprecationWarning) for w in caught) < 5:
        fail(f"no DeprecationWarning for average= ({[str(w.message) for w in caught]})")
    try:
        hvd.allreduce(x, average=True, op=hvd.Sum, name="compat.both")
        fail("average= with op= did not raise")
    except hvd.DDPError as e:
        if "supersedes" not in str(e):
            fail(f"average and op: {e}")
    # No op at all is Average, as in Horovod.
    if not torch.all(hvd.allreduce(x, name="compat.default") == total / size):
        fail("the default op is not Average")

    # HorovodInternalError is the error a broken job raises.
    if hvd.HorovodInternalError is not hvd.DDPError:
        fail("HorovodInternalError is not DDPError")

    # join(device): -1 is the CPU; anything else that is not a device index is refused.
    try:
        hvd.join("cuda")
        fail("join('cuda') did not raise")
    except hvd.DDPError as e:
        if "device" not in str(e):
            fail(f"join('cuda'): {e}")
    last = hvd.join(-1)
    if not 0 <= last < size:
        fail(f"join returned {last}")
    hvd.shutdown()
    print(f"rank {rank}: ok")


if __name__ == "__main__":
    main()
