# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Any picklable object between ranks, over the numpy collectives: broadcast_object and
allgather_object (ddp.torch and ddp.tensorflow export them too)."""

import pickle

import numpy as np

from . import _ddp, _ops
from ._numpy import allgather, broadcast_

def broadcast_object(obj, root_rank=0, name=None, process_set=_ops.WORLD):
    """root_rank's picklable obj, on every rank (of process_set; root_rank is a job rank)."""
    _ops.require_init("broadcast_object")
    process_set = _ops.set_id(process_set, "broadcast_object")
    _ops.check_root(root_rank, process_set, "broadcast_object")
    name = _ops.auto_name("broadcast_object", name, process_set)
    payload = pickle.dumps(obj) if _ddp.rank() == root_rank else b""
    length = broadcast_(np.array([len(payload)], dtype=np.int64), root_rank, name=name + ".len",
                        process_set=process_set)
    data = np.zeros(int(length[0]), dtype=np.uint8)
    if _ddp.rank() == root_rank:
        data[:] = np.frombuffer(payload, dtype=np.uint8)
    broadcast_(data, root_rank, name=name + ".data", process_set=process_set)
    return obj if _ddp.rank() == root_rank else pickle.loads(data.tobytes())


def allgather_object(obj, name=None, process_set=_ops.WORLD):
    """A list of every rank's (of process_set's) picklable obj, the lowest rank's first."""
    _ops.require_init("allgather_object")
    process_set = _ops.set_id(process_set, "allgather_object")
    name = _ops.auto_name("allgather_object", name, process_set)
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    lengths = allgather(np.array([payload.size], dtype=np.int64), name=name + ".len",
                        process_set=process_set)
    data = allgather(payload, name=name + ".data", process_set=process_set)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return [pickle.loads(data[offsets[i]:offsets[i + 1]].tobytes()) for i in range(len(lengths))]
