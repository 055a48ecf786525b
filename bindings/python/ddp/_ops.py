# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The collectives, written once for every kind of tensor.

`ddp` (numpy arrays and buffers) and `ddp.torch` (torch tensors) each supply an adapter that
turns their tensors into (address, dtype code, shape) and builds results; everything else --
names, the conversion of arguments to codes, handles -- lives here. What an operation accepts is
the engine's to check (docs/architecture.md, "Where arguments are checked"). Nothing is copied
unless an API promises a new tensor (allreduce without the trailing underscore, broadcast), and
the engine-allocated outputs of allgather, alltoall and reducescatter are returned as views of
the engine's memory.
"""

import collections
import enum
import math
import operator
import warnings
from typing import Any, cast

from . import _ddp
from ._ddp import DDPError, DDPValueError


# libddp's reduce ops and dtypes, by code, as the C++ layer exports them: the one table that the
# general path, ddp.torch's fast path (bindings/python/src/tensor_path.cc) and the adapters map
# from, so that they accept the same things. Which codes an operation takes is the engine's to
# say: the Python layers convert their arguments to codes and check only what the C++ API cannot
# express (Horovod's argument rules, Adasum, process sets as objects).
# (Any to a type checker: the members are the extension's, unknown until it is loaded.)
ReduceOp = cast(Any, enum.IntEnum)("ReduceOp",
                                   [(name, code) for code, name in enumerate(_ddp.reduce_ops)],
                                   module=__name__)
ReduceOp.__doc__ = "Reduction operations; also exported as ddp.Sum, ddp.Average, ..."
Sum = ReduceOp.SUM
Average = ReduceOp.AVERAGE
Min = ReduceOp.MIN
Max = ReduceOp.MAX
Product = ReduceOp.PRODUCT
DTYPE_NAMES = tuple(name for name, _ in _ddp.dtypes)  # "float32", ... (torch's and numpy's)
DTYPE_SIZES = tuple(size for _, size in _ddp.dtypes)
DTYPE_CODES = {name: code for code, name in enumerate(DTYPE_NAMES)}

WORLD = 0  # the process set of every rank

# A tensor as the engine sees it; `owner` keeps its memory alive (and, for buffer-protocol
# objects, exported, so that they cannot be resized) until the operation has finished.
# device: -1 for CPU memory, else the CUDA device ordinal; stream: the cudaStream_t (as an int)
# the tensor was produced on, which the collective waits for.
Buffer = collections.namedtuple("Buffer", "address code shape owner device stream",
                                defaults=(-1, 0))


class DDPNotImplementedError(DDPError, NotImplementedError):
    """A DDPError that is also a NotImplementedError (code 'UNIMPLEMENTED'): what libddp does not
    do (Adasum, a sparse tensor with Min), as Horovod raises NotImplementedError for them."""


def error(message, code="INVALID_ARGUMENT"):
    """A DDPError raised by the Python layer, with a status code name like the C++ layer's; a bad
    argument's is a DDPValueError (also a ValueError), as the C++ layer's are, and what libddp
    does not do a DDPNotImplementedError."""
    if code == "UNIMPLEMENTED":
        exc = DDPNotImplementedError(message)
    else:
        exc = (DDPValueError if code in _ddp.value_error_codes else DDPError)(message)
    exc.code = code
    return exc


def auto_name(kind, name, process_set=WORLD):
    """Horovod's rule: an unnamed call gets `<kind>.noname.<n>`; the ranks of a process set agree
    as long as they make their unnamed calls in it in the same order (which a collective requires
    anyway): n counts per kind and process set. The counters are the C++ layer's, shared with
    ddp.torch's fast path."""
    if name is not None:
        if not isinstance(name, str) or not name:
            raise error(f"ddp.{kind}: name must be a non-empty string, got {name!r}")
        return name
    return _ddp.auto_name(kind, set_id(process_set))


def require_init(what):
    if not _ddp.is_initialized():
        raise error(f"ddp.{what}() called before ddp.init() (or after ddp.shutdown())",
                    "FAILED_PRECONDITION")


class _AdasumOp:
    """Horovod's Adasum: the name exists so that scripts that mention it import; every collective
    refuses it, since libddp does not implement adaptive summation."""

    def __repr__(self):
        return "ddp.Adasum"


