"""libddp for Python: collectives on numpy arrays and any buffer, without copies.

    import ddp
    ddp.init()                        # the job ddprun, torchrun, mpirun or srun started
    g = ddp.allreduce(grad)           # average over ranks (a new array)
    ddp.allreduce_(grad, op=ddp.Sum)  # in place
    h = ddp.allreduce_async(grad, name="layer1.grad"); ...; ddp.synchronize(h)

Every collective is named (unnamed calls get an automatic name) and goes through libddp's fusion
engine, so ranks may submit in different orders. Errors are ddp.DDPError with the full message.
`import ddp.torch` gives the same functions on torch tensors plus DistributedOptimizer.
"""

import atexit
import pickle
import re
import sys

import numpy as np

from . import _ddp, _launch, _ops, elastic
from ._ddp import DDPError, DDPValueError
from ._ops import Handle, ReduceOp, error, poll, synchronize

__version__ = _ddp.__version__

Sum = ReduceOp.SUM
Average = ReduceOp.AVERAGE
Min = ReduceOp.MIN
Max = ReduceOp.MAX
Product = ReduceOp.PRODUCT
Adasum = _ops.Adasum

is_initialized = _ddp.is_initialized
rank = _ddp.rank
size = _ddp.size
local_rank = _ddp.local_rank
local_size = _ddp.local_size
cross_rank = _ddp.cross_rank
cross_size = _ddp.cross_size

atexit.register(_ddp.shutdown)


def _shutdown_on_uncaught_exception(hook):
    """An exception that ends the main thread leaves the job at once: otherwise a non-daemon
    thread still waiting on a collective would keep the process (and the job) alive, since
    Python joins such threads before it runs atexit handlers."""
    def excepthook(*args):
        hook(*args)
        _ddp.shutdown()
    return excepthook


sys.excepthook = _shutdown_on_uncaught_exception(sys.excepthook)

# numpy's dtypes by libddp's code, from the one table (_ops.DTYPE_NAMES); numpy has no bfloat16.
_NUMPY_CODES = {np.dtype(name): code for code, name in enumerate(_ops.DTYPE_NAMES)
                if hasattr(np, name)}
_CODE_DTYPES = {code: dtype for dtype, code in _NUMPY_CODES.items()}


def _as_array(x, what, label):
    if isinstance(x, np.ndarray):
        return x
    try:
        return np.asarray(memoryview(x))  # any buffer-protocol object, viewed in place
    except TypeError:
        raise error(f"ddp.{what}: {label} is a {type(x).__name__}, not a numpy array or an "
                       f"object with the buffer protocol (for torch tensors use ddp.torch)"
                       ) from None


class _NumpyAdapter:
    @staticmethod
    def describe(x, what, label, writable):
        array = _as_array(x, what, label)
        code = _NUMPY_CODES.get(array.dtype) if array.dtype.isnative else None
        if code is None:
            known = ", ".join(str(d) for d in _NUMPY_CODES)
            raise error(f"ddp.{what}: {label} has dtype {array.dtype}, which libddp does not "
                        f"reduce (supported: {known}; bfloat16 through ddp.torch)")
        if not array.flags.c_contiguous:
            raise error(f"ddp.{what}: {label} is not contiguous (shape {array.shape}, strides "
                        f"{array.strides}); pass numpy.ascontiguousarray(x)")
        if not array.flags.aligned:
            raise error(f"ddp.{what}: {label} is not aligned to its element size")
        if writable and not array.flags.writeable:
            raise error(f"ddp.{what}: {label} is read-only and this operation writes to it")
        # The array holds the buffer export: a bytearray cannot be resized while it is alive.
        return _ops.Buffer(array.__array_interface__["data"][0], code, array.shape, array)

    @staticmethod
    def empty_like(x):
        return np.empty_like(_as_array(x, "allreduce", "input"), order="C")

    @staticmethod
    def copy(x):
        return np.array(_as_array(x, "broadcast", "input"), order="C", copy=True)

    @staticmethod
    def view(native, code, shape):
        # Views the output (which owns the memory), not the handle: the handle keeps its result.
        return np.frombuffer(native.output, dtype=_CODE_DTYPES[code]).reshape(shape)

    @staticmethod
    def check(buffers, name):
        del buffers, name  # exported buffers cannot move

    @staticmethod
    def refuse_grad(xs, what):
        del xs, what  # numpy has no autograd


