# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The parameter-server client on numpy arrays and buffers: joining the job in its role (worker
or server), registering keys, and push / pull / push_pull (ddp.ps's functions; the package's
docstring says how the modes behave)."""

import atexit
import sys

import numpy as np

from .. import _ddp, _ops, _rendezvous
from .._ddp import DDPError
from .._numpy import NumpyAdapter

_keys: dict[str, tuple] = {}  # name -> (id, dtype code, shape, numpy dtype)
PUSH, PULL, PUSH_PULL = 0, 1, 2


def _describe(x, what, label, writable):
    return NumpyAdapter.describe(x, f"ps.{what}", label, writable)  # the collectives' checks


def init(serve_and_exit=True):
    """Joins the parameter-server job (DDP_* variables; DDP_PS_* for the roles and checkpoints).

    On a rank that only serves, and with serve_and_exit (the default), serves until every worker
    has finished or died and then exits the process (status 0, or 1 on an error), so that one
    script can run on every rank as under mpirun. With serve_and_exit=False it returns, and the
    caller calls serve()."""
    _ddp.ps_init(_rendezvous.overrides())
    if serve_and_exit and is_server() and not is_worker():
        try:
            serve()
        except DDPError as e:
            print(f"ddp.ps server: {e}", file=sys.stderr, flush=True)
            sys.exit(1)
        sys.exit(0)


def serve():
    """On a server-only rank: serves until every worker has finished or died."""
    _ddp.ps_serve()
    _ddp.ps_finish()


def finish():
    """Tells the servers this worker is done (a colocated rank then serves until every worker is
    done). Safe to call twice; also called at exit."""
    _keys.clear()
    _ddp.ps_finish()


atexit.register(lambda: _ddp.ps_is_initialized() and _ddp.ps_finish())


def is_initialized():
    return _ddp.ps_is_initialized()


def _info(what):
    if not _ddp.ps_is_initialized():
        raise _ops.error(f"ddp.ps.{what}() called before ddp.ps.init()", "FAILED_PRECONDITION")
    return _ddp.ps_info()


def is_worker():
    return _info("is_worker")["is_worker"]


def is_server():
    return _info("is_server")["is_server"]


def rank():
    return _info("rank")["rank"]


def size():
    return _info("size")["size"]


def worker_index():
    """This rank's index among the workers (0 .. num_workers()-1), or -1 on a server."""
    return _info("worker_index")["worker_index"]


def server_index():
    return _info("server_index")["server_index"]


def num_workers():
    return _info("num_workers")["num_workers"]


def num_servers():
    return _info("num_servers")["num_servers"]


def register(name, value, mode="sync", staleness=None, optimizer="sgd", lr=0.01, momentum=0.0,
             nesterov=False, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, gradient_scale=1.0,
             compression=None):
    """Registers key `name` with value's dtype and shape (worker 0's value is the initial one).

    Every worker registers the same keys in the same order with the same arguments. A key
    restored from a checkpoint (DDP_PS_CHECKPOINT_DIR) keeps the checkpoint's value. Returns
    name.

    compression (float32 keys): how pushes travel, encoded in C++ with error feedback (each
    partition's residual kept by this worker and added to its next push): Compression.bf16,
    Compression.int8, Horovod's Compression.fp16 (fp16 on the wire), or the names "bf16",
    "fp16", "int8"; the servers decode each push into float32. Pulls carry the value as it is.
    PowerSGD is refused (its factors are agreed among the workers; a server only sums)."""
    if mode not in ("sync", "async"):
        raise _ops.error(f"ddp.ps.register: mode must be 'sync' or 'async', not {mode!r}")
    if staleness is not None and (mode != "async" or int(staleness) < 0):
        raise _ops.error("ddp.ps.register: staleness=s (>= 0) applies to mode='async'")
    if name in _keys:
        raise _ops.error(f"ddp.ps.register: key {name!r} is registered already", "ALREADY_EXISTS")
    buf = _describe(value, "register", "value", False)
    return register_buffer(name, buf, buf.owner.dtype, mode=mode, staleness=staleness,
                            optimizer=optimizer, lr=lr, momentum=momentum, nesterov=nesterov,
                            betas=betas, eps=eps, weight_decay=weight_decay,
                            gradient_scale=gradient_scale, compression=compression)


def push_codec(compression, what):
    """The engine codec a key's pushes travel with: register()'s `compression`."""
    if getattr(compression, "__name__", "") == "FP16Compressor":  # Horovod's: fp16 on the wire
        return _ops.CODECS["fp16"]
    return _ops.codec_of(compression, what)[0]