Adasum = _AdasumOp()


def check_op(op, what):
    """The code of a reduction's op: a ddp.ReduceOp, or an int the engine checks (an unknown one is
    refused at the call, with the ops libddp has). Adasum is refused here: the engine has no code
    for it."""
    if op is Adasum:
        raise error(f"ddp.{what}: op Adasum (Horovod's adaptive summation) is not implemented by "
                    f"libddp; use ddp.Average or ddp.Sum", "UNIMPLEMENTED")
    if isinstance(op, ReduceOp):
        return op
    try:
        code = operator.index(op)
    except TypeError:
        raise error(f"ddp.{what}: op must be ddp.Sum, ddp.Average, ddp.Min, ddp.Max or "
                    f"ddp.Product, got {op!r}") from None
    return ReduceOp(code) if code in ReduceOp._value2member_map_ else code


def op_name(op):
    """"SUM", ..., or the code of an op libddp does not have."""
    return ReduceOp(op).name if op in ReduceOp._value2member_map_ else repr(op)


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
    """The engine's root (the index in the set) of root_rank, a job rank as in Horovod. In the
    world set they are the same, and the engine checks the range."""
    if not isinstance(root_rank, int) or isinstance(root_rank, bool):
        raise error(f"ddp.{what}: root_rank must be an int, got {root_rank!r}")
    if process_set == WORLD:
        return root_rank
    members = process_set_ranks(process_set)
    if root_rank not in members:
        raise error(f"ddp.{what}: root_rank {root_rank} is not a member of process set "
                    f"{process_set} (ranks {members}); root_rank is a rank of the job")
    return members.index(root_rank)


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


class ProcessSet:
    """Some ranks of the job that run collectives among themselves (Horovod's ProcessSet):
    ProcessSet([0, 2]) names them; add_process_set (on every rank, in the same order) makes it
    usable, as process_set= of any collective. `ranks` (sorted job ranks), `process_set_id` (None
    until added, and again once removed), size(), rank() (this rank's place in the set, -1 if it
    is not a member), included(). Collectives take job ranks (root_rank=), as Horovod's do."""

    def __init__(self, ranks):
        try:
            ranks = sorted(ranks)
        except TypeError:
            raise error(f"ddp.ProcessSet: expected a list of job ranks, got {ranks!r} (an mpi4py "
                        f"communicator is not supported: pass its ranks in the job)") from None
        if any(not isinstance(r, int) or isinstance(r, bool) for r in ranks):
            raise error(f"ddp.ProcessSet: ranks must be ints, got {ranks!r}")
        self.ranks = ranks
        self.process_set_id = None
        self.mpi_comm = None

    def size(self):
        """How many ranks the set has; None until it is added."""
        return None if self.process_set_id is None else len(self.ranks)

    def rank(self):
        """This rank's index in the set (-1 if it is not a member); None until it is added."""
        if self.process_set_id is None:
            return None
        me = _ddp.rank()
        return self.ranks.index(me) if me in self.ranks else -1

    def included(self):
        """Whether this rank is a member; None if the set has no ranks yet."""
        return None if self.ranks is None else _ddp.rank() in self.ranks

    def __index__(self):
        return set_id(self)

    def __repr__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"

    __str__ = __repr__


class _GlobalProcessSet(ProcessSet):
    """Every rank of the job: process set 0, always there."""

    def __init__(self):
        self.process_set_id = WORLD
        self.mpi_comm = None

    @property
    def ranks(self):
        return list(range(_ddp.size())) if _ddp.is_initialized() else []


global_process_set = _GlobalProcessSet()

# The process sets added and not removed, by id; the same ranks are never added twice.
_process_sets: dict[int, ProcessSet] = {}


def set_id(process_set, what="process_set"):
    """The id of process_set: a ProcessSet that is added, or an id."""
    if isinstance(process_set, ProcessSet):
        if process_set.process_set_id is None:
            raise error(f"ddp.{what}: {process_set} is not added (add_process_set), or was "
                        f"removed")
        return process_set.process_set_id
    if isinstance(process_set, int) and not isinstance(process_set, bool):
        return process_set
    raise error(f"ddp.{what}: process_set must be a ddp.ProcessSet or a process set id, got "
                f"{process_set!r}")


