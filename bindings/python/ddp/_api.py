# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The names every framework's package exports: Horovod's common API, which `ddp`, `ddp.torch`
(and, with its own functions, `ddp.tensorflow`) share. Each package's __all__ is this list and its
own additions, written once here."""

COMMON = (
    "DDPError", "DDPValueError", "Handle", "ReduceOp", "Sum", "Average", "Min", "Max", "Product",
    "Adasum", "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "allgather", "allgather_async", "broadcast", "broadcast_",
    "broadcast_async", "broadcast_async_", "reducescatter", "reducescatter_async", "alltoall",
    "alltoall_async", "barrier", "join", "synchronize", "poll", "add_process_set",
    "remove_process_set", "ProcessSet", "global_process_set", "start_timeline", "stop_timeline",
    "engine_stats", "stats", "flight_record", "dump_flight_recorder", "broadcast_object",
    "allgather_object", "mpi_built", "mpi_enabled",
    "mpi_threads_supported", "gloo_built", "gloo_enabled", "nccl_built", "cuda_built",
    "rocm_built", "ddl_built", "ccl_built",
)
