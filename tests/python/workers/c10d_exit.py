# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""A script that ends on its own error while operations of the 'ddp' backend are still in flight
on its finisher threads (a send never received, an allreduce never joined): it
must exit with its error (status 1), never be aborted by "terminate called without an active
exception" as the interpreter shuts down under those threads. Rank 1 stays away, then leaves.
Run as 2 ranks with torch's env:// variables."""
import os
import time

import torch
import torch.distributed as dist

import ddp.torch  # noqa: F401 - registers the backend



class SlowShutdown:
    """Deleted as the interpreter shuts down (the module's globals go then): its half second
    there lets the finisher thread wake during the shutdown, as it does wherever that is slow."""

    def __del__(self):
        time.sleep(0.5)


slow_shutdown = SlowShutdown()
dist.init_process_group("ddp")
rank = dist.get_rank()
t = torch.ones(10)
dist.all_reduce(t)
if rank == 0:
    dist.send(t, 1)  # one that arrives: the pair's connections are made
    dist.isend(t, 1)  # one that rank 1 never receives
    dist.all_reduce(t, async_op=True)  # one that rank 1 never joins
    time.sleep(0.5)  # the finisher threads are waiting on them now
    raise RuntimeError("the script's own error")
dist.recv(t, 0)
time.sleep(4)
os._exit(0)