_numpy = _ops.Ops(_NumpyAdapter)


# The collectives: one implementation for every kind of tensor (see _ops.Ops).
allreduce = _numpy.allreduce
allreduce_ = _numpy.allreduce_
allreduce_async = _numpy.allreduce_async
allreduce_async_ = _numpy.allreduce_async_
grouped_allreduce = _numpy.grouped_allreduce
grouped_allreduce_ = _numpy.grouped_allreduce_
grouped_allreduce_async = _numpy.grouped_allreduce_async
grouped_allreduce_async_ = _numpy.grouped_allreduce_async_
allgather = _numpy.allgather
allgather_async = _numpy.allgather_async
broadcast = _numpy.broadcast
broadcast_ = _numpy.broadcast_
broadcast_async = _numpy.broadcast_async
broadcast_async_ = _numpy.broadcast_async_
reducescatter = _numpy.reducescatter
reducescatter_async = _numpy.reducescatter_async
alltoall = _numpy.alltoall
alltoall_async = _numpy.alltoall_async
barrier = _ops.barrier


def start_timeline(file_path, mark_cycles=False):
    """Starts recording the engine's timeline (Chrome trace JSON: each tensor's negotiation,
    queueing and collective phases; a marker per engine cycle with mark_cycles) into file_path,
    as Horovod's start_timeline. As with `ddprun --timeline-filename`, '{rank}' in the path gives
    each rank its own file; without it only rank 0 records (Horovod's rule), so that ranks do
    not write over each other. Starting again finishes the file being written."""
    _ops.require_init("start_timeline")
    path = str(file_path)
    if "{rank}" in path or _ddp.rank() == 0:  # the engine puts the rank in
        _ddp.start_timeline(path, bool(mark_cycles))


def stop_timeline():
    """Stops recording the timeline; the file is complete JSON when this returns."""
    _ops.require_init("stop_timeline")
    _ddp.stop_timeline()


def join(device=-1):
    """This rank has no more data: until every rank has joined it contributes the identity to the
    others' allreduces (and counts in an Average with it, as in Horovod; DDP_JOIN_AVERAGE=
    contributors divides by the ranks with data instead). Returns the rank that
    joined last. `device` is Horovod's (where its zero tensors go); libddp makes the identity
    where each tensor lives, so it is checked and otherwise unused."""
    if not isinstance(device, int) or isinstance(device, bool) or device < -1:
        raise error(f"ddp.join: device must be -1 (CPU) or a CUDA device index, got {device!r}")
    _ops.require_init("join")
    native = _ddp.join_async()
    native.wait()
    return native.join_last_rank


ProcessSet = _ops.ProcessSet
global_process_set = _ops.global_process_set
add_process_set = _ops.add_process_set
remove_process_set = _ops.remove_process_set


def init(comm=None, process_sets=None):
    """Joins the job that the launcher's variables describe: ddprun's DDP_*, torchrun's, mpirun's
    or srun's (docs/launching.md has the table and the order of precedence). `process_sets`
    (Horovod's): ProcessSet objects (or lists of ranks) to add at once, the same on every rank.
    `comm` (Horovod's MPI communicator) is not supported: libddp's job is the whole launch.
    A worker of an elastic job (ddprun --min-np/--max-np/--host-discovery-script) joins the newest
    generation of the job that has it (ddp.elastic)."""
    if comm is not None:
        raise error("ddp.init: comm= (an MPI communicator) is not supported; libddp's job is every "
                    "rank the launcher started (use process sets for subsets)")
    if elastic.enabled() and not _ddp.is_initialized():
        elastic.join_and_init()
    elif not _ddp.is_initialized():
        _ddp.init(_launch.overrides())
    if process_sets is not None:
        for ps in process_sets:
            add_process_set(ps)


# Called before the job is left (ddp.tensorflow lets go of the context its ops hold).
_shutdown_hooks = []


def shutdown():
    """Leaves the job; safe to call twice. The job's process sets go with it."""
    for hook in list(_shutdown_hooks):
        hook()
    _ops.forget_process_sets()
    _ddp.shutdown()
    _launch.close()


# What this installation and job have, under Horovod's names (its scripts branch on them).
def mpi_built():
    """True when this installation has the MPI plugin (libddp_mpi.so): a job may run over MPI."""
    return any(name == "mpi" for name, _ in _ddp.transports())


