# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""libddp for TensorFlow 2, with Horovod's names: `import ddp.tensorflow as hvd`.

    import tensorflow as tf
    import ddp.tensorflow as hvd
    hvd.init()
    avg = hvd.allreduce(grad)                     # average over ranks
    rows = hvd.allgather(batch_stats)             # first dimensions may differ
    w = hvd.broadcast(w, root_rank=0)

The operations are TensorFlow ops (asynchronous C++ kernels, `ddp/tensorflow/_ops.so`) that
submit their tensors by name to the same engine as ddp.torch: negotiation, fusion, the response
cache, the timeline, join and error naming, with no Python in the data path; eager and inside
tf.function. allreduce, allgather, broadcast, alltoall and reducescatter have gradients, as in
Horovod. A failed operation raises TensorFlow's error for libddp's code (InvalidArgumentError,
AbortedError, ...) carrying libddp's message, which names the tensor and the rank at fault.
"""

from . import _library  # first: TensorFlow checked, the ops loaded (a clear error without)
from .._ddp import DDPError
from .._ops import Adasum, Average, Max, Min, Product, Sum
from . import _grads  # registers the ops' gradients
from . import elastic, util
from .collectives import (allgather, allreduce, alltoall, barrier, broadcast, grouped_allreduce,
                          join, reducescatter)
from .compression import Compression
from .extras import *  # noqa: F403
from .extras import __all__ as _extras
from .job import (cross_rank, cross_size, init, is_initialized, local_rank, local_size, rank,
                  shutdown, size)
from .tape import DistributedGradientTape, PartialDistributedGradientTape
from .util import _executing_eagerly
from .variables import broadcast_global_variables, broadcast_variables


def __getattr__(name):
    # Keras is imported on first use only: `import ddp.tensorflow` stays free of it.
    if name == "SyncBatchNormalization":
        from .sync_batch_norm import SyncBatchNormalization  # lazy: Keras
        return SyncBatchNormalization
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "allreduce", "grouped_allreduce", "allgather", "broadcast",
    "alltoall", "reducescatter", "join", "barrier", "broadcast_variables", "Sum", "Average",
    "Min", "Max", "Product", "Adasum", "DDPError", "Compression", "DistributedGradientTape",
    "PartialDistributedGradientTape", "broadcast_global_variables",
    "SyncBatchNormalization",  # noqa: F405 - served by __getattr__
    *_extras,
]