def register_buffer(name, buf, dtype, mode, staleness, optimizer, lr, momentum, nesterov, betas,
                     eps, weight_decay, gradient_scale, compression=None):
    """register() on an already described buffer (ddp.torch's tensors come this way); `dtype`
    is what pull() allocates when given no `out`."""
    options = dict(mode=mode, staleness=-1 if staleness is None else int(staleness),
                   optimizer=str(optimizer), lr=float(lr), momentum=float(momentum),
                   nesterov=bool(nesterov), beta1=float(betas[0]), beta2=float(betas[1]),
                   eps=float(eps), weight_decay=float(weight_decay),
                   gradient_scale=float(gradient_scale),
                   codec=push_codec(compression, "ps.register"))
    key = _ddp.ps_register(name, buf.code, list(buf.shape), buf.address, options)
    _keys[name] = (key, buf.code, tuple(buf.shape), dtype)
    return name


def _key(name, what):
    try:
        return _keys[name]
    except KeyError:
        raise _ops.error(f"ddp.ps.{what}: no key {name!r} (register it first)",
                         "FAILED_PRECONDITION") from None


def _check(buf, key, label, what, name):
    _, code, shape, _ = key
    if buf.code != code or tuple(buf.shape) != shape:
        raise _ops.error(f"ddp.ps.{what}: {label} of key {name!r} has dtype code {buf.code} and "
                         f"shape {tuple(buf.shape)}; the key has {code} and {shape}")


class Handle:
    """A push or pull in flight: wait() returns the pulled array (None for a push)."""

    def __init__(self, native, out):
        self._native, self._out = native, out

    def done(self):
        return self._native.poll()

    def wait(self):
        self._native.wait()
        return self._out

    @property
    def version(self):
        """After wait(): the key's version (sync: completed steps; async: applied pushes)."""
        return self._native.version

    @property
    def contributors(self):
        """After wait() on a sync pull: how many workers' pushes the value sums."""
        return self._native.contributors


def _submit(op, name, grad, out, what):
    key = _key(name, what)
    send = recv = None
    if op in (PUSH, PUSH_PULL):
        send = _describe(grad, what, "gradient", False)
    if op in (PULL, PUSH_PULL):
        if out is None:
            out = np.empty(key[2], dtype=key[3])
        recv = _describe(out, what, "out", True)
    return submit_buffers(op, name, send, recv, out, what)


def submit_buffers(op, name, send, recv, out, what):
    """A push/pull of described buffers; the handle's wait() returns `out`."""
    key = _key(name, what)
    if send is not None:
        _check(send, key, "gradient", what, name)
    if recv is not None:
        _check(recv, key, "out", what, name)
    native = _ddp.ps_submit(op, key[0], send.address if send else 0, recv.address if recv else 0,
                            (send.owner if send else None, recv.owner if recv else None))
    return Handle(native, out)


def push_async(name, gradient):
    """Starts a push of `gradient` (kept alive, and must not change, until wait())."""
    return _submit(PUSH, name, gradient, None, "push_async")


def pull_async(name, out=None):
    return _submit(PULL, name, None, out, "pull_async")


def push_pull_async(name, gradient, out=None):
    """Push, then pull in the same round trip; `out` may be `gradient` (in place)."""
    return _submit(PUSH_PULL, name, gradient, out, "push_pull_async")


def push(name, gradient):
    push_async(name, gradient).wait()


def pull(name, out=None):
    """sync keys: the sum of this worker's latest step; async: the latest value."""
    return pull_async(name, out).wait()


def push_pull(name, gradient, out=None):
    return push_pull_async(name, gradient, out).wait()


def server_stats():
    """What this process's server has done (empty counts on a worker-only rank)."""
    _info("server_stats")
    return _ddp.ps_server_stats()


def worker_stats():
    """What this worker has pushed and pulled: "push_bytes" by codec ({"int8": {"pushed": bytes
    its pushes carried, "decoded": the gradients' bytes}}), "pushes" (partitions pushed),
    "bytes_pulled", "residual_floats" (error feedback's memory: 4 bytes each),
    "requests_deferred", "servers_recovered", "pushes_lost"."""
    _info("worker_stats")
    return _ddp.ps_worker_stats()


def server_bytes():
    """Bytes of registered keys each server holds (the placement, as every worker computes it)."""
    _info("server_bytes")
    return _ddp.ps_server_bytes()
