# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Elastic training for PyTorch, Horovod's `horovod.torch.elastic`: `run`, `TorchState`,
`ElasticSampler` (and `State`, `ObjectState`, `HostsUpdatedInterrupt`). How the job re-forms is
told in `ddp.elastic`; launch with `ddprun --min-np/--max-np/--host-discovery-script` (or
torchrun's `--nnodes MIN:MAX`, with `--max-restarts N` to replace failed workers).

The same `run` recovers a torch.distributed script in the job's own processes: with the default
group on the `ddp` backend (`init_process_group("ddp", init_method="ddp://")`), a failure that
broke the job (torch's backend error, DDP's) puts the state back to its last commit, destroys the
default group, joins the job's next generation and makes the default group again on it (the
survivors' new ranks and size), then brings every worker to rank 0's state. DDP is rebuilt by
the function itself: wrap the model in it at the top of the decorated function, which runs again
after every reset (docs/pytorch-distributed.md, "In-job recovery")."""
from __future__ import annotations

import copy
import math
import random
import sys

import torch
import torch.distributed as dist
import torch.utils.data

from .. import elastic as _elastic
from .. import rank, size
from .._objects import broadcast_object
from ..elastic import HostsUpdatedInterrupt, ObjectState, State, generation, run_fn
from .c10d.operations import NAME
from .optimizer import broadcast_optimizer_state, broadcast_parameters


def _broadcast_object(obj):
    return broadcast_object(obj, root_rank=0)


def run(func):
    """Decorates `func(state, ...)` to run elastically: after a failure the state is put back to
    its last commit(), the job re-formed without the failed workers (torch.distributed's default
    group with it, when it runs on `ddp`) and every worker's state brought to rank 0's; after added
    hosts or a replacement, the job re-formed with them."""
    return run_fn(func, reset_job)


def _default_group_on_ddp() -> bool:
    return (dist.is_available() and dist.is_initialized() and
            str(dist.get_backend()) == NAME)


# Whether the default group ran on `ddp` at a reset: made again at every later one, also after a
# reset that failed before it could make it (ddp.elastic tries the reset again).
_remake = False


def reset_job():
    """ddp.elastic's reset, with torch.distributed's default group made again on the new
    generation when it ran on `ddp` (a default group on another backend is left as it is: it
    cannot follow the job's re-forming, as Horovod's elastic mode leaves it)."""
    global _remake
    if _default_group_on_ddp():
        _remake = True
        dist.destroy_process_group()
    _elastic.reset_job()
    if _remake:
        dist.init_process_group(NAME, init_method="ddp://")


class ElasticSampler(torch.utils.data.Sampler):
    """A DistributedSampler that survives resets: it counts the samples the job has processed
    this epoch (record_batch), and after a reset deals the rest out among the new workers, so no
    sample is processed twice or skipped within an epoch. Give it to TorchState, call
    record_batch(batch_idx, batch_size) after each batch and set_epoch(epoch + 1) at the end of
    each epoch (which forgets what was processed).

    dataset: of constant length. shuffle: a permutation per epoch from seed + epoch (the same on
    every worker). Like DistributedSampler, the last round is padded with the first indices so
    every worker gets as many."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.num_replicas = 1
        self.rank = 0
        self.remaining_indices: list[int] = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch EPOCH: a new order (with shuffle) and nothing processed yet."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Counts one batch of BATCH_SIZE samples on every worker as processed."""
        self.processed_num += batch_size * self.num_replicas

    def record_indices(self, indices):
        """Counts these indices (this worker's; each worker records its own) as processed."""
        self.processed_num += len(indices) * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch = int(state_dict["epoch"])
        self.processed_num = int(state_dict["processed_num"])
        self.reset()

    def reset(self):
        """Deals this epoch's unprocessed samples out among the current workers."""
        self.num_replicas = size()
        self.rank = rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = math.ceil(len(self.remaining_indices) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = list(self.remaining_indices)
        while indices and len(indices) < self.total_size:  # pad, as DistributedSampler does
            indices += indices[:self.total_size - len(indices)]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples


class _Handler:
    """Save, restore and sync of one attribute of a TorchState whose type needs more than a
    broadcast of the object: a model, an optimizer, a sampler."""

    def __init__(self, value):
        self.value = value
        self.save()

    def set_value(self, value):
        self.value = value
        self.save()


class _StateDictHandler(_Handler):
    """Saved as a copy of its state_dict(), restored by load_state_dict(); sync per kind."""

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)


class _ModelHandler(_StateDictHandler):
    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler(_StateDictHandler):
    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class _SamplerHandler(_StateDictHandler):
    def sync(self):
        self.value.load_state_dict(_broadcast_object(self.value.state_dict()))


_HANDLERS = [(torch.nn.Module, _ModelHandler), (torch.optim.Optimizer, _OptimizerHandler),
             (ElasticSampler, _SamplerHandler)]


def _handler(value):
    for kind, handler in _HANDLERS:
        if isinstance(value, kind):
            return handler(value)
    return None


class TorchState(ObjectState):
    """The state of a PyTorch training process: `TorchState(model, optimizer, epoch=0, ...)`.
    Models (torch.nn.Module), optimizers and ElasticSamplers, under any keyword, are saved as
    copies of their state_dict() and synchronised as Horovod does (broadcast_parameters,
    broadcast_optimizer_state, the sampler's state_dict); every other keyword is a plain value
    (ObjectState). All of them are attributes: `state.model`, `state.epoch`."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, plain = {}, {}
        for name, value in kwargs.items():
            handler = _handler(value) if value is not None else None
            if handler is not None:
                handlers[name] = handler
            else:
                plain[name] = value
        object.__setattr__(self, "_handlers", handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(bcast_object=_broadcast_object, get_rank=rank, **plain)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def reset(self):
        """After the job re-formed: rank 0 says where each ElasticSampler's epoch stands, so a
        run says what became of the lost workers' samples (dealt out again, none skipped)."""
        if rank() != 0:
            return
        for handler in self._handlers.values():
            if isinstance(handler, _SamplerHandler):
                sampler = handler.value
                total = len(sampler.dataset)
                print(f"ddp elastic: epoch {sampler.epoch}: {sampler.processed_num} of {total} "
                      f"samples processed as of the last commit; the other "
                      f"{max(total - sampler.processed_num, 0)} (the lost workers' among them) "
                      f"are dealt out among {size()} workers", file=sys.stderr, flush=True)

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            handlers[name].set_value(value)
        object.__setattr__(self, name, value)


__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler",
           "HostsUpdatedInterrupt", "generation"]
