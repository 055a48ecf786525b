"""The collectives, written once for every kind of tensor.

`ddp` (numpy arrays and buffers) and `ddp.torch` (torch tensors) each supply an adapter that
turns their tensors into (address, dtype code, shape) and builds results; everything else --
names, argument checks, handles -- lives here. Nothing is copied unless an API promises a new
tensor (allreduce without the trailing underscore, broadcast), and the engine-allocated outputs of
allgather, alltoall and reducescatter are returned as views of the engine's memory.
"""

import collections
import enum
import warnings

from . import _ddp
from ._ddp import DDPError


class ReduceOp(enum.IntEnum):
    """Reduction operations; also exported as ddp.Sum, ddp.Average, ..."""

    SUM = 0
    AVERAGE = 1
    MIN = 2
    MAX = 3
    PRODUCT = 4


# libddp's dtype codes (ddp::DataType).
F32, F64, F16, BF16, I8, U8, I32, I64 = range(8)
DTYPE_NAMES = ("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64")

WORLD = 0  # the process set of every rank

# A tensor as the engine sees it; `owner` keeps its memory alive (and, for buffer-protocol
# objects, exported, so that they cannot be resized) until the operation has finished.
# device: -1 for CPU memory, else the CUDA device ordinal; stream: the cudaStream_t (as an int)
# the tensor was produced on, which the collective waits for.
Buffer = collections.namedtuple("Buffer", "address code shape owner device stream",
                                defaults=(-1, 0))


def error(message, code="INVALID_ARGUMENT"):
    """A DDPError raised by the Python layer, with a status code name like the C++ layer's."""
    exc = DDPError(message)
    exc.code = code
    return exc

def auto_name(kind, name):
    """Horovod's rule: an unnamed call gets `<kind>.noname.<n>`; ranks agree as long as they make
    their unnamed calls in the same order (which a collective requires anyway). The counters are
    the C++ layer's, shared with ddp.torch's fast path."""
    if name is not None:
        if not isinstance(name, str) or not name:
            raise error(f"ddp.{kind}: name must be a non-empty string, got {name!r}")
        return name
    return _ddp.auto_name(kind)


def require_init(what):
    if not _ddp.is_initialized():
        raise error(f"ddp.{what}() called before ddp.init() (or after ddp.shutdown())",
                    "FAILED_PRECONDITION")


def check_op(op, what):
    try:
        return ReduceOp(op)
    except ValueError:
        raise error(
            f"ddp.{what}: unknown op {op!r} (use ddp.Sum, ddp.Average, ddp.Min, ddp.Max or "
            f"ddp.Product)") from None


def resolve_op(op, average, what):
    """The op of a reduction, with Horovod's deprecated `average` flag: average=True is Average,
    average=False is Sum, and giving both is an error, as in Horovod. No op at all is Average."""
    if average is not None:
        if op is not None:
            raise error(f"ddp.{what}: op supersedes the deprecated average; give only one of them")
        warnings.warn(f"ddp.{what}: average= is deprecated (as in Horovod); use op=ddp.Average or "
                      f"op=ddp.Sum", DeprecationWarning, stacklevel=4)
        return ReduceOp.AVERAGE if average else ReduceOp.SUM
    return ReduceOp.AVERAGE if op is None else op


def check_root(root_rank, process_set, what):
    if not isinstance(root_rank, int) or isinstance(root_rank, bool):
        raise error(f"ddp.{what}: root_rank must be an int, got {root_rank!r}")
    if process_set == WORLD and not 0 <= root_rank < _ddp.size():
        raise error(
            f"ddp.{what}: root_rank {root_rank} is out of range for a job of {_ddp.size()} "
            f"ranks")


def check_scale(value, what, which):
    try:
        return float(value)
    except (TypeError, ValueError):
        raise error(f"ddp.{what}: {which} must be a number, got {value!r}") from None


# An operation in flight (C++: bindings/python/src/handle.cc). synchronize(handle) or
# handle.wait(timeout=None) returns its result; poll(handle) or handle.poll() says whether it has
# finished. Dropping a handle does not cancel the operation: its buffers stay alive until it
# finishes.
Handle = _ddp.Handle


