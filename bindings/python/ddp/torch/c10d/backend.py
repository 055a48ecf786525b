# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The backend's classes and its registration with torch.distributed: on torch 2 the C++ Backend
built for its torch (bindings/torch_native/backend.cc, in a ProcessGroup named "ddp") over the
Python operations (_Forwarded), else a Backend written in Python, else (torch 1.13, and torch 2
releases that cannot make a Backend from Python) a ProcessGroup of its own."""
from __future__ import annotations

import inspect
import warnings

import torch
import torch.distributed as dist

from .. import _native, _shutdown
from . import monitored as _monitored
from . import rendezvous as _rendezvous
from .operations import NAME, Operations

_C = torch._C._distributed_c10d  # noqa: SLF001 - torch's own


if hasattr(_C, "Backend"):
    class BackendDDP(Operations, _C.Backend):
        """torch 2: the backend of a torch ProcessGroup, for CPU and CUDA tensors."""

        # Read by torch's Python (batch_isend_irecv, split_group): inherited, these properties
        # would ask the C++ side, which asks back here without end.
        supports_coalescing = False
        supports_splitting = False

        def __init__(self, store, rank, size, timeout, own_job=False):
            _C.Backend.__init__(self, rank, size)
            self._start(store, rank, size, timeout, any_source=False, own_job=own_job)


class _Forwarded(Operations):
    """torch 2: the operations behind the C++ Backend (bindings/torch_native/backend.cc), which
    torch calls and which forwards each operation here."""

    _engine_completes = True

    def __init__(self, store, rank, size, timeout, own_job=False):
        self._start(store, rank, size, timeout, any_source=True, own_job=own_job)


class ProcessGroupDDP(Operations, dist.ProcessGroup):
    """torch 1.13 (which has no Backend class), and torch 2 releases whose Backend cannot be made
    from Python: a ProcessGroup of its own."""

    def __init__(self, store, rank, size, timeout):
        dist.ProcessGroup.__init__(self, rank, size)
        self._start(store, rank, size, timeout, any_source=not hasattr(_C, "Backend"))


def _create(store, rank, size, timeout):
    """torch 1.13's creator: the process group itself."""
    return ProcessGroupDDP(store, rank, size, timeout)


# Whether torch's Backend can be made from Python: torch 2.15's can; some torch 2 releases (2.11)
# bind no constructor for it, and their creators may return a whole ProcessGroup instead, which
# torch then uses as the group. Learned at the first group made.
_backend_constructible = True


def _ddp_alone(options):
    """Whether the group torch is making runs ddp on every device. torch hands a creator no
    backend string: this reads the backend map of torch's helper that called it (its local
    `backend_config`), and says False where it cannot tell (torch then registers the backend in
    its own group, named "custom")."""
    torchs = getattr(options, "process_group", None)
    if torchs is None or list(getattr(torchs, "_device_types", [])):
        return False  # no group to stand in for, or another backend is in it already
    frame = inspect.currentframe()
    try:
        while frame is not None:
            config = frame.f_locals.get("backend_config")
            if hasattr(config, "get_device_backend_map"):
                return set(config.get_device_backend_map().values()) == {NAME}
            frame = frame.f_back
        return False
    finally:
        del frame


def _named_group(options, backend):
    """The process group torch uses for the C++ backend: torch's own, named "ddp" (torch names a
    plugin's group "custom"), with the backend for CPU and CUDA tensors. Under
    TORCH_DISTRIBUTED_DEBUG=DETAIL the backend is wrapped in torch's checking wrapper, as torch
    wraps Gloo's and NCCL's."""
    # torch gives the backend the group's store under a device prefix ("cpu/"); the group's own is
    # the one under it.
    store = getattr(options.store, "underlying_store", options.store)
    group = _native.module.NamedProcessGroup(store, options.group_rank, options.group_size)
    kind = dist.ProcessGroup.BackendType.CUSTOM
    group._set_default_backend(kind)  # noqa: SLF001 - torch's own set-up of a group
    torchs = getattr(options, "process_group", None)
    if getattr(torchs, "bound_device_id", None) is not None:
        group.bound_device_id = torchs.bound_device_id
    c10d = dist.distributed_c10d
    if (hasattr(c10d, "_create_process_group_wrapper") and dist.is_gloo_available() and
            c10d.get_debug_level() == c10d.DebugLevel.DETAIL):
        backend = c10d._create_process_group_wrapper(  # noqa: SLF001 - what torch does here
            wrapped_pg=backend, store_prefix=str(getattr(options, "group_id", "ddp")),
            store=options.store, rank=options.group_rank, world_size=options.group_size,
            timeout=options.timeout)
    for device in ("cpu", "cuda"):
        group._register_backend(torch.device(device), kind, backend)  # noqa: SLF001
    return group


