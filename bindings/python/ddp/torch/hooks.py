# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""DDP communication hooks for the torch.distributed backend "ddp" that compress in libddp's
engine (docs/compression.md), not in Python:

    model = DistributedDataParallel(model)            # on init_process_group("ddp")
    model.register_comm_hook(None, ddp.torch.hooks.int8_hook)
    model.register_comm_hook(ddp.torch.hooks.PowerSGDState(matrix_approximation_rank=4),
                             ddp.torch.hooks.powersgd_hook)

Each bucket is averaged over the DDP model's process group by the engine, with its error
feedback kept by bucket (and, for PowerSGD, by gradient) across iterations: allreduce_hook (no
compression), bf16_hook, fp16_hook, int8_hook (the bucket's buffer encoded as a whole) and
powersgd_hook (each gradient of two or more dimensions whose rank allows it approximated at the
state's rank; the others without compression). CUDA buckets go to the engine as they are: it
stages them through host memory once their stream has produced them (its codecs run on the
CPU), and an uncompressed one is reduced by NCCL. The state's `process_group` is the DDP
model's (None: the default group), which must run on the "ddp" backend."""
from __future__ import annotations

import queue
import threading

import torch
import torch.distributed as dist

from .. import _ops
from .._compression import powersgd
from .c10d.groups import BY_TORCH_NAME, callers_stream
from .functions import _torch


class State:
    """A hook's state: the DDP model's process group (None: the default group)."""

    def __init__(self, process_group=None):
        self.process_group = process_group


class PowerSGDState(State):
    """powersgd_hook's state, named as torch's PowerSGD hook's: the process group and the rank
    of the approximation (torch's default is 1; libddp's Compression.powersgd default is 4)."""

    def __init__(self, process_group=None, matrix_approximation_rank=1):
        super().__init__(process_group)
        self.compression = powersgd(matrix_approximation_rank)


def _process_set(state) -> int:
    """The libddp set the DDP model's process group runs on."""
    group = getattr(state, "process_group", None) or dist.group.WORLD
    c10d = dist.distributed_c10d
    world = getattr(c10d, "_world", None)  # torch 2; torch 1.13 keeps the names module-level
    names = world.pg_names if world is not None else c10d._pg_names  # noqa: SLF001 - torch's
    name = names.get(group)
    if name is None or name not in BY_TORCH_NAME:
        if group is dist.group.WORLD or name == "0":
            return _ops.WORLD
        raise _ops.error(f"ddp.torch.hooks: the DDP model's process group {name!r} does not "
                         f"run on the 'ddp' backend (init_process_group('ddp') or new_group "
                         f"with backend='ddp')")
    return BY_TORCH_NAME[name]


class _Completer:
    """One daemon thread that waits for the buckets' reductions in the order they were
    submitted and completes their futures (the backward pass goes on meanwhile)."""

    def __init__(self):
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, work) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="ddp-comm-hooks",
                                                daemon=True)
                self._thread.start()
        self._queue.put(work)

    def _run(self) -> None:
        while True:
            self._queue.get()()


_completer = _Completer()


def _reduce(state, bucket, compression_of):
    """Averages the bucket's gradients in the engine, each with compression_of(tensor) (None:
    without), in at most two grouped allreduces (one per compression); a future of the buffer."""
    buffer = bucket.buffer()
    grads = [buffer] if compression_of is None else bucket.gradients()
    process_set = _process_set(state)
    groups: dict = {}
    for grad in grads:
        codec = compression_of(grad) if compression_of is not None else None
        groups.setdefault(codec, []).append(grad)
    handles = []
    for i, (codec, members) in enumerate(groups.items()):
        name = f"ddp.comm_hook.bucket{bucket.index()}.{i}"
        handles.append(_torch.grouped_allreduce_async_(members, name, _ops.Average, 1.0, 1.0,
                                                       process_set, compression=codec))
    # A CUDA bucket: the finisher thread waits on the stream that made the gradients (its own
    # would be the default one), and the future is CUDA-aware, so that DDP reading the result on
    # any stream is ordered after the allreduce.
    on_callers_stream = callers_stream(buffer)
    future: torch.futures.Future = (torch.futures.Future(devices=[buffer.device])
                                    if buffer.is_cuda else torch.futures.Future())

    def finish():
        try:
            with on_callers_stream():
                for handle in handles:
                    handle.wait()
                future.set_result(buffer)
        except BaseException as e:  # noqa: BLE001 - the future carries it to DDP
            future.set_exception(e)
    _completer.submit(finish)
    return future


def _whole(compression):
    def hook(state, bucket):
        return _reduce(state, bucket, (lambda _: compression) if compression else None)
    return hook


allreduce_hook = _whole(None)
allreduce_hook.__doc__ = "Averages the bucket in libddp's engine, without compression."
bf16_hook = _whole("bf16")
bf16_hook.__doc__ = "Averages the bucket as bfloat16 on the wire, with error feedback."
fp16_hook = _whole("fp16")
fp16_hook.__doc__ = "Averages the bucket as float16 on the wire, with error feedback."
int8_hook = _whole("int8")
int8_hook.__doc__ = "Averages the bucket as blockwise int8 on the wire, with error feedback."
for _hook, _name in ((allreduce_hook, "allreduce_hook"), (bf16_hook, "bf16_hook"),
                     (fp16_hook, "fp16_hook"), (int8_hook, "int8_hook")):
    _hook.__name__ = _hook.__qualname__ = _name


def powersgd_hook(state, bucket):
    """PowerSGD in the engine at the state's rank (a PowerSGDState; None: rank 4): each gradient
    of two or more dimensions whose rank allows it approximated with warm start and error
    feedback, the others averaged without compression."""
    compression = getattr(state, "compression", None) or powersgd(4)
    return _reduce(state, bucket, lambda grad: _ops.for_gradient(compression, grad.shape))


__all__ = ["State", "PowerSGDState", "allreduce_hook", "bf16_hook", "fp16_hook", "int8_hook",
           "powersgd_hook"]
