# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddp.ps: parameter-server mode on numpy arrays (and any buffer).

    import ddp.ps as ps
    ps.init()                                   # a server-only rank serves here, then exits
    ps.register("w", weights, mode="async", optimizer="adam", lr=1e-3)
    ps.pull("w", out=weights)                   # everyone starts from worker 0's value
    for batch in data:
        ps.push_pull("w", gradient(weights, batch), out=weights)   # async: the new weights
    ps.finish()

Keys are registered by every worker in the same order (worker 0's value is the initial one; the
others' only give the dtype and shape). Modes, stated precisely in docs/parameter-server.md:

- ``mode="sync"``: the servers only sum. ``push_pull`` returns the sum of exactly one push per
  worker for this step (``handle.contributors`` says how many: fewer only after a worker loss
  with ``DDP_PS_ON_WORKER_LOSS=continue``); the workers run the optimizer.
- ``mode="async"``: each push is applied at once by the server's optimizer (``"sgd"`` with
  momentum/nesterov/weight_decay as torch.optim.SGD, ``"adam"`` as torch.optim.Adam, ``"sum"``);
  a pull returns the latest value. ``staleness=s`` bounds how far a worker runs ahead of the
  slowest: after c pushes it pulls only once every live worker has pushed at least c - s times.

Pushes may travel compressed (``register(..., compression=ddp.Compression.int8)``: bf16, fp16 or
int8 in C++, with error feedback; docs/compression.md); ``worker_stats()`` counts their bytes.

Roles: ``ddprun -np 4 --servers 2`` (or ``DDP_PS_SERVERS=2`` under mpirun: the last 2 ranks) starts
server processes beside the workers; without it every rank is worker and server (colocated).
"""

from .._ddp import DDPError
from .client import (Handle, finish, init, is_initialized, is_server, is_worker, num_servers,
                     num_workers, pull, pull_async, push, push_async, push_pull, push_pull_async,
                     rank, register, serve, server_bytes, server_index, server_stats, size,
                     worker_index, worker_stats)

__all__ = ["init", "finish", "serve", "is_initialized", "is_worker", "is_server", "rank", "size",
           "worker_index", "server_index", "num_workers", "num_servers", "register", "push",
           "pull", "push_pull", "push_async", "pull_async", "push_pull_async", "Handle",
           "server_stats", "server_bytes", "worker_stats", "DDPError"]