_warned_python_only = False


def _python_only():
    """Says once that torch 2's backend runs without its C++ part, and what that leaves out."""
    global _warned_python_only
    if not _warned_python_only:
        _warned_python_only = True
        warnings.warn(f"ddp.torch: the torch.distributed backend 'ddp' runs through torch's "
                      f"Python trampolines on torch {torch.__version__}: each waited operation "
                      f"about 0.1 ms slower, and no recv from any source, Work.is_completed() or "
                      f"its name in torch's reports: {_native.missing}", RuntimeWarning,
                      stacklevel=3)


def _forwarding(ops, rank, size, timeout):
    """The C++ Backend over `ops`; its completers end with the interpreter (_shutdown)."""
    end = _native.module.end_completions
    if end not in _shutdown._native_ends:  # noqa: SLF001 - this package's own
        _shutdown._native_ends.append(end)  # noqa: SLF001
    return _native.module.ForwardingBackend(ops, rank, size, timeout)


def create_extended(options, backend_options=None):  # noqa: ARG001 - torch's signature
    """torch 2's creator (extended API): the C++ Backend (the module built for this torch) over
    the Python operations; without that module, a Backend written in Python or, where torch
    cannot make one from Python, a ProcessGroup of its own (as on torch 1.13)."""
    global _backend_constructible
    args = (options.store, options.group_rank, options.group_size, options.timeout)
    if hasattr(_native.module, "ForwardingBackend"):
        backend = _forwarding(_Forwarded(*args), *args[1:])
        # A group of ddp alone gets the group named "ddp"; in a group of several backends
        # ("cpu:ddp,cuda:nccl") torch registers this one beside the others.
        return _named_group(options, backend) if _ddp_alone(options) else backend
    _python_only()
    if _backend_constructible:
        try:
            return BackendDDP(*args)
        except TypeError as e:
            if "No constructor defined" not in str(e):
                raise
            _backend_constructible = False
    return ProcessGroupDDP(*args)


def own_group(store, rank, size, timeout):
    """torch 2: a torch ProcessGroup (named "ddp") on a libddp job of its own among the ranks that
    make it through `store`, outside torch's registry of groups and beside whatever else this
    process runs (torch.distributed's default group, other such groups, other ranks' in threads
    of the same process): what a reconfigurable group (torchft's, ddp/torch/torchft.py) makes at
    each reconfiguration. Returns (the group, its operations: health(), abort(), shutdown())."""
    if not hasattr(_C, "Backend"):
        raise RuntimeError(f"torch.distributed backend 'ddp': a group of its own needs torch 2 "
                           f"(this is torch {torch.__version__})")
    if hasattr(_native.module, "ForwardingBackend"):
        ops = _Forwarded(store, rank, size, timeout, own_job=True)
        backend = _forwarding(ops, rank, size, timeout)
        group = _native.module.NamedProcessGroup(store, rank, size)
    else:
        _python_only()
        ops = backend = BackendDDP(store, rank, size, timeout, own_job=True)
        group = dist.ProcessGroup(store, rank, size)
    kind = dist.ProcessGroup.BackendType.CUSTOM
    group._set_default_backend(kind)  # noqa: SLF001 - torch's own set-up of a group
    for device in ("cpu", "cuda"):
        group._register_backend(torch.device(device), kind, backend)  # noqa: SLF001
    return group, ops


def register():
    """Registers the backend and the ddp:// init method (idempotent); `import ddp.torch` calls
    it."""
    _rendezvous.register()
    if not hasattr(_C, "Backend"):
        _monitored.extend_torch_113(NAME)
    if hasattr(dist.Backend, NAME.upper()):
        return
    params = inspect.signature(dist.Backend.register_backend).parameters
    if hasattr(_C, "Backend") and "extended_api" in params:
        dist.Backend.register_backend(NAME, create_extended, extended_api=True,
                                      devices=["cpu", "cuda"])
    else:
        dist.Backend.register_backend(NAME, _create)