def add_process_set(process_set):
    """Makes a process set (a ProcessSet, or the list of its job ranks) usable and returns it as
    a ProcessSet. A collective of the whole job: every rank calls it, with the same ranks, in the
    same order relative to the other add_process_set and remove_process_set calls, whether it is
    a member or not. A set of the same ranks as one already there is a ValueError, as in Horovod
    (the whole job is global_process_set)."""
    require_init("add_process_set")
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise error(f"ddp.add_process_set: {ps} is added already")
    existing = [s for s in list(_process_sets.values()) + [global_process_set]
                if s.ranks == ps.ranks]
    if existing:
        raise error(f"ddp.add_process_set: a process set of ranks {ps.ranks} exists already "
                    f"({existing[0]}); remove_process_set it first")
    ps.process_set_id = _ddp.add_process_set(ps.ranks)
    _process_sets[ps.process_set_id] = ps
    return ps


def remove_process_set(process_set):
    """Removes a process set added by add_process_set (on every rank, in the same order as the
    adds): its ProcessSet is no longer usable (process_set_id None) and its ranks may be added
    again. Returns whether it removed one: False for global_process_set or a set not added.
    Operations already submitted in the set still finish."""
    require_init("remove_process_set")
    sid = process_set.process_set_id if isinstance(process_set, ProcessSet) else process_set
    if sid is None or sid == WORLD or sid not in _process_sets:
        return False
    ps = _process_sets.pop(sid)
    ps.process_set_id = None
    if process_set is not ps and isinstance(process_set, ProcessSet):
        process_set.process_set_id = None
    return True


def forget_process_sets():
    """At shutdown: the sets belong to the job that ends (groups are jobs of their own)."""
    for sid in [sid for sid, ps in _process_sets.items() if not isinstance(ps, _Group)]:
        _process_sets.pop(sid).process_set_id = None


class _Group(ProcessSet):
    """A group (ddp._ddp.group_init): a job of its own among some processes, whose operations take
    its id as their process_set. Its ranks are the group's own, 0 to size - 1; rank() is this
    process's rank in it (the torch.distributed backend's later process groups)."""

    def __init__(self, group_id, rank, size):
        super().__init__(list(range(size)))
        self.process_set_id, self._rank = group_id, rank

    def rank(self):
        return self._rank

    def included(self):
        return True


def add_group(group_id, rank, size):
    """Registers a group made by _ddp.group_init, so that its id is a process_set."""
    _process_sets[group_id] = _Group(group_id, rank, size)


def remove_group(group_id):
    _process_sets.pop(group_id, None)


def own_rank(process_set=WORLD):
    """This process's rank as the collectives of process_set name ranks (root_rank=): its rank in
    the job, or in the group for a group."""
    found = _process_sets.get(process_set) if isinstance(process_set, int) else None
    return found.rank() if isinstance(found, _Group) else _ddp.rank()


def process_set_ranks(process_set):
    """The job ranks of a process set, in order; WORLD is every rank."""
    process_set = set_id(process_set)
    if process_set == WORLD:
        return list(range(_ddp.size()))
    if process_set not in _process_sets:
        raise error(f"ddp: there is no process set {process_set!r} (add_process_set makes them)")
    return _process_sets[process_set].ranks


def _label(name):
    """How error messages call a tensor before it has its (automatic) name."""
    return name if isinstance(name, str) and name else "the input"


# The engine's codecs (libddp's Codec, docs/compression.md), by name.
CODECS = {"none": 0, "bf16": 1, "fp16": 2, "int8": 3, "powersgd": 4}


