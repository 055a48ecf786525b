# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""DistributedOptimizer and the broadcast helpers, with Horovod's semantics.

Each parameter's gradient is submitted to the fusion engine from a hook that fires as soon as
backward has accumulated it, so reductions overlap the rest of the backward pass; step() waits
for them and then runs the wrapped optimizer. With backward_passes_per_step=k the gradients of k
backward passes are accumulated locally and reduced once.
"""

import contextlib
import itertools
import warnings
import weakref

import torch

from .. import _ddp, _ops, broadcast_object
from .._ops import ReduceOp, error
from . import functions
from .compression import Compression


def gradient_hook(p, callback):
    """Runs callback() each time backward has accumulated p's gradient (p.grad final for that
    pass). Returns what keeps the hook alive; items with remove() take it off. The hook lives on
    the parameter: callback must not hold its optimizer strongly (a weakref)."""
    def hook(*_):
        callback()
    if hasattr(p, "register_post_accumulate_grad_hook"):  # PyTorch >= 2.1
        return [p.register_post_accumulate_grad_hook(hook)]
    with torch.enable_grad():  # expand_as needs autograd even if built under no_grad()
        # The node that accumulates p's gradient; its hook runs once p.grad is final.
        accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
    return [accumulator.register_hook(hook), accumulator]  # the node keeps its hook alive


_SPARSE = object()  # the "compression context" of a sparse gradient's reduction

# Optimizers are numbered in creation order (the same on every rank) so that two of them (a GAN's
# generator and discriminator) never submit gradients under the same names.
_instances = itertools.count()


class _DistributedOptimizer(torch.optim.Optimizer):
    # Methods of this class are copied into a subclass of the user's optimizer class (see
    # DistributedOptimizer below), hence super(self.__class__, self).

    _ddp_distributed = True

    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, process_set, groups=None, sparse_as_dense=False):
        super(self.__class__, self).__init__(params)
        self._sparse_as_dense = sparse_as_dense
        self._densified = set()  # parameters whose sparse gradient is reduced as dense
        self._compression = compression
        # The engine's codec (Compression.bf16, .int8), which the allreduces take; None for
        # Horovod's compressors, which compress and decompress around them.
        self._codec = getattr(compression, "codec", None)
        self._passes = backward_passes_per_step
        self._op = op
        self._predivide = gradient_predivide_factor
        self._process_set = process_set
        instance = next(_instances)
        self._prefix = "grad." if instance == 0 else f"opt{instance}.grad."
        self._parameter_names = self._name_parameters(named_parameters)
        self._params = []  # the parameters with a gradient hook, in a rank-independent order
        self._delay = {}  # their backward passes left before the reduction (keys: hooked params)
        # p -> None (accumulating locally) or (handle, compression context, reduced tensor)
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        self._hooks = []
        self._register_hooks(p for group in self.param_groups for p in group["params"])
        # Horovod's groups: parameters reduced together (one grouped allreduce per dtype) once
        # every one of them has its gradient. p -> its group (a list of parameters).
        self._group_of = {}
        self._ready = set()  # parameters of a group whose gradient is in, group not submitted
        for members in self._make_groups(groups):
            for p in members:
                self._group_of[p] = members

    def _name_parameters(self, named_parameters):
        all_params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is None:
            return {p: f"{self._prefix}noname.{i}" for i, p in enumerate(all_params)}
        named = list(named_parameters)
        if any(not isinstance(item, tuple) or len(item) != 2 for item in named):
            raise error("DistributedOptimizer: named_parameters must be an iterable of "
                        "(name, parameter) pairs, e.g. model.named_parameters()")
        names = [name for name, _ in named]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise error(f"DistributedOptimizer: parameter names must be unique; repeated: "
                        f"{', '.join(duplicates)}")
        by_param = {p: f"{self._prefix}{name}" for name, p in named}
        unnamed = [i for i, p in enumerate(all_params) if p not in by_param]
        if unnamed:
            raise error(f"DistributedOptimizer: named_parameters does not name {len(unnamed)} "
                        f"of the optimizer's parameters (indices {unnamed[:10]}); pass the "
                        f"named_parameters() of the model the optimizer was built from")
        return by_param

    def _make_groups(self, groups):
        hooked = list(self._params)
        if groups is None or groups == 0:
            return []
        if isinstance(groups, int) and not isinstance(groups, bool):
            if groups < 0:
                raise error(f"DistributedOptimizer: groups must be >= 0, got {groups}")
            n = min(groups, len(hooked)) or 1
            size, extra = divmod(len(hooked), n)
            out, at = [], 0
            for i in range(n):
                take = size + (1 if i < extra else 0)
                out.append(hooked[at:at + take])
                at += take
            return [g for g in out if g]
        try:
            lists = [list(g) for g in groups]
        except TypeError:
            raise error("DistributedOptimizer: groups must be an int or a list of lists of "
                        "parameters") from None
        seen = set()
        for members in lists:
            for p in members:
                if not any(p is q for q in hooked):
                    raise error("DistributedOptimizer: groups holds a tensor that is not a "
                                "trainable parameter of the optimizer")
                if id(p) in seen:
                    raise error("DistributedOptimizer: a parameter is in two groups")
                seen.add(id(p))
        return [g for g in lists if g]

    def _register_hooks(self, params):
        for p in params:
            if not p.requires_grad or p in self._delay:
                continue
            self._params.append(p)
            self._delay[p] = self._passes
            self._hooks.extend(gradient_hook(p, self._make_hook(p)))

    def remove_hooks(self):
        """Stops submitting gradients (the hooks of PyTorch >= 2.1 live on the parameters)."""
        for hook in self._hooks:
            if hasattr(hook, "remove"):
                hook.remove()
        self._hooks = []

    def add_param_group(self, param_group):
        super(self.__class__, self).add_param_group(param_group)
        if hasattr(self, "_hooks"):  # not while the base class's __init__ adds the first groups
            params = self.param_groups[-1]["params"]
            offset = len(self._parameter_names)
            for i, p in enumerate(params):
                self._parameter_names.setdefault(p, f"{self._prefix}noname.{offset + i}")
            self._register_hooks(params)

    def load_state_dict(self, state_dict):
        self._handles.clear()
        self._synchronized = False
        for p in self._params:
            self._delay[p] = self._passes
        return super(self.__class__, self).load_state_dict(state_dict)

    def _make_hook(self, p):
        owner = weakref.ref(self)  # a hook on a parameter must not keep the optimizer alive

        def hook():
            optimizer = owner()
            if optimizer is not None:
                optimizer._on_gradient(p)  # noqa: SLF001 - its own, through a weak reference
        return hook

    def _included(self):
        """Whether this rank is in the optimizer's process set: the others train on their own,
        reducing nothing (Horovod's rule)."""
        if not hasattr(self, "_member"):
            self._member = _ddp.rank() in _ops.process_set_ranks(self._process_set)
        return self._member

    def _on_gradient(self, p):
        if not self._included():
            return
        if self._handles.get(p) is not None and self._delay[p] <= 0:
            raise error(
                f"DistributedOptimizer: the gradient of '{self._parameter_names[p]}' was computed "
                f"more than backward_passes_per_step={self._passes} times before step(); "
                f"raise backward_passes_per_step to accumulate gradients locally",
                "FAILED_PRECONDITION")
        self._delay[p] -= 1
        if self._delay[p] != 0:
            self._handles[p] = None
        elif p in self._group_of:
            self._handles[p] = None
            self._ready.add(p)
            if all(q in self._ready for q in self._group_of[p]):
                self._submit_group(self._group_of[p])
        else:
            self._handles[p] = self._submit(p)

    def _scales(self):
        if self._op == ReduceOp.AVERAGE and self._predivide != 1.0:
            return 1.0 / self._predivide, self._predivide
        return 1.0, 1.0

    def _dense_gradient(self, p):
        """The gradient to reduce: sparse ones as dense with sparse_as_dense (and then p.grad is
        the dense tensor)."""
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        if p.grad.is_sparse and self._sparse_as_dense:
            p.grad = p.grad.to_dense()
            self._densified.add(p)  # made sparse again once reduced, as Horovod does
        return p.grad

    def _submit(self, p):
        grad = self._dense_gradient(p)
        name = self._parameter_names[p]
        if grad.is_sparse:
            # Horovod's sparse path: indices and values allgathered, the union is the gradient.
            if self._op not in (ReduceOp.SUM, ReduceOp.AVERAGE):
                raise error(f"DistributedOptimizer: '{name}' has a sparse gradient, which op "
                            f"{_ops.op_name(self._op)} cannot reduce (Sum and Average can; or pass "
                            f"sparse_as_dense=True)")
            handle = functions.sparse_allreduce_async(grad, name=name, op=self._op,
                                                      process_set=self._process_set)
            return handle, _SPARSE, None
        tensor, ctx = self._compression.compress(grad)
        prescale, postscale = self._scales()
        handle = functions.allreduce_async_(tensor, name=name, op=self._op,
                                            prescale_factor=prescale, postscale_factor=postscale,
                                            process_set=self._process_set,
                                            compression=self._codec_for(tensor))
        return handle, ctx, tensor

    def _codec_for(self, tensor):
        """The engine codec a gradient is reduced with: the compressor's if it runs in the engine
        and takes the tensor (PowerSGD: a matrix whose rank allows it), else None."""
        return None if self._codec is None else _ops.for_gradient(self._compression, tensor.shape)

    def _submit_group(self, members):
        """One grouped allreduce per dtype of the group's (compressed) gradients."""
        by_dtype = {}
        for p in members:
            grad = self._dense_gradient(p)
            if grad.is_sparse:
                raise error(f"DistributedOptimizer: '{self._parameter_names[p]}' has a sparse "
                            f"gradient and is in a group; groups reduce dense gradients "
                            f"(pass sparse_as_dense=True)")
            tensor, ctx = self._compression.compress(grad)
            codec = self._codec_for(tensor)  # PowerSGD: matrices only
            by_dtype.setdefault((tensor.dtype, codec), []).append((p, tensor, ctx))
        prescale, postscale = self._scales()
        for (_, codec), entries in by_dtype.items():
            name = "group." + self._parameter_names[entries[0][0]]
            handle = functions.grouped_allreduce_async_(
                [t for _, t, _ in entries], name=name, op=self._op, prescale_factor=prescale,
                postscale_factor=postscale, process_set=self._process_set, compression=codec)
            for p, tensor, ctx in entries:
                self._handles[p] = (handle, ctx, tensor)
                self._ready.discard(p)

    def synchronize(self):
        """Waits for every gradient's reduction (submitting the ones no hook submitted: unused
        parameters, or fewer than backward_passes_per_step passes). A parameter that had no
        gradient on this rank contributes zeros, so every rank applies the same update. A rank
        outside the optimizer's process set reduces nothing."""
        if not self._included():
            self._synchronized = True
            return
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and p.requires_grad and p not in self._delay:
                    raise error(
                        f"DistributedOptimizer: '{self._parameter_names.get(p, '?')}' has a "
                        f"gradient but "
                        f"no reduction hook (it did not require grad when the optimizer was "
                        f"wrapped); its ranks would diverge. Wrap the optimizer after setting "
                        f"requires_grad.", "FAILED_PRECONDITION")
        for p in self._params:
            if self._handles.get(p) is None and p.requires_grad:
                if p in self._group_of:
                    self._submit_group(self._group_of[p])
                else:
                    self._handles[p] = self._submit(p)
        first_error = None
        for p, (handle, ctx, tensor) in self._handles.items():
            try:
                result = handle.wait()
            except _ddp.DDPError as e:
                first_error = first_error or e
                continue
            if ctx is _SPARSE:
                p.grad = result
            elif ctx is not None:
                p.grad.copy_(self._compression.decompress(tensor, ctx))
        for p in self._densified:
            p.grad = p.grad.to_sparse()
        self._densified.clear()
        for p in self._params:
            self._delay[p] = self._passes
        self._handles.clear()
        self._ready.clear()
        # A failed reduction leaves nothing synchronised: the step after a retry reduces again.
        self._synchronized = first_error is None
        if first_error is not None:
            raise first_error

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For code that calls synchronize() itself (e.g. to clip reduced gradients):
        opt.synchronize(); clip(...); with opt.skip_synchronize(): opt.step()"""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(): the gradients are reduced "
                              "a second time (use `with optimizer.skip_synchronize(): "
                              "optimizer.step()`)")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        pending = [self._parameter_names[p] for p, value in self._handles.items()
                   if value is not None]
        if self._handles:
            example = f" (e.g. '{pending[0]}')" if pending else ""
            raise error(
                f"optimizer.zero_grad() was called after loss.backward() but before "
                f"optimizer.step() or optimizer.synchronize(): {len(self._handles)} gradients"
                f"{example} are being reduced or accumulated. Call zero_grad() before "
                f"backward(), or step()/synchronize() first.", "FAILED_PRECONDITION")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,  # noqa: N802 - Horovod's name
                         backward_passes_per_step=1, op=ReduceOp.AVERAGE,
                         gradient_predivide_factor=1.0, num_groups=0, groups=None,
                         sparse_as_dense=False, process_set=0):
    """Wraps a torch optimizer so that step() uses gradients reduced over all ranks (Horovod's
    signature).

    named_parameters: model.named_parameters(), to name the reductions (in timelines and
        errors); without it parameters are named by position.
    compression: Compression.none, Compression.fp16 (Horovod's: cast to half precision before
        the allreduce), or the engine's codecs with error feedback, Compression.bf16 and
        Compression.int8 (docs/compression.md).
    backward_passes_per_step: local gradient accumulation before each reduction.
    op: ddp.Average (default), ddp.Sum, ... gradient_predivide_factor: with Average, divide by
        this before the sum and by size()/factor after it (Horovod's semantics).
    groups: an int (the parameters split into that many groups, in order) or a list of lists
        of parameters: each group is reduced as one grouped allreduce once all of its gradients
        are in (num_groups, deprecated in Horovod, is the int form).
    sparse_as_dense: sparse gradients (nn.Embedding(sparse=True)) are reduced as dense tensors;
        without it they are reduced as sparse (indices and values allgathered).
    process_set: the ranks that train together (a ProcessSet, or its id).
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise error(f"DistributedOptimizer: expected a torch.optim.Optimizer, got "
                    f"{type(optimizer).__name__}")
    if (not isinstance(backward_passes_per_step, int) or isinstance(backward_passes_per_step, bool)
            or backward_passes_per_step < 1):
        raise error(f"DistributedOptimizer: backward_passes_per_step must be an int >= 1, got "
                    f"{backward_passes_per_step!r}")
    op = _ops.check_op(op, "DistributedOptimizer")
    predivide = float(gradient_predivide_factor)
    if predivide <= 0:
        raise error("DistributedOptimizer: gradient_predivide_factor must be positive")
    if predivide != 1.0 and op != ReduceOp.AVERAGE:
        raise error("DistributedOptimizer: gradient_predivide_factor applies to op=Average only")
    if not (isinstance(compression, type) and hasattr(compression, "compress")
            and hasattr(compression, "decompress")):
        raise error("DistributedOptimizer: compression must be Compression.none, "
                    "Compression.fp16 or a class with compress/decompress")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    if num_groups and groups is None:
        groups = num_groups
    wrapped = cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
                  op, predivide, process_set, groups, bool(sparse_as_dense))
    # Share the original's state (e.g. momentum restored from a checkpoint) and defaults (used
    # by add_param_group); param_groups are already the same dicts, so LR schedulers built on
    # the original keep working.
    wrapped.state = optimizer.state
    wrapped.defaults = optimizer.defaults
    return wrapped


def broadcast_parameters(params, root_rank=0):
    """Overwrites params with root_rank's: a state_dict(), or an iterable of (name, tensor)
    pairs such as model.named_parameters(). Tensors are broadcast in place, all at once."""
    _ops.require_init("broadcast_parameters")
    if isinstance(params, dict):
        items = sorted(params.items())
    else:
        items = list(params)
        if any(not isinstance(item, tuple) or len(item) != 2 for item in items):
            raise error("broadcast_parameters: expected a state_dict or (name, tensor) pairs")
    handles = []
    for name, tensor in items:
        if not isinstance(tensor, torch.Tensor):
            raise error(f"broadcast_parameters: '{name}' is a {type(tensor).__name__}, not a "
                        f"tensor")
        handles.append(functions.broadcast_async_(tensor.data, root_rank,
                                                  name=f"broadcast.{name}"))
    for handle in handles:
        handle.wait()


def _initialize_state(optimizer, model):
    """Horovod's rule for an optimizer that has not stepped yet: zero gradients for the trainable
    parameters (sparse for SparseAdam and a sparse nn.Embedding of `model`) and one step of the
    wrapped optimizer alone, so that its state (momentum buffers, ...) exists to be broadcast."""
    sparse = set()
    if model is not None:
        for m in model.modules():
            if isinstance(m, torch.nn.Embedding) and m.sparse:
                sparse.update(id(p) for p in m.parameters())
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
                if isinstance(optimizer, torch.optim.SparseAdam) or (
                        isinstance(optimizer, torch.optim.SGD) and id(p) in sparse):
                    p.grad = p.grad.to_sparse()
    if getattr(optimizer, "_ddp_distributed", False):
        super(optimizer.__class__, optimizer).step()  # no reduction: the other ranks do not step
    else:
        optimizer.step()


def broadcast_optimizer_state(optimizer, root_rank=0, model=None):
    """Makes every rank's optimizer state (momentum buffers, step counts, hyper-parameters in
    param_groups) equal to root_rank's. An optimizer that has not stepped yet first gets its
    state as Horovod makes it (zero gradients, one local step: see _initialize_state); `model`
    says which parameters are sparse embeddings."""
    _ops.require_init("broadcast_optimizer_state")
    if isinstance(optimizer, torch.optim.LBFGS):
        raise error("broadcast_optimizer_state: torch.optim.LBFGS's state cannot be broadcast "
                    "(as in Horovod)")
    if len(optimizer.state_dict()["state"]) == 0:
        _initialize_state(optimizer, model)
    state = broadcast_object(optimizer.state_dict() if _ddp.rank() == root_rank else None,
                             root_rank)
    if _ddp.rank() != root_rank:
        # load_state_dict replaces the param_group dicts; keep the existing ones (LR schedulers
        # and the wrapped optimizer hold them) and copy the values in.
        groups = optimizer.param_groups
        optimizer.load_state_dict(state)
        for old, new in zip(groups, optimizer.param_groups):
            old.update(new)
        optimizer.param_groups = groups
