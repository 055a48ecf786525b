# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The profiler events of the torch.distributed backend "ddp", as torch's own backends make them.

Under torch's profiler (torch.profiler.profile, torch.autograd.profiler.profile) every
operation of the backend is one event named "ddp:<operation>" (Gloo's names: "ddp:all_reduce",
"ddp:all_gather", "ddp:send", ...), asynchronous (opened by the caller, closed by the thread that
finishes the operation, as Gloo's and NCCL's are), its input shapes those of the tensors the
operation reads (complex tensors as their real views, as Gloo records them), its time from the
call to the operation's end.

The events come from the module built against the torch in use (_native.py,
bindings/torch_native): torch's Python record_function takes no tensors and must end on the
thread that opened it. Without that module (a torch the package was not built for, or `pip
install` with build isolation, where the build sees no torch), the backend works the same and
warns once, when a profiler first runs, that it records no events.
"""

import warnings

import torch

from .. import _native

_profiler_enabled = torch.autograd._profiler_enabled  # noqa: SLF001 - a C call: the whole cost when it is off


_Event = _native.module.Event if _native.module is not None else None
_missing = (f"ddp.torch: the torch.distributed backend 'ddp' records no profiler events: "
            f"{_native.missing}")
_warned = False


def _recorded(tensor):
    return torch.view_as_real(tensor) if tensor.is_complex() else tensor


def begin(title, inputs_of, args):
    """The open event of one operation named "ddp:<title>" that reads `inputs_of(*args)` (asked
    only while a profiler runs), or None when none does. The thread that finishes the operation
    calls its end()."""
    if not _profiler_enabled():
        return None
    if _Event is None:
        global _warned
        if not _warned:
            _warned = True
            warnings.warn(_missing, RuntimeWarning, stacklevel=3)
        return None
    event = _Event(f"ddp:{title}", [_recorded(t) for t in inputs_of(*args)])
    return event if event.active else None


def end(event):
    if event is not None:
        event.end()
