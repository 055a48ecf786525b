# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""libddp for PyTorch: `import ddp.torch as ddp`.

The functions of `ddp` on torch CPU tensors (without copies: the engine reads and writes the
tensors' storage), plus Horovod's training helpers:

    import ddp.torch as ddp
    ddp.init()
    ddp.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = ddp.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    ddp.broadcast_optimizer_state(opt, root_rank=0)

Importing it also registers the torch.distributed backend "ddp" (`init_process_group("ddp")`,
for DistributedDataParallel and the rest of torch.distributed: docs/pytorch-distributed.md).

Parameter-server training (ddp.ps underneath): ddp.ParameterServerOptimizer(opt, named_parameters,
mode="sync"|"async", staleness=s).
"""

from . import _supported  # refuses a torch older than the oldest supported, naming it
from .. import (Adasum, Average, DDPError, DDPValueError, Handle, Max, Min, Product, ProcessSet,
                ReduceOp, Sum, add_process_set, allgather_object, barrier, broadcast_object,
                ccl_built, cross_rank, cross_size, cuda_built, ddl_built, dump_flight_recorder,
                engine_stats, flight_record,
                gloo_built, gloo_enabled, global_process_set, init, is_initialized, join,
                local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported,
                nccl_built, poll, rank, remove_process_set, rocm_built, shutdown, size,
                start_timeline, stats, stop_timeline, synchronize)
from .._api import COMMON
from . import elastic
from .compression import Compression
from .functions import (allgather, allgather_async, allreduce, allreduce_, allreduce_async,
                        allreduce_async_, alltoall, alltoall_async, broadcast, broadcast_,
                        broadcast_async, broadcast_async_, grouped_allgather,
                        grouped_allgather_async, grouped_allreduce, grouped_allreduce_,
                        grouped_allreduce_async, grouped_allreduce_async_, grouped_reducescatter,
                        grouped_reducescatter_async, reducescatter, reducescatter_async,
                        sparse_allreduce_async)
from .optimizer import DistributedOptimizer, broadcast_optimizer_state, broadcast_parameters
from .ps import ParameterServerOptimizer
from .sync_batch_norm import SyncBatchNorm
from . import c10d as _c10d
from . import hooks  # DDP comm hooks that compress in the engine

_c10d.register()  # torch.distributed's backend "ddp": init_process_group("ddp")

# Horovod raises HorovodInternalError when the job breaks (a peer died, the collective failed);
# libddp's DDPError is that error, with the culprit named (e.ranks, e.tensor), so code written
# for Horovod (`except hvd.HorovodInternalError`) catches it unchanged.
HorovodInternalError = DDPError

__all__ = [*COMMON, "Compression", "DistributedOptimizer", "broadcast_parameters",
           "broadcast_optimizer_state", "ParameterServerOptimizer", "HorovodInternalError",
           "grouped_allgather", "grouped_allgather_async", "grouped_reducescatter",
           "grouped_reducescatter_async", "sparse_allreduce_async", "SyncBatchNorm", "elastic",
           "hooks"]
