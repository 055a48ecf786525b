# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""libddp for Keras (the Keras 3 that TensorFlow 2.16+ uses), with Horovod's names:
`import ddp.tensorflow.keras as hvd`.

    hvd.init()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size()))
    model.compile(optimizer=opt, loss=...)
    model.fit(x_shard, y_shard, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                           hvd.callbacks.MetricAverageCallback()])

DistributedOptimizer averages the gradients over the ranks (an allreduce each, which the engine
fuses; grouped with num_groups or groups) before the wrapped optimizer clips and applies them,
so every rank applies the same update.
"""
from ..._ddp import DDPError
from ..._ops import Average, Max, Min, Product, Sum
from .. import (allgather, allreduce, alltoall, barrier, broadcast, broadcast_variables,
                cross_rank, cross_size, grouped_allreduce, init, is_initialized, join, local_rank,
                local_size, rank, reducescatter, shutdown, size)
from ..compression import Compression
from . import callbacks, elastic
from .optimizer import (DistributedOptimizer, PartialDistributedOptimizer,
                        broadcast_global_variables)


def __getattr__(name):
    if name == "SyncBatchNormalization":
        from ..sync_batch_norm import SyncBatchNormalization  # lazy: Keras' layers
        return SyncBatchNormalization
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "allreduce", "grouped_allreduce", "allgather", "broadcast",
    "alltoall", "reducescatter", "join", "barrier", "broadcast_variables",
    "broadcast_global_variables", "DistributedOptimizer", "PartialDistributedOptimizer",
    "SyncBatchNormalization", "elastic", "callbacks", "Compression", "Sum",
    "Average", "Min", "Max", "Product", "DDPError",
]