def mpi_enabled():
    """True when this job's data moves over MPI (DDP_TRANSPORT=mpi); Horovod's MPI controller."""
    _ops.require_init("mpi_enabled")
    return _ddp.uses_mpi()


def mpi_threads_supported():
    """Whether other MPI libraries (mpi4py) may be used beside this job's MPI: libddp initialises
    MPI with MPI_THREAD_MULTIPLE and refuses a lower level, so True whenever MPI is in use."""
    _ops.require_init("mpi_threads_supported")
    if not _ddp.uses_mpi():
        raise error("ddp.mpi_threads_supported(): this job does not use MPI (DDP_TRANSPORT=mpi)",
                    "FAILED_PRECONDITION")
    return True


def gloo_built():
    """False: libddp has its own TCP and shared-memory transports, not Gloo."""
    return False


def gloo_enabled():
    return False


def nccl_built():
    """When libddp's NCCL plugin (libddp_nccl.so) loads, so that CUDA tensors can be reduced: the
    NCCL version code, as Horovod returns it (major * 10000 + minor * 100 + patch: 22809 for
    2.28.9; scripts compare it, e.g. >= 2700 for alltoall); else 0."""
    if not _ddp.nccl_built():
        return 0
    found = re.match(r"NCCL (\d+)\.(\d+)\.(\d+)", _ddp.nccl_version())
    if found is None:
        return 1
    major, minor, patch = (int(g) for g in found.groups())
    return major * 10000 + minor * 100 + patch


def cuda_built():
    """True when CUDA tensors can be reduced: they go through the NCCL plugin (nccl_built())."""
    return bool(_ddp.nccl_built())


def rocm_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def engine_stats():
    """Counters of the fusion engine: rounds, cache hits/misses, fused tensors, bytes, ..."""
    return _ddp.engine_stats()


def broadcast_object(obj, root_rank=0, name=None, process_set=_ops.WORLD):
    """root_rank's picklable obj, on every rank (of process_set; root_rank is a job rank)."""
    _ops.require_init("broadcast_object")
    process_set = _ops.set_id(process_set, "broadcast_object")
    _ops.check_root(root_rank, process_set, "broadcast_object")
    name = _ops.auto_name("broadcast_object", name, process_set)
    payload = pickle.dumps(obj) if _ddp.rank() == root_rank else b""
    length = broadcast_(np.array([len(payload)], dtype=np.int64), root_rank, name=name + ".len",
                        process_set=process_set)
    data = np.zeros(int(length[0]), dtype=np.uint8)
    if _ddp.rank() == root_rank:
        data[:] = np.frombuffer(payload, dtype=np.uint8)
    broadcast_(data, root_rank, name=name + ".data", process_set=process_set)
    return obj if _ddp.rank() == root_rank else pickle.loads(data.tobytes())


def allgather_object(obj, name=None, process_set=_ops.WORLD):
    """A list of every rank's (of process_set's) picklable obj, the lowest rank's first."""
    _ops.require_init("allgather_object")
    process_set = _ops.set_id(process_set, "allgather_object")
    name = _ops.auto_name("allgather_object", name, process_set)
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    lengths = allgather(np.array([payload.size], dtype=np.int64), name=name + ".len",
                        process_set=process_set)
    data = allgather(payload, name=name + ".data", process_set=process_set)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return [pickle.loads(data[offsets[i]:offsets[i + 1]].tobytes()) for i in range(len(lengths))]


__all__ = [
    "DDPError", "DDPValueError", "Handle", "ReduceOp", "Sum", "Average", "Min", "Max", "Product",
    "Adasum", "init",
    "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size", "cross_rank",
    "cross_size", "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "allgather", "allgather_async", "broadcast",
    "broadcast_", "broadcast_async", "broadcast_async_", "reducescatter", "reducescatter_async",
    "alltoall", "alltoall_async", "barrier", "join", "synchronize", "poll", "add_process_set",
    "remove_process_set", "ProcessSet", "global_process_set", "start_timeline",
    "stop_timeline",
    "engine_stats", "broadcast_object", "allgather_object", "mpi_built", "mpi_enabled",
    "mpi_threads_supported", "gloo_built", "gloo_enabled", "nccl_built", "cuda_built",
    "rocm_built", "ddl_built", "ccl_built",
]
