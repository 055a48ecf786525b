# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Parameter-server training for PyTorch: ParameterServerOptimizer (re-exported by ddp.torch).

    import ddp.torch as ddp
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    opt = ddp.ParameterServerOptimizer(opt, named_parameters=model.named_parameters(),
                                       mode="async")
    for x, y in data:
        opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    opt.finish()

Every parameter becomes a key of ddp.ps (registered in the same order on every worker, worker 0's
values the initial ones, which every worker pulls at once, so no broadcast is needed):

- mode="sync": step() pushes every gradient and pulls the sum of one push per worker (BytePS's
  summation service), divides it by the number of workers that contributed, and runs the wrapped
  optimizer locally: the same update on every worker, as with DistributedOptimizer.
- mode="async": the servers run the optimizer. step() pushes every gradient and pulls the
  parameters the servers hold now; the wrapped optimizer's settings (torch.optim.SGD: lr,
  momentum, nesterov, weight_decay; torch.optim.Adam: lr, betas, eps, weight_decay) are sent to
  the servers at registration, per parameter group, and the wrapped optimizer itself never
  steps. staleness=s bounds how far a worker runs ahead of the slowest (ddp.ps).

Each gradient is pushed from a hook as soon as backward has accumulated it, so the transfers
overlap the rest of the backward pass (as DistributedOptimizer's allreduces do); step() waits for
them, pushing any that no hook did (parameters unused this step push zeros). With
backward_passes_per_step=k, k passes are accumulated locally and pushed once. In async mode the
pulled parameters land in a buffer of their own and are copied in at step(), not while backward
may still read them.

CUDA parameters are staged through pinned host memory (buffers per parameter, reused).
compression=Compression.int8 (or .bf16, Horovod's .fp16) pushes float32 gradients encoded, with
error feedback (ddp.ps.register).
"""

import weakref

import torch

from ..ps import client as _ps
from .._ops import error
from .functions import _TorchAdapter
from .optimizer import gradient_hook

_PREFIX = "param."


def _server_optimizer(optimizer, group, gradient_scale):
    """The server-side optimizer settings that do what `optimizer` does to `group`."""
    if isinstance(optimizer, torch.optim.Adam) and not isinstance(optimizer, torch.optim.AdamW):
        if group.get("amsgrad"):
            raise error("ddp.torch.ParameterServerOptimizer: Adam(amsgrad=True) has no server-side "
                        "equivalent")
        return dict(optimizer="adam", lr=group["lr"], betas=group["betas"], eps=group["eps"],
                    weight_decay=group.get("weight_decay", 0.0), gradient_scale=gradient_scale)
    if isinstance(optimizer, torch.optim.SGD):
        if group.get("dampening", 0):
            raise error("ddp.torch.ParameterServerOptimizer: SGD(dampening != 0) has no "
                        "server-side equivalent")
        return dict(optimizer="sgd", lr=group["lr"], momentum=group.get("momentum", 0.0),
                    nesterov=group.get("nesterov", False),
                    weight_decay=group.get("weight_decay", 0.0), gradient_scale=gradient_scale)
    raise error(f"ddp.torch.ParameterServerOptimizer: mode='async' runs the optimizer on the "
                f"servers, which have SGD and Adam; {type(optimizer).__name__} is neither "
                f"(use mode='sync', where the workers run it)")


class ParameterServerOptimizer:
    """Wraps `optimizer` for parameter-server training; see the module's documentation.

    named_parameters: (name, parameter) pairs (model.named_parameters()); without them the
    parameters are named by their order in the optimizer's groups. gradient_scale (async):
    the servers multiply each gradient by it first (e.g. 1/num_workers).
    backward_passes_per_step: backward passes accumulated locally before a push (1).
    compression: how float32 gradients are pushed (ddp.ps.register's: Compression.bf16, .int8,
    Horovod's .fp16, with error feedback; other dtypes go as they are)."""

    def __init__(self, optimizer, named_parameters=None, mode="sync", staleness=None,
                 gradient_scale=1.0, backward_passes_per_step=1, compression=None):
        if mode not in ("sync", "async"):
            raise error(f"ddp.torch.ParameterServerOptimizer: mode must be 'sync' or 'async', "
                        f"not {mode!r}")
        if int(backward_passes_per_step) < 1:
            raise error("ddp.torch.ParameterServerOptimizer: backward_passes_per_step must be "
                        ">= 1")
        self._passes = int(backward_passes_per_step)
        if not _ps.is_initialized():
            _ps.init()
        self.optimizer = optimizer
        self.mode = mode
        by_param = {}
        if named_parameters is not None:
            for name, p in named_parameters:
                by_param.setdefault(id(p), name)  # a shared parameter keeps its first name
        self._params = []  # (key name, parameter, pinned value, pinned gradient)
        self._index = {}  # id(parameter) -> its place in _params
        self._left = []  # per parameter: backward passes before its push
        self._handles = {}  # index -> the push in flight: (handle, host gradient, pulled into)
        self._staging = {}  # async, CPU: index -> where the pulled value lands until step()
        self._hooks = []
        self.pushed_from_hooks = 0  # pushes a hook made (for tests and benchmarks)
        index = 0
        for group in optimizer.param_groups:
            settings = _server_optimizer(optimizer, group, gradient_scale) \
                if mode == "async" else {}
            for p in group["params"]:
                if named_parameters is not None:
                    if id(p) not in by_param:
                        raise error("ddp.torch.ParameterServerOptimizer: a parameter of the "
                                    "optimizer is not among named_parameters")
                    key = _PREFIX + by_param[id(p)]
                else:
                    key = f"{_PREFIX}{index}"
                index += 1
                pinned = pinned_grad = None
                if p.is_cuda:
                    pinned = torch.empty(p.shape, dtype=p.dtype, pin_memory=True)
                    pinned_grad = torch.empty(p.shape, dtype=p.dtype, pin_memory=True)
                host = self._host(p.data, pinned)
                buf = _TorchAdapter.describe(host, "ParameterServerOptimizer", key, True)
                _ps.register_buffer(key, buf, None, mode=mode,
                                     staleness=staleness if mode == "async" else None,
                                     compression=compression if p.dtype == torch.float32
                                     else None, **self._defaults(settings))
                # Every worker starts from worker 0's values (or the checkpoint's).
                self._pull(key, p, pinned)
                self._index[id(p)] = len(self._params)
                self._params.append((key, p, pinned, pinned_grad))
                self._left.append(self._passes)
                if p.requires_grad:
                    self._hooks.extend(gradient_hook(p, self._make_hook(len(self._params) - 1)))

    @staticmethod
    def _defaults(settings):
        out = dict(optimizer="sgd", lr=0.01, momentum=0.0, nesterov=False, betas=(0.9, 0.999),
                   eps=1e-8, weight_decay=0.0, gradient_scale=1.0)
        out.update(settings)
        return out

    @staticmethod
    def _host(t, pinned):
        if pinned is None:
            return t.contiguous()
        pinned.copy_(t, non_blocking=False)
        return pinned

    def _pull(self, key, p, pinned):
        target = pinned if pinned is not None else p.data
        buf = _TorchAdapter.describe(target, "ParameterServerOptimizer", key, True)
        _ps.submit_buffers(_ps.PULL, key, None, buf, target, "pull").wait()
        if pinned is not None:
            p.data.copy_(pinned)

    def pull_parameters(self):
        """Copies the servers' current values into the parameters (async: the shared weights as
        they are now, e.g. before an evaluation)."""
        for key, p, pinned, _ in self._params:
            self._pull(key, p, pinned)

    def _make_hook(self, i):
        owner = weakref.ref(self)  # the hook lives on the parameter: not the optimizer with it

        def hook():
            optimizer = owner()
            if optimizer is not None:
                optimizer._on_gradient(i)  # noqa: SLF001 - its own, through a weak reference
        return hook

    def _on_gradient(self, i):
        if self._left[i] <= 0:
            raise error(f"ddp.torch.ParameterServerOptimizer: the gradient of "
                        f"'{self._params[i][0][len(_PREFIX):]}' was computed more than "
                        f"backward_passes_per_step={self._passes} times before step()",
                        "FAILED_PRECONDITION")
        self._left[i] -= 1
        if self._left[i] == 0:
            self._push(i)
            self.pushed_from_hooks += 1

    def _push(self, i):
        key, p, pinned, pinned_grad = self._params[i]
        grad = p.grad
        if grad is None:
            grad = torch.zeros_like(p.data)  # every worker pushes every key every step
        grad = self._host(grad, pinned_grad)
        send = _TorchAdapter.describe(grad, "ParameterServerOptimizer.step", key, False)
        if self.mode == "sync":
            out = grad  # the sum comes back in place
        elif pinned is not None:
            out = pinned
        else:
            out = self._staging.get(i)
            if out is None:
                out = self._staging[i] = torch.empty_like(p.data)
        recv = _TorchAdapter.describe(out, "ParameterServerOptimizer.step", key, True)
        self._handles[i] = (_ps.submit_buffers(_ps.PUSH_PULL, key, send, recv, out, "step"),
                            grad, out)

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for i in range(len(self._params)):
            if i not in self._handles:
                self._push(i)  # no hook pushed it: unused this step, or no grad required
        first_error = None
        for i, (key, p, pinned, _) in enumerate(self._params):
            handle, grad, out = self._handles[i]
            try:
                handle.wait()
            except Exception as e:  # noqa: BLE001 - every push waited for before raising: buffers are in use
                first_error = first_error or e
                continue
            if self.mode == "sync":
                grad.div_(max(1, handle.contributors))
                if p.grad is None:
                    p.grad = grad.to(p.device)
                elif grad.data_ptr() != p.grad.data_ptr():
                    p.grad.copy_(grad)
            else:
                p.data.copy_(out, non_blocking=False)
        self._handles.clear()
        self._left = [self._passes] * len(self._params)
        if first_error is not None:
            raise first_error
        if self.mode == "sync":
            self.optimizer.step()
        return loss

    def zero_grad(self, set_to_none=False):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def finish(self):
        """Done training: the servers are told (and, colocated, served until all are done)."""
        _ps.finish()

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state)