def codec_of(compression, what: str) -> tuple[int, int]:
    """The engine codec and PowerSGD rank of an allreduce's `compression`: None, a name ("int8",
    "powersgd:4"), or a compressor that runs in the engine (Compression.bf16, .int8,
    .powersgd(rank=4): its `codec` and `rank`)."""
    if compression is None:
        return 0, 0
    rank = getattr(compression, "rank", 0)
    name = compression if isinstance(compression, str) else getattr(compression, "codec", None)
    if name is None and getattr(compression, "__name__", "") == "NoneCompressor":
        return 0, 0
    if isinstance(name, str) and name.lower().startswith("powersgd:"):
        name, _, digits = name.partition(":")
        rank = int(digits) if digits.isdigit() else -1
    if not isinstance(name, str) or name.lower() not in CODECS:
        raise error(f"ddp.{what}: compression must be None, one of {', '.join(CODECS)} "
                    f"(\"powersgd:RANK\"), or a compressor the engine runs (Compression.bf16, "
                    f".int8, .powersgd(rank=...)); got {compression!r}")
    return CODECS[name.lower()], int(rank)

def engine_codec(compression, what: str) -> tuple[int, int]:
    """codec_of(compression) for a compressor that runs in the engine; (0, 0) for None and for
    Horovod's compressors, which do their work outside it."""
    if compression is None or getattr(compression, "codec", None) is None:
        return 0, 0
    return codec_of(compression, what)


