# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Elastic training for Keras, Horovod's `horovod.tensorflow.keras.elastic`: `KerasState`, the
callbacks that keep it current during `fit`, and `run` (ddp.tensorflow.elastic's).

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)

    @hvd.elastic.run
    def train(state):
        model.fit(data, steps_per_epoch=..., epochs=epochs - state.epoch,
                  callbacks=[hvd.elastic.UpdateEpochStateCallback(state),
                             hvd.elastic.UpdateBatchStateCallback(state),
                             hvd.elastic.CommitStateCallback(state)])

    train(state)
"""
import keras

from ..elastic import (HostsUpdatedInterrupt, ObjectState, State, TensorFlowKerasState,
                       generation, run)


class KerasState(TensorFlowKerasState):
    """The state of a built Keras model and its optimizer (given, or the compiled one), and plain
    values as keyword arguments (TensorFlowKerasState)."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, **kwargs)


class CommitStateCallback(keras.callbacks.Callback):
    """Commits the state every batches_per_commit batches and at each epoch's end (where a
    failure comes back to, and where added hosts come in)."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        if batches_per_commit < 1:
            raise ValueError("CommitStateCallback: batches_per_commit must be >= 1")
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs=None):
        self.batches_remaining = self.batches_per_commit  # the same count on every rank

    def on_train_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps state.batch at the number of batches done in the current epoch (0 at its end).
    Horovod's keeps the last batch's index, one less, so that a resumed epoch repeats a batch;
    and it shortens the resumed epoch through fit's params, which Keras 3 does not read back:
    here the training function passes the remaining steps itself (see docs/python.md)."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_train_batch_end(self, batch, logs=None):
        self.state.batch = batch + 1

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keeps state.epoch at the number of epochs done, across resets: fit counts its epochs from
    0 (or initial_epoch) on every call, the state from the job's start."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch
        self._first = None

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch
        self._first = None

    def on_epoch_begin(self, epoch, logs=None):
        if self._first is None:
            self._first = epoch  # fit's initial_epoch, if the program passed one

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self.initial_epoch + (epoch - (self._first or 0)) + 1


__all__ = ["KerasState", "CommitStateCallback", "UpdateBatchStateCallback",
           "UpdateEpochStateCallback", "run", "State", "ObjectState", "HostsUpdatedInterrupt",
           "generation"]
