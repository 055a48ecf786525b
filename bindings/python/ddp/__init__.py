# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""libddp for Python: collectives on numpy arrays and any buffer, without copies.

    import ddp
    ddp.init()                        # the job ddprun, torchrun, mpirun or srun started
    g = ddp.allreduce(grad)           # average over ranks (a new array)
    ddp.allreduce_(grad, op=ddp.Sum)  # in place
    h = ddp.allreduce_async(grad, name="layer1.grad"); ...; ddp.synchronize(h)

Every collective is named (unnamed calls get an automatic name) and goes through libddp's fusion
engine, so ranks may submit in different orders. Errors are ddp.DDPError with the full message.
`import ddp.torch` gives the same functions on torch tensors plus DistributedOptimizer.
"""

from . import _ddp, elastic
from ._api import COMMON
from ._ddp import DDPError, DDPValueError
from ._job import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built, dump_flight_recorder,
                   engine_stats, flight_record,
                   gloo_built, gloo_enabled, init, is_initialized, join, local_rank, local_size,
                   mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built,
                   shutdown, size, start_timeline, stats, stop_timeline)
from ._numpy import (Compression, allgather, allgather_async, allreduce, allreduce_,
                     allreduce_async, allreduce_async_, alltoall, alltoall_async, broadcast,
                     broadcast_, broadcast_async, broadcast_async_, grouped_allreduce,
                     grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_,
                     reducescatter, reducescatter_async)
from ._objects import allgather_object, broadcast_object
from ._ops import (Adasum, Average, Handle, Max, Min, ProcessSet, Product, ReduceOp, Sum,
                   add_process_set, barrier, global_process_set, poll, remove_process_set,
                   synchronize)

__version__ = _ddp.__version__
__all__ = [*COMMON, "Compression"]
