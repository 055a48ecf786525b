# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""monitored_barrier under the 'ddp' backend, as Gloo's: passed by every rank (the default group
and a later one); rank 0 names the one rank that did not come (the others that came are told it
failed), or with wait_all_ranks every one; a zero timeout on rank 0; and after each failure the
group's collectives and the next monitored barrier work, the absent rank included. Run as 3 ranks
with torch's env:// variables. Prints "c10d monitored ok <rank>"."""
import re
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import ddp.torch  # noqa: F401 - registers the backend


def raises(pattern, call):
    try:
        call()
    except RuntimeError as e:
        if not re.search(pattern, str(e)):
            sys.exit(f"rank {dist.get_rank()}: wanted /{pattern}/, got: {e}")
        return
    sys.exit(f"rank {dist.get_rank()}: no error, wanted /{pattern}/")


def still_works(rank, size):
    t = torch.full((5,), float(rank))
    dist.all_reduce(t)
    if not torch.equal(t, torch.full((5,), float(sum(range(size))))):
        sys.exit(f"rank {rank}: all_reduce after a monitored barrier: {t}")


def main():
    dist.init_process_group("ddp")
    rank, size = dist.get_rank(), dist.get_world_size()
    short = timedelta(seconds=1)
    dist.monitored_barrier(timeout=timedelta(seconds=30))
    dist.monitored_barrier(timeout=timedelta(seconds=30), wait_all_ranks=True)
    pair = dist.new_group([0, 1])
    if rank in (0, 1):
        dist.monitored_barrier(pair, timeout=timedelta(seconds=30))
    # Rank 2 stays away: rank 0 names it; rank 1, which came, is told that rank 0 failed.
    if rank == 0:
        raises(r"\[Rank 0\]: Rank 2 failed to pass monitoredBarrier in 1000 ms",
               lambda: dist.monitored_barrier(timeout=short))
    elif rank == 1:
        raises("Rank 1 successfully reached monitoredBarrier, but received errors while waiting "
               "for send/recv from rank 0", lambda: dist.monitored_barrier(timeout=short))
    still_works(rank, size)
    # The next one: every rank, rank 2 included, takes part in the same barrier.
    dist.monitored_barrier(timeout=timedelta(seconds=30))
    # Ranks 1 and 2 stay away: with wait_all_ranks rank 0 names both.
    if rank == 0:
        raises(r"Ranks 1, 2 failed to pass monitoredBarrier",
               lambda: dist.monitored_barrier(timeout=timedelta(seconds=0.2),
                                              wait_all_ranks=True))
        raises("Rank 0 timed out in monitoredBarrier after 0 ms",
               lambda: dist.monitored_barrier(timeout=timedelta(seconds=0)))
    still_works(rank, size)
    dist.monitored_barrier(timeout=timedelta(seconds=30))
    still_works(rank, size)
    print(f"c10d monitored ok {rank}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