class GroupHandle:
    """The operations of a grouped call (grouped_allgather, grouped_reducescatter), one per
    tensor, submitted together: wait() returns the list of their results, poll() whether all
    have finished."""

    __slots__ = ("_handles", "_name", "_finish")

    def __init__(self, handles, name, finish=None):
        self._handles = list(handles)
        self._name = name
        self._finish = finish

    @property
    def name(self):
        return self._name

    def poll(self):
        return all(h.poll() for h in self._handles)

    def wait(self, timeout=None):
        results = [h.wait(timeout) for h in self._handles]
        return self._finish(results) if self._finish is not None else results

    def __repr__(self):
        return f"<ddp.Handle group {self._name!r} of {len(self._handles)}>"


def synchronize(handle):
    if not isinstance(handle, (Handle, GroupHandle)):
        raise error(f"ddp.synchronize: expected a ddp handle, got {type(handle).__name__}")
    return handle.wait()


def poll(handle):
    if not isinstance(handle, (Handle, GroupHandle)):
        raise error(f"ddp.poll: expected a ddp handle, got {type(handle).__name__}")
    return handle.poll()


# The ranks of each process set this process created (add_process_set), for the operations that
# need this rank's place in a set (the gradients of allgather).
_process_sets = {}


def note_process_set(set_id, ranks):
    _process_sets[set_id] = sorted(ranks)


def process_set_ranks(process_set):
    """The job ranks of a process set, in order; WORLD is every rank."""
    if process_set == WORLD:
        return list(range(_ddp.size()))
    if process_set not in _process_sets:
        raise error(f"ddp: there is no process set {process_set!r} (add_process_set makes them)")
    return _process_sets[process_set]


def _label(name):
    """How error messages call a tensor before it has its (automatic) name."""
    return name if isinstance(name, str) and name else "the input"


