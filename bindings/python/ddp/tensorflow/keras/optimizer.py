# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Keras' side of ddp.tensorflow.keras: DistributedOptimizer and PartialDistributedOptimizer (a
copy of the Keras optimizer that reduces the gradients over the ranks before it clips and
applies them), LossScaleOptimizer made to reduce before its overflow check, and
broadcast_global_variables for a model."""
import keras

from ... import _ops
from ..._ops import Average, Sum
from .._reduce import _reduce_gradients
from ..compression import Compression
from ..tape import _local_gradient, _local_variables
from ..variables import broadcast_variables

if not hasattr(keras.optimizers.Optimizer, "_clip_gradients"):  # pragma: no cover
    raise ImportError(f"ddp.tensorflow.keras needs Keras 3 (this is Keras {keras.__version__}); "
                      f"with Keras 2 (tf_keras), use ddp.tensorflow.DistributedGradientTape")


def _reduce(optimizer, grads, variables=None):
    """The gradients reduced over the ranks, but for those of local variables
    (PartialDistributedOptimizer, register_local_var), which stay this rank's, divided by the
    set's size unless scale_local_gradients=False (Horovod's rule)."""
    cfg = optimizer._ddp  # noqa: SLF001 - the settings DistributedOptimizer gave it
    grads = list(grads)
    if variables is None:
        variables = getattr(optimizer, "_trainable_variables", None)
    if cfg["local"] and (variables is None or len(variables) != len(grads)):
        raise _ops.error("ddp.tensorflow.keras.DistributedOptimizer: cannot tell which gradients "
                         "are the local variables' (apply() got no trainable_variables that "
                         "match the gradients)")
    local = {i for i, v in enumerate(variables or []) if id(v) in cfg["local"]}
    reduced = _reduce_gradients([None if i in local else g for i, g in enumerate(grads)],
                                op=cfg["op"], compression=cfg["compression"],
                                sparse_as_dense=cfg["sparse_as_dense"],
                                predivide=cfg["predivide"], num_groups=cfg["num_groups"],
                                groups=cfg["groups"], process_set=cfg["process_set"],
                                name=cfg["name"], what="DistributedOptimizer", scale=cfg["scale"])
    for i in local:
        reduced[i] = _local_gradient(grads[i], cfg["process_set"], cfg["scale"],
                                     cfg["scale_local_gradients"])
    return reduced


def _checked(optimizer, groups, op, gradient_predivide_factor, backward_passes_per_step,
             average_aggregated_gradients):
    """DistributedOptimizer's arguments checked as Horovod's are: its reduce op, and the factor
    its reduced gradients are multiplied by (the accumulated passes' sum, as Horovod, unless
    average_aggregated_gradients)."""
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise _ops.error(f"ddp.tensorflow.keras.DistributedOptimizer: needs a Keras optimizer, "
                         f"got {type(optimizer).__name__}")
    if groups is not None and not isinstance(groups, int):
        if any(not isinstance(x, int) for g in groups for x in g):
            raise _ops.error("ddp.tensorflow.keras.DistributedOptimizer: groups are lists of "
                             "gradient indices (the order of model.trainable_variables) here, or "
                             "an int")
    op = _ops.check_op(op, "DistributedOptimizer")
    if op not in (Sum, Average) and gradient_predivide_factor != 1.0:
        raise _ops.error("ddp.tensorflow.keras.DistributedOptimizer: gradient_predivide_factor "
                         "needs op Average or Sum")
    if not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
        raise _ops.error("ddp.tensorflow.keras.DistributedOptimizer: backward_passes_per_step "
                         f"must be an int >= 1, got {backward_passes_per_step!r}")
    # Keras' accumulation averages the passes; Horovod's default is their sum.
    scale = 1.0 if average_aggregated_gradients else float(backward_passes_per_step)
    if scale != 1.0 and op not in (Sum, Average):
        raise _ops.error("ddp.tensorflow.keras.DistributedOptimizer: backward_passes_per_step "
                         "with op Min, Max, Product or Adasum needs "
                         "average_aggregated_gradients=True")
    return op, scale


def _distributed_class(base):
    """A subclass of the Keras optimizer class BASE, of the same name, that reduces the
    gradients over the ranks before it clips and applies them (its `_ddp` settings say how)."""

    def _backend_apply_gradients(self, grads, trainable_variables):
        # The variables of the gradients that _clip_gradients gets (local ones stay local).
        self._ddp_variables = trainable_variables
        try:
            return base._backend_apply_gradients(self, grads, trainable_variables)  # noqa: SLF001 - Keras' own, overridden
        finally:
            self._ddp_variables = None

    def _clip_gradients(self, grads):
        # Called once per update with the gradients to apply (accumulated, if accumulating), before
        # clipping and weight decay: where Horovod's optimizer reduces them. Inside a
        # LossScaleOptimizer they were reduced before its overflow check.
        if getattr(self, "_ddp_reduced_outside", False):
            return base._clip_gradients(self, grads)  # noqa: SLF001 - Keras' own, overridden
        return base._clip_gradients(self, _reduce(self, grads,  # noqa: SLF001 - Keras' own, overridden
                                                  getattr(self, "_ddp_variables", None)))

    def register_local_var(self, var):
        """This variable's gradient stays this rank's (not reduced over the ranks)."""
        self._ddp["local"][id(var)] = var

    return type(base.__name__, (base,), {"_clip_gradients": _clip_gradients,
                                         "_backend_apply_gradients": _backend_apply_gradients,
                                         "register_local_var": register_local_var,
                                         "__module__": base.__module__})


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",  # noqa: N802 - Horovod's name
                         compression=Compression.none, sparse_as_dense=False,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, process_set=_ops.WORLD,
                         average_aggregated_gradients=False, scale_local_gradients=True):
    """A copy of the Keras optimizer `optimizer` (same class and configuration) that reduces the
    gradients over the ranks before it clips and applies them. backward_passes_per_step=N
    accumulates N passes locally (Keras' gradient_accumulation_steps) and reduces once per
    update: their sum, as Horovod, or their average with average_aggregated_gradients=True.
    groups (lists of variable indices) or num_groups: grouped allreduces instead of one per
    gradient. A keras.optimizers.LossScaleOptimizer (mixed_float16) gives one around
    a distributed copy of its inner optimizer; any LossScaleOptimizer around a distributed one
    (Keras' compile makes one under mixed_float16) reduces the scaled gradients before its
    overflow check, so that every rank skips or applies the same step.
    """
    del device_dense, device_sparse
    op, scale = _checked(optimizer, groups, op, gradient_predivide_factor,
                         backward_passes_per_step, average_aggregated_gradients)
    if isinstance(compression, type) and compression is Compression.none:
        compression = None
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        # Its inner optimizer made distributed: the reduction moves before the overflow check
        # (_loss_scale_apply below), where every rank sees the same gradients.
        inner = DistributedOptimizer(
            optimizer.inner_optimizer, name=name, compression=compression,
            sparse_as_dense=sparse_as_dense, backward_passes_per_step=backward_passes_per_step,
            op=op, gradient_predivide_factor=gradient_predivide_factor, num_groups=num_groups,
            groups=groups, process_set=process_set,
            average_aggregated_gradients=average_aggregated_gradients,
            scale_local_gradients=scale_local_gradients)
        return keras.optimizers.LossScaleOptimizer(
            inner, initial_scale=optimizer.initial_scale,
            dynamic_growth_steps=optimizer.dynamic_growth_steps, name=optimizer.name)
    cls = _distributed_class(type(optimizer))
    config = optimizer.get_config()
    if backward_passes_per_step > 1:
        config["gradient_accumulation_steps"] = backward_passes_per_step
    wrapped = cls.from_config(config)
    wrapped._ddp = {"name": name or f"DistributedOptimizer.{optimizer.name}", "op": op,  # noqa: SLF001 - the settings the copy reads
                    "compression": compression, "sparse_as_dense": sparse_as_dense,
                    "predivide": float(gradient_predivide_factor), "groups": groups,
                    "num_groups": num_groups, "process_set": process_set, "scale": scale,
                    "local": {}, "scale_local_gradients": scale_local_gradients}
    return wrapped


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",  # noqa: N802 - Horovod's name
                                compression=Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=Average, groups=None,
                                process_set=_ops.WORLD, local_layers=None,
                                scale_local_gradients=True, **kwargs):
    """A DistributedOptimizer that leaves the gradients of local_layers' (Keras layers)
    trainable variables unreduced: this rank's own, divided by the set's size unless
    scale_local_gradients=False, as Horovod's. Other arguments: DistributedOptimizer's."""
    if _ops.check_op(op, "PartialDistributedOptimizer") not in (Sum, Average):
        raise _ops.error("ddp.tensorflow.keras.PartialDistributedOptimizer: op must be Average "
                         "or Sum (as Horovod's)")
    local = _local_variables(local_layers, "keras.PartialDistributedOptimizer")
    opt = DistributedOptimizer(optimizer, name=name, device_dense=device_dense,
                               device_sparse=device_sparse, compression=compression,
                               sparse_as_dense=sparse_as_dense,
                               gradient_predivide_factor=gradient_predivide_factor, op=op,
                               groups=groups, process_set=process_set,
                               scale_local_gradients=scale_local_gradients, **kwargs)
    inner = getattr(opt, "inner_optimizer", opt)  # a LossScaleOptimizer's distributed one
    for var in local:
        inner.register_local_var(var)
    return opt


_keras_loss_scale_apply = keras.optimizers.LossScaleOptimizer.apply


def _loss_scale_apply(self, grads, trainable_variables=None):
    """LossScaleOptimizer.apply, for one whose inner optimizer is a DistributedOptimizer (made so
    by DistributedOptimizer(LossScaleOptimizer(opt)), or wrapped by Keras' compile under
    mixed_float16, or by hand): the still-scaled gradients are reduced over the ranks before the
    overflow check. An inf or NaN on any rank is then in every rank's sum, so all ranks skip the
    step and halve the scale together; checked on local gradients, a rank that overflowed would
    skip the reduction that the others wait in."""
    inner = self.inner_optimizer
    if getattr(inner, "_ddp", None) is None:
        return _keras_loss_scale_apply(self, grads, trainable_variables)
    grads = _reduce(inner, grads, trainable_variables)
    inner._ddp_reduced_outside = True  # noqa: SLF001 - read by its _clip_gradients
    try:
        return _keras_loss_scale_apply(self, grads, trainable_variables)
    finally:
        inner._ddp_reduced_outside = False  # noqa: SLF001 - read by its _clip_gradients


keras.optimizers.LossScaleOptimizer.apply = _loss_scale_apply


def broadcast_global_variables(model, root_rank):
    """Assigns root_rank's model (and, once built, optimizer) variables on every rank."""
    broadcast_variables(model.variables, root_rank)
    if getattr(model, "optimizer", None) is not None and model.optimizer.built:
        broadcast_variables(model.optimizer.variables, root_rank)
