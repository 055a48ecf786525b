# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Horovod's Keras callbacks for libddp: `hvd.callbacks.*` with
`import ddp.tensorflow.keras as hvd`."""
import keras
import numpy as np

from ..._ops import Average
from ..collectives import allreduce
from ..job import size
from ..variables import broadcast_variables


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Makes every rank start from root_rank's weights: the model's variables at the start of
    training, the optimizer's (built by the first step) after the first batch. local_variables
    (or register_local_var): variables each rank keeps its own (not broadcast)."""

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__()
        del device
        self.root_rank = root_rank
        self._optimizer_done = False
        self._local = {}
        for var in local_variables or []:
            self.register_local_var(var)

    def register_local_var(self, var):
        """A variable that this rank keeps its own: not broadcast."""
        self._local[id(var)] = var

    def on_train_begin(self, logs=None):
        broadcast_variables([v for v in self.model.variables if id(v) not in self._local],
                            self.root_rank)

    def on_train_batch_end(self, batch, logs=None):
        if self._optimizer_done:
            return
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None and optimizer.built:
            broadcast_variables(optimizer.variables, self.root_rank)
        self._optimizer_done = True


class MetricAverageCallback(keras.callbacks.Callback):
    """At each epoch's end, replaces every metric in `logs` by its average over the ranks (so
    that rank 0's log, and callbacks after this one, see the job's metrics)."""

    def __init__(self, device=""):
        super().__init__()
        del device

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        for key in sorted(logs):
            value = logs[key]
            if isinstance(value, (int, float, np.floating, np.integer)) or np.ndim(value) == 0:
                averaged = allreduce(np.float64(value), op=Average,
                                     name=f"MetricAverageCallback.{epoch}.{key}")
                logs[key] = float(averaged.numpy())


class LearningRateWarmupCallback(keras.callbacks.Callback):
    """Goyal et al.'s gradual warmup, as Horovod's: over the first `warmup_epochs` the learning
    rate grows linearly, batch by batch, from initial_lr / size() to initial_lr (the rate for the
    whole job's batch). steps_per_epoch: batches per epoch (else taken from fit's params).
    momentum_correction: each change of the rate scales SGD's (and RMSprop's) momentum buffer by
    new / old rate, so that past updates continue at the new rate."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        super().__init__()
        self.initial_lr = float(initial_lr)
        self.warmup_epochs = warmup_epochs
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self._epoch = 0

    def on_train_begin(self, logs=None):
        if self.steps_per_epoch is None:
            self.steps_per_epoch = (self.params or {}).get("steps")
        if not self.steps_per_epoch:
            raise ValueError("LearningRateWarmupCallback: pass steps_per_epoch (fit did not say "
                             "how many batches an epoch has)")

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def _rate(self, batch):
        progress = (self._epoch + float(batch) / self.steps_per_epoch) / self.warmup_epochs
        n = size()
        return self.initial_lr / n * (progress * (n - 1) + 1)

    def _set_rate(self, new):
        _set_rate(self.model.optimizer, new, self.momentum_correction)

    def on_train_batch_begin(self, batch, logs=None):
        if self._epoch >= self.warmup_epochs:
            return
        self._set_rate(self._rate(batch))

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.warmup_epochs - 1:
            self._set_rate(self.initial_lr)
            if self.verbose:
                print(f"Epoch {epoch + 1}: finished gradual learning rate warmup to "
                      f"{self.initial_lr:g}.")
        if logs is not None:
            logs["lr"] = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Horovod's schedule: from start_epoch until end_epoch (exclusive; None: to the end) the
    learning rate is initial_lr * multiplier(epoch), where multiplier is a function of the epoch
    or a number (then multiplier ** (epoch - start_epoch)). staircase: set at each epoch's
    start; else every batch, with the epoch's fraction (steps_per_epoch: batches per epoch,
    else fit's). momentum_correction: as LearningRateWarmupCallback's."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        if initial_lr is None:
            raise ValueError("LearningRateScheduleCallback: initial_lr is required")
        self.initial_lr = float(initial_lr)
        self.multiplier = (multiplier if callable(multiplier)
                           else lambda epoch: multiplier ** (epoch - start_epoch))
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self._epoch = 0

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = (self.params or {}).get("steps")
            if not self.steps_per_epoch:
                raise ValueError("LearningRateScheduleCallback: pass steps_per_epoch (fit did "
                                 "not say how many batches an epoch has)")

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self._epoch < self.start_epoch or (self.end_epoch is not None
                                              and self._epoch >= self.end_epoch):
            return
        if self.staircase:
            if batch == 0:
                _set_rate(self.model.optimizer, self.initial_lr * self.multiplier(self._epoch),
                          self.momentum_correction)
        else:
            epoch = self._epoch + float(batch) / self.steps_per_epoch
            _set_rate(self.model.optimizer, self.initial_lr * self.multiplier(epoch),
                      self.momentum_correction)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))


def _set_rate(optimizer, new, momentum_correction):
    """Sets the optimizer's learning rate. momentum_correction (Goyal et al.): the momentum
    buffer holds past updates at the old rate; scaled by new / old it continues at the new one
    (what Horovod's callbacks do by scaling the momentum for one batch)."""
    old = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
    optimizer.learning_rate = new
    if momentum_correction and old > 0 and new != old:
        for buffer in _momentum_buffers(optimizer):
            buffer.assign(buffer * (new / old))


def _momentum_buffers(optimizer):
    """The buffers that hold rate-scaled past updates: SGD's and RMSprop's momentum (Keras 3),
    inside a LossScaleOptimizer too; none for optimizers whose state does not scale with the rate
    (Adam's moments)."""
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)
    if not getattr(optimizer, "momentum", 0):
        return []
    if isinstance(optimizer, keras.optimizers.SGD):
        return list(getattr(optimizer, "momentums", []))
    if isinstance(optimizer, keras.optimizers.RMSprop):
        return list(getattr(optimizer, "_momentums", []))
    return []


__all__ = ["BroadcastGlobalVariablesCallback", "MetricAverageCallback",
           "LearningRateWarmupCallback", "LearningRateScheduleCallback"]