class Ops:
    """The public collectives over one adapter; `ddp` and `ddp.torch` export these bound methods
    as their module-level functions. The adapter provides:
      describe(x, what, label, writable) -> Buffer (address, dtype code, shape, owner: what keeps
        the memory alive and in place while the engine uses it)
      empty_like(x), copy(x)
      view(native_handle, code, shape) -> a tensor viewing the handle's output
      check(buffers, name) -> raises if a tensor's memory moved while the operation ran
      refuse_grad(xs, what) -> raises where a result would silently leave an autograd graph
    Automatic names are drawn only once the arguments have been checked, so a rejected call does
    not put this rank's later unnamed calls out of step with the other ranks'.
    """

    def __init__(self, adapter):
        self.a = adapter

    def _handle(self, native, buffers, result):
        def finish(h):
            self.a.check(buffers, h.name)
            return result(h)
        native.set_finish(finish)
        return native

    @staticmethod
    def _scales(what, prescale_factor, postscale_factor):
        return (check_scale(prescale_factor, what, "prescale_factor"),
                check_scale(postscale_factor, what, "postscale_factor"))

    # allreduce ---------------------------------------------------------------------------------
    def _allreduce(self, x, name, op, prescale_factor, postscale_factor, process_set, inplace,
                   average=None):
        what = "allreduce_" if inplace else "allreduce"
        require_init(what + "_async")
        op = check_op(resolve_op(op, average, what), what)
        pre, post = self._scales(what, prescale_factor, postscale_factor)
        src = self.a.describe(x, what, _label(name), writable=inplace)
        if inplace:
            out, dst = x, src
        else:
            out = self.a.empty_like(x)
            dst = self.a.describe(out, what, _label(name), writable=True)
        name = auto_name("allreduce", name)
        native = _ddp.allreduce_async(name, src.address, dst.address, src.code, list(src.shape),
                                      int(op), pre, post, process_set, (src.owner, dst.owner),
                                      src.device, src.stream)
        return self._handle(native, (src, dst), lambda _: out)

    def allreduce_async(self, x, name=None, op=None, prescale_factor=1.0,
                        postscale_factor=1.0, process_set=WORLD, average=None):
        """Starts an allreduce into a new tensor; synchronize(handle) returns it."""
        return self._allreduce(x, name, op, prescale_factor, postscale_factor, process_set,
                               False, average)

    def allreduce_async_(self, x, name=None, op=None, prescale_factor=1.0,
                         postscale_factor=1.0, process_set=WORLD, average=None):
        """Starts an in-place allreduce of x; synchronize(handle) returns x."""
        return self._allreduce(x, name, op, prescale_factor, postscale_factor, process_set,
                               True, average)

    def allreduce(self, x, op=None, name=None, prescale_factor=1.0,
                  postscale_factor=1.0, process_set=WORLD, average=None):
        """op over all ranks of x, as a new tensor (Average by default, like Horovod)."""
        return self._allreduce(x, name, op, prescale_factor, postscale_factor, process_set,
                               False, average).wait()

    def allreduce_(self, x, op=None, name=None, prescale_factor=1.0,
                   postscale_factor=1.0, process_set=WORLD, average=None):
        """In-place allreduce; returns x."""
        return self._allreduce(x, name, op, prescale_factor, postscale_factor, process_set,
                               True, average).wait()

    def _grouped(self, xs, name, op, prescale_factor, postscale_factor, process_set, inplace,
                 average=None):
        what = "grouped_allreduce_" if inplace else "grouped_allreduce"
        require_init(what + "_async")
        xs = list(xs)
        if not inplace:
            self.a.refuse_grad(xs, what)
        op = check_op(resolve_op(op, average, what), what)
        pre, post = self._scales(what, prescale_factor, postscale_factor)
        if not xs:
            raise error(f"ddp.{what}: needs at least one tensor")
        buffers, outs, code = [], [], None
        for i, x in enumerate(xs):
            label = f"{_label(name)}[{i}]"
            src = self.a.describe(x, what, label, writable=inplace)
            if code is not None and src.code != code:
                raise error(f"ddp.{what}: every tensor of a group must have the same dtype "
                            f"({DTYPE_NAMES[code]} and {DTYPE_NAMES[src.code]} given)")
            if buffers and src.device != buffers[0][0].device:
                raise error(f"ddp.{what}: every tensor of a group must be on the same device")
            code = src.code
            out = x if inplace else self.a.empty_like(x)
            dst = src if inplace else self.a.describe(out, what, label, True)
            buffers.append((src, dst))
            outs.append(out)
        name = auto_name("grouped_allreduce", name)
        members = [(f"{name}.{i}", src.address, dst.address, list(src.shape))
                   for i, (src, dst) in enumerate(buffers)]
        owners = [(src.owner, dst.owner) for src, dst in buffers]
        first = buffers[0][0]
        native = _ddp.grouped_allreduce_async(name, members, code, int(op), pre, post,
                                              process_set, owners, first.device, first.stream)
        return self._handle(native, [b for pair in buffers for b in pair], lambda _: outs)

    def grouped_allreduce_async(self, xs, name=None, op=None, prescale_factor=1.0,
                                postscale_factor=1.0, process_set=WORLD, average=None):
        """Reduces a list of same-dtype tensors as one unit (one negotiation, one fused
        collective) into new tensors."""
        return self._grouped(xs, name, op, prescale_factor, postscale_factor, process_set, False,
                             average)

    def grouped_allreduce_async_(self, xs, name=None, op=None, prescale_factor=1.0,
                                 postscale_factor=1.0, process_set=WORLD, average=None):
        return self._grouped(xs, name, op, prescale_factor, postscale_factor, process_set, True,
                             average)

    def grouped_allreduce(self, xs, op=None, name=None, prescale_factor=1.0,
                          postscale_factor=1.0, process_set=WORLD, average=None):
        return self._grouped(xs, name, op, prescale_factor, postscale_factor, process_set, False,
                             average).wait()

    def grouped_allreduce_(self, xs, op=None, name=None, prescale_factor=1.0,
                           postscale_factor=1.0, process_set=WORLD, average=None):
        return self._grouped(xs, name, op, prescale_factor, postscale_factor, process_set, True,
                             average).wait()

    # broadcast ---------------------------------------------------------------------------------
    def _broadcast(self, x, root_rank, name, process_set, inplace):
        what = "broadcast_" if inplace else "broadcast"
        require_init(what + "_async")
        if not inplace:
            self.a.refuse_grad([x], what)
        check_root(root_rank, process_set, what)
        self.a.describe(x, what, _label(name), writable=inplace)  # checks before copying
        out = x if inplace else self.a.copy(x)
        buf = self.a.describe(out, what, _label(name), writable=True)
        name = auto_name("broadcast", name)
        native = _ddp.broadcast_async(name, buf.address, buf.code, list(buf.shape), root_rank,
                                      process_set, buf.owner, buf.device, buf.stream)
        return self._handle(native, (buf,), lambda _: out)

    def broadcast_async(self, x, root_rank, name=None, process_set=WORLD):
        return self._broadcast(x, root_rank, name, process_set, False)

    def broadcast_async_(self, x, root_rank, name=None, process_set=WORLD):
        return self._broadcast(x, root_rank, name, process_set, True)

    def broadcast(self, x, root_rank, name=None, process_set=WORLD):
        """root_rank's x, as a new tensor on every rank."""
        return self._broadcast(x, root_rank, name, process_set, False).wait()

    def broadcast_(self, x, root_rank, name=None, process_set=WORLD):
        """Overwrites x with root_rank's x; returns x."""
        return self._broadcast(x, root_rank, name, process_set, True).wait()

    # engine-allocated outputs: allgather, alltoall, reducescatter ------------------------------
    def _engine_output(self, kind, x, name, submit):
        """Checks x, names the call and submits it with submit(name, buffer); the result views
        the engine's output."""
        require_init(kind + "_async")
        self.a.refuse_grad([x], kind)
        buf = self.a.describe(x, kind, _label(name), writable=False)
        if len(buf.shape) == 0:
            raise error(f"ddp.{kind}: {_label(name)} is a scalar; it needs at least one "
                        f"dimension (the one that is split or concatenated)")
        native = submit(auto_name(kind, name), buf)
        return self._handle(native, (buf,), lambda h: self.a.view(h, buf.code, h.output_shape))

    def allgather_async(self, x, name=None, process_set=WORLD):
        return self._engine_output("allgather", x, name, lambda n, b: _ddp.allgather_async(
            n, b.address, b.code, list(b.shape), process_set, b.owner, b.device, b.stream))

    def allgather(self, x, name=None, process_set=WORLD):
        """Concatenation of every rank's x along the first dimension (which may differ by
        rank)."""
        return self.allgather_async(x, name, process_set).wait()

    def alltoall_async(self, x, name=None, process_set=WORLD):
        return self._engine_output("alltoall", x, name, lambda n, b: _ddp.alltoall_async(
            n, b.address, b.code, list(b.shape), process_set, b.owner, b.device, b.stream))

    def alltoall(self, x, name=None, process_set=WORLD):
        """Splits x's first dimension into size() equal blocks, sends block j to rank j; returns
        the blocks received, rank i's first."""
        return self.alltoall_async(x, name, process_set).wait()

    def reducescatter_async(self, x, name=None, op=ReduceOp.AVERAGE, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=WORLD):
        op = check_op(op, "reducescatter")
        pre, post = self._scales("reducescatter", prescale_factor, postscale_factor)
        return self._engine_output("reducescatter", x, name, lambda n, b: _ddp.reducescatter_async(
            n, b.address, b.code, list(b.shape), int(op), pre, post, process_set, b.owner,
            b.device, b.stream))

    def reducescatter(self, x, op=ReduceOp.AVERAGE, name=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=WORLD):
        """Reduces x over ranks and returns this rank's rows of the first dimension (the first
        shape[0] % size ranks get one row more)."""
        return self.reducescatter_async(x, name, op, prescale_factor, postscale_factor,
                                        process_set).wait()


def barrier():
    """Returns once every rank has called barrier(): an agreed empty allreduce through the engine,
    so that the wait honours Ctrl-C like every other."""
    require_init("barrier")
    native = _ddp.allreduce_async(auto_name("barrier", None), 0, 0, U8, [0],
                                  int(ReduceOp.SUM), 1.0, 1.0, WORLD, None)
    native.wait()