def for_gradient(compression, shape):
    """The compression a gradient of `shape` goes with, as the optimizers, the tape, the comm
    hooks and grouped allreduces reduce gradients: a compressor that does not take the shape
    (PowerSGD: a tensor that is not a matrix its rank allows, or whose shape is not fully known
    when a graph is built) gives None (uncompressed); any other is used as it is."""
    takes = getattr(compression, "takes", None)
    if takes is None:
        return compression
    if getattr(shape, "rank", 0) is None:  # a TensorShape of unknown rank
        return None
    dims = list(shape)
    return compression if all(d is not None for d in dims) and takes(dims) else None


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
                   average=None, compression=None):
        what = "allreduce_" if inplace else "allreduce"
        codec = codec_of(compression, what)
        require_init(what + "_async")
        process_set = set_id(process_set, what)
        op = check_op(resolve_op(op, average, what), what)
        pre, post = self._scales(what, prescale_factor, postscale_factor)
        src = self.a.describe(x, what, _label(name), writable=inplace)
        if inplace:
            out, dst = x, src
        else:
            out = self.a.empty_like(x)
            dst = self.a.describe(out, what, _label(name), writable=True)
        name = auto_name("allreduce", name, process_set)
        native = _ddp.allreduce_async(name, src.address, dst.address, src.code, list(src.shape),
                                      int(op), pre, post, process_set, (src.owner, dst.owner),
                                      src.device, src.stream, *codec)
        return self._handle(native, (src, dst), lambda _: out)

    def allreduce_async(self, x, name=None, op=None, prescale_factor=1.0,
                        postscale_factor=1.0, process_set=WORLD, average=None, compression=None):
        """Starts an allreduce into a new tensor; synchronize(handle) returns it. `compression`
        ("bf16", "fp16", "int8", or Compression.bf16/.int8) encodes it on the wire, with error
        feedback kept for its name (docs/compression.md)."""
        return self._allreduce(x, name, op, prescale_factor, postscale_factor, process_set,
                               False, average, compression)

    def allreduce_async_(self, x, name=None, op=None, prescale_factor=1.0,
                         postscale_factor=1.0, process_set=WORLD, average=None, compression=None):
        """Starts an in-place allreduce of x; synchronize(handle) returns x."""
        return self._allreduce(x, name, op, prescale_factor, postscale_factor, process_set,
                               True, average, compression)

    def allreduce(self, x, op=None, name=None, prescale_factor=1.0,
                  postscale_factor=1.0, process_set=WORLD, average=None, compression=None):
        """op over all ranks of x, as a new tensor (Average by default, like Horovod)."""
        return self._allreduce(x, name, op, prescale_factor, postscale_factor, process_set,
                               False, average, compression).wait()

    def allreduce_(self, x, op=None, name=None, prescale_factor=1.0,
                   postscale_factor=1.0, process_set=WORLD, average=None, compression=None):
        """In-place allreduce; returns x."""
        return self._allreduce(x, name, op, prescale_factor, postscale_factor, process_set,
                               True, average, compression).wait()

    def _grouped(self, xs, name, op, prescale_factor, postscale_factor, process_set, inplace,
                 average=None, compression=None):
        what = "grouped_allreduce_" if inplace else "grouped_allreduce"
        codec = codec_of(compression, what)
        require_init(what + "_async")
        process_set = set_id(process_set, what)
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
        name = auto_name("grouped_allreduce", name, process_set)
        members = [(f"{name}.{i}", src.address, dst.address, list(src.shape))
                   for i, (src, dst) in enumerate(buffers)]
        owners = [(src.owner, dst.owner) for src, dst in buffers]
        first = buffers[0][0]
        native = _ddp.grouped_allreduce_async(name, members, code, int(op), pre, post,
                                              process_set, owners, first.device, first.stream,
                                              *codec)
        return self._handle(native, [b for pair in buffers for b in pair], lambda _: outs)

    def grouped_allreduce_async(self, xs, name=None, op=None, prescale_factor=1.0,
                                postscale_factor=1.0, process_set=WORLD, average=None,
                                compression=None):
        """Reduces a list of same-dtype tensors as one unit (one negotiation, one fused
        collective) into new tensors."""
        return self._grouped(xs, name, op, prescale_factor, postscale_factor, process_set, False,
                             average, compression)

    def grouped_allreduce_async_(self, xs, name=None, op=None, prescale_factor=1.0,
                                 postscale_factor=1.0, process_set=WORLD, average=None,
                                 compression=None):
        return self._grouped(xs, name, op, prescale_factor, postscale_factor, process_set, True,
                             average, compression)

    def grouped_allreduce(self, xs, op=None, name=None, prescale_factor=1.0,
                          postscale_factor=1.0, process_set=WORLD, average=None,
                          compression=None):
        return self._grouped(xs, name, op, prescale_factor, postscale_factor, process_set, False,
                             average, compression).wait()

    def grouped_allreduce_(self, xs, op=None, name=None, prescale_factor=1.0,
                           postscale_factor=1.0, process_set=WORLD, average=None,
                           compression=None):
        return self._grouped(xs, name, op, prescale_factor, postscale_factor, process_set, True,
                             average, compression).wait()

    # broadcast ---------------------------------------------------------------------------------
    def _broadcast(self, x, root_rank, name, process_set, inplace):
        what = "broadcast_" if inplace else "broadcast"
        require_init(what + "_async")
        process_set = set_id(process_set, what)
        if not inplace:
            self.a.refuse_grad([x], what)
        root = check_root(root_rank, process_set, what)
        self.a.describe(x, what, _label(name), writable=inplace)  # checks before copying
        out = x if inplace else self.a.copy(x)
        buf = self.a.describe(out, what, _label(name), writable=True)
        name = auto_name("broadcast", name, process_set)
        native = _ddp.broadcast_async(name, buf.address, buf.code, list(buf.shape), root,
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
    def _engine_output(self, kind, x, name, process_set, submit):
        """Checks x, names the call and submits it with submit(name, buffer); the result views
        the engine's output."""
        require_init(kind + "_async")
        self.a.refuse_grad([x], kind)
        buf = self.a.describe(x, kind, _label(name), writable=False)
        if len(buf.shape) == 0:
            raise error(f"ddp.{kind}: {_label(name)} is a scalar; it needs at least one "
                        f"dimension (the one that is split or concatenated)")
        native = submit(auto_name(kind, name, process_set), buf)
        return self._handle(native, (buf,), lambda h: self.a.view(h, buf.code, h.output_shape))

    def allgather_async(self, x, name=None, process_set=WORLD):
        process_set = set_id(process_set, "allgather")
        return self._engine_output(
            "allgather", x, name, process_set, lambda n, b: _ddp.allgather_async(
                n, b.address, b.code, list(b.shape), process_set, b.owner, b.device, b.stream))

    def allgather(self, x, name=None, process_set=WORLD):
        """Concatenation of every rank's x along the first dimension (which may differ by
        rank)."""
        return self.allgather_async(x, name, process_set).wait()

    def alltoall_async(self, x, name=None, process_set=WORLD):
        process_set = set_id(process_set, "alltoall")
        return self._engine_output(
            "alltoall", x, name, process_set, lambda n, b: _ddp.alltoall_async(
                n, b.address, b.code, list(b.shape), process_set, b.owner, b.device, b.stream))

    def alltoall(self, x, name=None, process_set=WORLD):
        """Splits x's first dimension into size() equal blocks, sends block j to rank j; returns
        the blocks received, rank i's first."""
        return self.alltoall_async(x, name, process_set).wait()

    def reducescatter_async(self, x, name=None, op=ReduceOp.AVERAGE, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=WORLD):
        op = check_op(op, "reducescatter")
        process_set = set_id(process_set, "reducescatter")
        pre, post = self._scales("reducescatter", prescale_factor, postscale_factor)
        return self._engine_output(
            "reducescatter", x, name, process_set, lambda n, b: _ddp.reducescatter_async(
                n, b.address, b.code, list(b.shape), int(op), pre, post, process_set, b.owner,
                b.device, b.stream))

    def reducescatter(self, x, op=ReduceOp.AVERAGE, name=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=WORLD):
        """Reduces x over ranks and returns this rank's rows of the first dimension (the first
        shape[0] % size ranks get one row more)."""
        return self.reducescatter_async(x, name, op, prescale_factor, postscale_factor,
                                        process_set).wait()

    # into the caller's output: torch.distributed's all_gather_into_tensor, reduce_scatter_tensor
    def _into(self, kind, x, out, name, process_set, submit):
        """Checks x and out (CPU tensors of one dtype; out must hold exactly the result, which the
        engine checks once it knows every rank's rows) and submits with submit(name, src, dst,
        output bytes); the result is out. No autograd here, as in torch.distributed's own: a
        tensor that requires grad moves as data."""
        require_init(kind + "_into_async")
        src = self.a.describe(x, kind, _label(name), writable=False)
        dst = self.a.describe(out, kind, f"the output of {_label(name)}", writable=True)
        if len(src.shape) == 0:
            raise error(f"ddp.{kind}: {_label(name)} is a scalar; it needs at least one "
                        f"dimension (the one that is split or concatenated)")
        if src.device >= 0 or dst.device >= 0:
            raise error(f"ddp.{kind} into an output takes CPU tensors (CUDA tensors: "
                        f"{kind}_async)")
        if src.code != dst.code:
            raise error(f"ddp.{kind}: {_label(name)} is {DTYPE_NAMES[src.code]} but its output "
                        f"{DTYPE_NAMES[dst.code]}")
        nbytes = math.prod(dst.shape) * DTYPE_SIZES[dst.code]
        native = submit(auto_name(kind, name, process_set), src, dst, nbytes)
        return self._handle(native, (src, dst), lambda _: out)

    def allgather_into_async(self, x, out, name=None, process_set=WORLD):
        """Every rank's x concatenated along the first dimension, written into out (which must
        hold exactly that: no allocation, no copy)."""
        process_set = set_id(process_set, "allgather")
        return self._into("allgather", x, out, name, process_set, lambda n, s, d, b: (
            _ddp.allgather_into_async(n, s.address, d.address, b, s.code, list(s.shape),
                                      process_set, (s.owner, d.owner))))

    def reducescatter_into_async(self, x, out, name=None, op=ReduceOp.AVERAGE,
                                 prescale_factor=1.0, postscale_factor=1.0, process_set=WORLD):
        """As reducescatter_async, this rank's rows written into out (which must hold exactly
        them)."""
        op = check_op(op, "reducescatter")
        process_set = set_id(process_set, "reducescatter")
        pre, post = self._scales("reducescatter", prescale_factor, postscale_factor)
        return self._into("reducescatter", x, out, name, process_set, lambda n, s, d, b: (
            _ddp.reducescatter_into_async(n, s.address, d.address, b, s.code, list(s.shape),
                                          int(op), pre, post, process_set, (s.owner, d.owner))))


def barrier(process_set=WORLD):
    """Returns once every rank (of process_set) has called barrier(): an agreed empty allreduce
    through the engine, so that the wait honours Ctrl-C like every other. Operations submitted
    before it and still pending are not waited for (as in Horovod)."""
    require_init("barrier")
    process_set = set_id(process_set, "barrier")
    native = _ddp.allreduce_async(auto_name("barrier", None, process_set), 0, 0,
                                  DTYPE_CODES["uint8"], [0], int(ReduceOp.SUM), 1.0, 1.0,
                                  process_set, None)
    native.wait()
