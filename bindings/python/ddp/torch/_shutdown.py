# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The torch.distributed backend's own threads (finishers, completers) and the interpreter's end.

Those threads are daemons: a script may end with operations still in flight. But a daemon thread
inside a torch call that let go of the GIL (a tensor copy, a future's completion, a store's add)
when the interpreter shuts down is ended by CPython with pthread_exit from inside torch's C++,
whose unwinding through a noexcept frame is std::terminate ("terminate called without an active
exception", SIGABRT, after the script itself ended well). So each such call is made inside
`torch_call()`: at the interpreter's end, before it starts shutting down (threading's exit hook),
new calls are refused for good (the thread waits for the process to end) and the calls under way
are waited for (a few seconds at most: a completion's callback may wait on more work). The C++
completers of torch 2's backend (bindings/torch_native/completion.cc) end the same way.
"""
from __future__ import annotations

import contextlib
import threading
import time

_WAIT_AT_EXIT_S = 5.0

_cond = threading.Condition()
_busy = 0
_ending = False


@contextlib.contextmanager
def torch_call():
    """Around a call into torch on one of the backend's own threads."""
    global _busy
    with _cond:
        ending = _ending
        if not ending:
            _busy += 1
    if ending:
        park()
    try:
        yield
    finally:
        with _cond:
            _busy -= 1
            _cond.notify_all()


def park():
    """The interpreter is ending: this daemon thread touches nothing more, and waits for the
    process to end (a Python sleep: ended there, the thread unwinds through no C++)."""
    while True:
        time.sleep(3600)


_native_ends = []  # the C++ completers' own end (c10d/backend.py adds it where the module has them)


def _at_exit():
    global _ending
    with _cond:
        _ending = True
        _cond.wait_for(lambda: _busy == 0, timeout=_WAIT_AT_EXIT_S)
    for end in _native_ends:
        end(_WAIT_AT_EXIT_S)


# Run as the main thread finishes, before the interpreter starts shutting down (and before the
# atexit module's handlers); the hook concurrent.futures uses for its own worker threads.
threading._register_atexit(_at_exit)  # noqa: SLF001 - no public hook runs early enough
