"""libddp for TensorFlow 2, with Horovod's names: `import ddp.tensorflow as hvd`.

    import tensorflow as tf
    import ddp.tensorflow as hvd
    hvd.init()
    avg = hvd.allreduce(grad)                     # average over ranks
    rows = hvd.allgather(batch_stats)             # first dimensions may differ
    w = hvd.broadcast(w, root_rank=0)

The operations are TensorFlow ops (asynchronous C++ kernels, `ddp/tensorflow/_ops.so`) that
submit their tensors by name to the same engine as ddp.torch: negotiation, fusion, the response
cache, the timeline, join and error naming, with no Python in the data path; eager and inside
tf.function. allreduce, allgather, broadcast, alltoall and reducescatter have gradients, as in
Horovod. A failed operation raises TensorFlow's error for libddp's code (InvalidArgumentError,
AbortedError, ...) carrying libddp's message, which names the tensor and the rank at fault.
"""

import ctypes
import os
import re

from .. import _ddp, _ops
from .._ops import ReduceOp

_MIN_VERSION = (2, 13)

try:
    import tensorflow as tf
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "ddp.tensorflow needs TensorFlow 2 (>= 2.13): pip install tensorflow-cpu (or tensorflow); "
        f"it could not be imported: {e}") from e

_version = tuple(int(x) for x in re.findall(r"\d+", tf.__version__)[:2])
if _version < _MIN_VERSION:
    raise ImportError(f"ddp.tensorflow needs TensorFlow >= {'.'.join(map(str, _MIN_VERSION))}; "
                      f"this is {tf.__version__}")

_LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ops.so")
if not os.path.exists(_LIBRARY):
    raise ImportError(
        "ddp.tensorflow: this libddp was built without its TensorFlow ops (ddp/tensorflow/_ops.so "
        "is missing). Build them against the TensorFlow you run: `make build-tf`, or configure "
        "CMake with -DDDP_TENSORFLOW_PYTHON=<a python that imports tensorflow>")
try:
    _ops_lib = tf.load_op_library(_LIBRARY)
except tf.errors.NotFoundError as e:
    raise ImportError(
        f"ddp.tensorflow: {_LIBRARY} does not load into TensorFlow {tf.__version__} (it was built "
        f"against another TensorFlow; rebuild it with `make build-tf`): {e}") from e


def _unfoldable(tensor):
    """In a graph, `tensor` seen through a PlaceholderWithDefault (an identity that TensorFlow
    never evaluates ahead of time). The collectives are stateless ops, so that tf.function starts
    them together (stateful ones it chains in program order); but TensorFlow evaluates a
    stateless op whose inputs are constant while it builds the graph (when a shape function
    needs a value computed from its output, as a Pad's padding) and Grappler folds one: the
    collective would then run on one rank alone, outside the step, and the others would wait
    for it for ever. With a non-constant input it never does."""
    if tf.executing_eagerly():
        return tensor
    if isinstance(tensor, (list, tuple)):
        return [_unfoldable(t) for t in tensor]
    return tf.raw_ops.PlaceholderWithDefault(input=tensor, shape=tensor.shape)


class _GraphSafeOps:
    """The op library, each collective's tensor input (the first argument) made unfoldable."""

    def __init__(self, lib):
        self._lib = lib

    def __getattr__(self, name):
        op = getattr(self._lib, name)
        if name in ("ddp_join", "ddp_barrier"):  # no tensor input
            return op

        def call(tensor, *args, **kwargs):
            return op(_unfoldable(tensor), *args, **kwargs)

        setattr(self, name, call)  # made once: later calls find it without __getattr__
        return call


_ops_lib = _GraphSafeOps(_ops_lib)
_c_lib = ctypes.CDLL(_LIBRARY)
_c_lib.ddp_tf_set_context.argtypes = [ctypes.c_size_t]
_c_lib.ddp_tf_set_context.restype = None

# The ops and the error type are the package's own.
from .. import Adasum, Average, DDPError, Max, Min, Product, Sum  # noqa: E402

_bound = False


class _NoneCompressor:
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        del ctx
        return tensor


class _FP16Compressor:
    """Floating tensors travel as float16 and come back in their own dtype (Horovod's fp16)."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


class Compression:
    """Horovod's gradient compression: Compression.none, Compression.fp16."""
    none = _NoneCompressor
    fp16 = _FP16Compressor


def init(comm=None, process_sets=None):
    """Joins the job (as ddp.init) and hands its context to the TensorFlow ops."""
    import ddp
    ddp.init(comm=comm, process_sets=process_sets)
    _bind()


def _bind():
    global _bound
    if not _bound:
        _c_lib.ddp_tf_set_context(_ddp._c_context())
        _bound = True


def _ready(what):
    """Before an operation: the job must exist; the ops get its context on first use (a script
    that called ddp.init() itself works too)."""
    if not _ddp.is_initialized():
        raise _ops.error(f"ddp.tensorflow.{what}() called before ddp.tensorflow.init() (or after "
                         f"shutdown())", "FAILED_PRECONDITION")
    _bind()


def _unbind():
    global _bound
    _c_lib.ddp_tf_set_context(0)
    _bound = False
    _eager_reducers.clear()  # process sets may be numbered anew in the next job


def shutdown():
    """Leaves the job; safe to call twice."""
    import ddp
    ddp.shutdown()  # unbinds the ops first (its hook below)


def _register_unbind():
    import ddp
    if _unbind not in ddp._shutdown_hooks:
        # ddp.shutdown() from anywhere (a script's own, elastic's reset) lets the ops go of the
        # old context; the next operation binds the new one.
        ddp._shutdown_hooks.append(_unbind)


_register_unbind()


def is_initialized():
    return _ddp.is_initialized()


rank = _ddp.rank
size = _ddp.size
local_rank = _ddp.local_rank
local_size = _ddp.local_size
cross_rank = _ddp.cross_rank
cross_size = _ddp.cross_size


def _normalize(name):
    return re.sub(r"[^a-zA-Z0-9_.\-]", "_", name)


def _graph_unique(name):
    """Inside a graph (tf.function): the name made unique in that graph, as TensorFlow makes node
    names unique (the same on every rank: a trace is deterministic), so that two operations of one
    graph never share a name while both are in flight."""
    return _normalize(tf.compat.v1.get_default_graph().unique_name(name, mark_as_used=True))


def _name_of(kind, tensor, name, process_set, ignore_name_scope=False):
    """The name the ranks agree on. Given: that name (under the graph's name scope unless
    ignore_name_scope, as in Horovod). Inside a graph (tf.function): from the tensor's own name,
    unique in the graph. Eager: `<kind>.noname.<n>`, counted per kind and process set like
    ddp.torch's."""
    set_id = _ops.set_id(process_set)
    eager = tf.executing_eagerly()
    if name is not None:
        if not isinstance(name, str) or not name:
            raise _ops.error(f"ddp.tensorflow.{kind}: name must be a non-empty string, got "
                             f"{name!r}")
        if eager:
            return _normalize(name)
        if not ignore_name_scope:
            scope = tf.compat.v1.get_default_graph().get_name_scope()
            if scope:
                name = f"{scope}/{name}"
        return _graph_unique(name)
    if not eager and getattr(tensor, "name", None):
        return _graph_unique(f"{kind}.{tensor.name.replace(':', '_')}")
    return _ddp.auto_name(kind, set_id)


def _set_of(op):
    return op.get_attr("process_set")


def _grad_name(kind, op):
    """A gradient op's name: in a graph, from the forward op's node name (stable across traces
    and ranks, as Horovod's); eager, counted."""
    if tf.executing_eagerly():
        return _ddp.auto_name(f"{kind}.grad", _set_of(op))
    # tf.function's gradient functions get a stand-in op without a name: the graph's own
    # uniquing still numbers them alike on every rank.
    label = getattr(op, "name", None)
    return _graph_unique(f"{kind}.grad.{label}" if label else f"{kind}.grad")


def _not_in_xla(what):
    """The ops have no XLA kernels: a step compiled with XLA (Keras 3 turns jit_compile on by
    itself where a GPU is) cannot contain them; say so instead of failing to compile."""
    if tf.executing_eagerly():
        return
    from tensorflow.python.ops import control_flow_util
    if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        raise _ops.error(f"ddp.tensorflow.{what}: the ops cannot run inside an XLA-compiled "
                         f"function; compile the model with jit_compile=False (Keras 3 turns "
                         f"it on by itself when a GPU is present)", "UNIMPLEMENTED")


def _op_code(op, average, what):
    return int(_ops.check_op(_ops.resolve_op(op, average, what), what))


def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=None,
              op=None, prescale_factor=1.0, postscale_factor=1.0, name=None,
              process_set=_ops.WORLD, ignore_name_scope=False):
    """op over the ranks of `tensor` (Average unless op=; Horovod's deprecated average= too),
    scaled by prescale_factor before and postscale_factor after. Sparse tensors
    (tf.IndexedSlices) are allgathered, as Horovod does (values and indices), which is their sum;
    Average divides the values by the set's size (true division: integers become floats)."""
    del device_dense, device_sparse  # CPU tensors; GPU ones are staged by TensorFlow
    _ready("allreduce")
    _not_in_xla("allreduce")
    code = _op_code(op, average, "allreduce")
    if isinstance(tensor, tf.IndexedSlices):
        return _sparse_allreduce(tensor, code, prescale_factor, postscale_factor, name,
                                 process_set, ignore_name_scope, "allreduce")
    tensor = tf.convert_to_tensor(tensor)
    compressed, ctx = (tensor, None) if compression is None else compression.compress(tensor)
    reduced = _ops_lib.ddp_allreduce(
        compressed, _name_of("allreduce", tensor, name, process_set, ignore_name_scope),
        reduce_op=code, prescale_factor=_ops.check_scale(prescale_factor, "allreduce", "prescale"),
        postscale_factor=_ops.check_scale(postscale_factor, "allreduce", "postscale"),
        process_set=_ops.set_id(process_set))
    return reduced if compression is None else compression.decompress(reduced, ctx)


def _sparse_allreduce(slices, code, prescale_factor, postscale_factor, name, process_set,
                      ignore_name_scope, what):
    """Horovod's sparse reduction: values and indices allgathered (their union is the sum). Sum
    and Average only, and no scale factors, as in Horovod (NotImplementedError otherwise)."""
    if code not in (int(ReduceOp.SUM), int(ReduceOp.AVERAGE)):
        raise _ops.error(f"ddp.tensorflow.{what}: a sparse tensor (tf.IndexedSlices) reduces "
                         f"with Sum or Average only, not {_ops.op_name(code)}", "UNIMPLEMENTED")
    if float(prescale_factor) != 1.0 or float(postscale_factor) != 1.0:
        raise _ops.error(f"ddp.tensorflow.{what}: prescale_factor and postscale_factor are not "
                         f"supported with a sparse tensor (tf.IndexedSlices), as in Horovod",
                         "UNIMPLEMENTED")
    values = allgather(slices.values, name=None if name is None else name + ".values",
                       process_set=process_set, ignore_name_scope=ignore_name_scope)
    indices = allgather(slices.indices, name=None if name is None else name + ".indices",
                        process_set=process_set, ignore_name_scope=ignore_name_scope)
    if code == int(ReduceOp.AVERAGE):
        values = values / len(_ops.process_set_ranks(process_set))
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="", compression=None,
                      op=None, prescale_factor=1.0, postscale_factor=1.0, name=None,
                      process_set=_ops.WORLD, ignore_name_scope=False):
    """allreduce of every tensor, negotiated and reduced as one unit (one per dtype); sparse
    ones (tf.IndexedSlices) allgathered as allreduce does them."""
    del device_dense, device_sparse
    _ready("grouped_allreduce")
    _not_in_xla("grouped_allreduce")
    tensors = [t if isinstance(t, tf.IndexedSlices) else tf.convert_to_tensor(t)
               for t in tensors]
    if not tensors:
        raise _ops.error("ddp.tensorflow.grouped_allreduce: needs at least one tensor")
    code = _op_code(op, average, "grouped_allreduce")
    group = _name_of("grouped_allreduce", getattr(tensors[0], "values", tensors[0]), name,
                     process_set, ignore_name_scope)
    out = [None] * len(tensors)
    by_dtype = {}
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            out[i] = _sparse_allreduce(t, code, prescale_factor, postscale_factor,
                                       f"{group}.sparse.{i}", process_set, True,
                                       "grouped_allreduce")
        else:
            by_dtype.setdefault(t.dtype, []).append(i)
    for k, (dtype, members) in enumerate(by_dtype.items()):
        pairs = [(tensors[i], None) if compression is None else compression.compress(tensors[i])
                 for i in members]
        reduced = _ops_lib.ddp_grouped_allreduce(
            [p[0] for p in pairs], group if len(by_dtype) == 1 else f"{group}.{k}",
            reduce_op=code, prescale_factor=float(prescale_factor),
            postscale_factor=float(postscale_factor), process_set=_ops.set_id(process_set))
        for i, r, (_, ctx) in zip(members, reduced, pairs):
            out[i] = r if compression is None else compression.decompress(r, ctx)
    return out


# The dtypes the ops take as they are (libddp's); what only moves data (allgather, broadcast,
# alltoall) takes any other fixed-size dtype as its bytes, as Horovod takes int16 or bool.
_NATIVE = frozenset(tf.as_dtype(name) for name in _ops.DTYPE_NAMES)


def _as_bytes(tensor, what):
    """(uint8 rows of `tensor`: first dimension x bytes per row, a function that turns such rows
    back into the dtype and trailing shape). A scalar is one row."""
    dtype = tensor.dtype
    if dtype == tf.string or dtype.size == 0:
        raise _ops.error(f"ddp.tensorflow.{what}: {dtype.name} has no fixed size; libddp moves "
                         f"fixed-size dtypes only")
    raw = tf.cast(tensor, tf.uint8) if dtype == tf.bool else tf.bitcast(tensor, tf.uint8)
    shape = tf.shape(tensor)
    scalar = tensor.shape.rank == 0
    rows = tf.reshape(raw, [1, -1] if scalar else tf.concat([shape[:1], [-1]], 0))

    def back(moved):
        dims = [] if scalar else [tf.constant([-1]), shape[1:]]
        if dtype.size > 1 and dtype != tf.bool:
            dims.append(tf.constant([dtype.size]))
        full = tf.reshape(moved, tf.concat(dims, 0) if dims else tf.constant([], tf.int32))
        return tf.cast(full, tf.bool) if dtype == tf.bool else tf.bitcast(full, dtype)

    return rows, back


def allgather(tensor, name=None, ignore_name_scope=False, process_set=_ops.WORLD):
    """Every rank's tensor concatenated along the first dimension (which may differ)."""
    _ready("allgather")
    _not_in_xla("allgather")
    tensor = tf.convert_to_tensor(tensor)
    if tensor.dtype not in _NATIVE:
        rows, back = _as_bytes(tensor, "allgather")
        return back(allgather(rows, name, ignore_name_scope, process_set))
    return _ops_lib.ddp_allgather(
        tensor, _name_of("allgather", tensor, name, process_set, ignore_name_scope),
        process_set=_ops.set_id(process_set))


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=_ops.WORLD):
    """root_rank's tensor on every rank (root_rank: a rank of the job)."""
    _ready("broadcast")
    _not_in_xla("broadcast")
    tensor = tf.convert_to_tensor(tensor)
    if tensor.dtype not in _NATIVE:
        rows, back = _as_bytes(tensor, "broadcast")
        return back(broadcast(rows, root_rank, name, ignore_name_scope, process_set))
    root = _ops.check_root(root_rank, process_set, "broadcast")
    return _ops_lib.ddp_broadcast(
        tensor, _name_of("broadcast", tensor, name, process_set, ignore_name_scope),
        root_rank=root, process_set=_ops.set_id(process_set))


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=_ops.WORLD):
    """Sends rows of the first dimension to each rank of the set and returns what it received,
    the first rank's first. Without `splits` the first dimension splits evenly and the result is
    the received tensor; with `splits` (rows for each rank, Horovod's) it is the pair (received
    tensor, received splits). Differentiable."""
    _ready("alltoall")
    _not_in_xla("alltoall")
    tensor = tf.convert_to_tensor(tensor)
    if tensor.dtype not in _NATIVE:
        rows, back = _as_bytes(tensor, "alltoall")
        if splits is None:
            return back(alltoall(rows, None, name, ignore_name_scope, process_set))
        moved, received = alltoall(rows, splits, name, ignore_name_scope, process_set)
        return back(moved), received
    name = _name_of("alltoall", tensor, name, process_set, ignore_name_scope)
    set_id = _ops.set_id(process_set)
    if splits is None:
        # Each rank splits its own first dimension evenly (Horovod's rule), and the ranks' first
        # dimensions may differ. Eagerly the even exchange is tried first: ranks whose shapes
        # differ all fail it (a disagreement) and all go the uneven way. A graph cannot catch
        # that, so it always goes the uneven way (one small allgather more).
        n = len(_ops.process_set_ranks(process_set))
        if tf.executing_eagerly():
            try:
                return _ops_lib.ddp_alltoall(tensor, name, process_set=set_id)
            except tf.errors.FailedPreconditionError as e:
                if "shape" not in e.message:
                    raise
                name = f"{name}.uneven"
        rows = tf.shape(tensor, out_type=tf.int64)[0]
        dim = tensor.shape[0] if tensor.shape.rank else None
        tensor = _checked(tensor, rows % n if dim is None else dim % n, 0,
                          f"ddp.tensorflow.alltoall '{name}': the first dimension does not split "
                          f"evenly over the set's {n} ranks (give splits)")
        even = tf.fill([n], rows // n)
        return _uneven_alltoall(tensor, even, name, set_id, process_set)[0]
    return _uneven_alltoall(tensor, splits, name, set_id, process_set)


def _checked(tensor, value, want, message):
    """`tensor`, once value == want: checked now when both are known (the error the op would
    raise: InvalidArgumentError), else when the graph runs."""
    static = value if isinstance(value, int) else tf.get_static_value(value)
    if static is not None:
        if static != want:
            raise tf.errors.InvalidArgumentError(None, None, f"{message} ({static} != {want})")
        return tensor
    with tf.control_dependencies([tf.debugging.assert_equal(value, tf.cast(want, value.dtype),
                                                            message=message)]):
        return tf.identity(tensor)


def _uneven_alltoall(tensor, splits, name, set_id, process_set):
    """alltoall with Horovod's splits: (received rows, received splits)."""
    # Uneven: the ranks' splits are allgathered (each learns what it receives), every block is
    # padded to the largest, one even alltoall moves them, and the padding is cut off again.
    members = _ops.process_set_ranks(process_set)
    n = len(members)
    given = tf.get_static_value(splits)
    splits = tf.cast(tf.reshape(tf.convert_to_tensor(splits), [n]), tf.int64)
    dim = tensor.shape[0] if tensor.shape.rank else None
    tensor = _checked(tensor, int(sum(given)) - dim if given is not None and dim is not None
                      else tf.reduce_sum(splits) - tf.shape(tensor, out_type=tf.int64)[0], 0,
                      f"ddp.tensorflow.alltoall '{name}': the splits do not sum to the first "
                      f"dimension (their sum minus it)")
    table = _ops_lib.ddp_allgather(tf.reshape(splits, [1, n]), f"{name}.splits",
                                   process_set=set_id)
    received = table[:, members.index(_ddp.rank())]
    block = tf.reduce_max(table)
    tail = tf.shape(tensor, out_type=tf.int64)[1:]
    no_pad = [[0, 0]] * (tensor.shape.rank - 1)
    parts = tf.split(tensor, splits, num=n, axis=0)
    padded = tf.concat([tf.pad(p, [[0, block - tf.shape(p, out_type=tf.int64)[0]]] + no_pad)
                        for p in parts], axis=0)
    out = tf.reshape(_ops_lib.ddp_alltoall(padded, name, process_set=set_id),
                     tf.concat([[n, block], tail], axis=0))
    rows = tf.concat([out[j, :received[j]] for j in range(n)], axis=0)
    return rows, tf.cast(received, tf.int32)


def reducescatter(tensor, op=None, name=None, ignore_name_scope=False, process_set=_ops.WORLD,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces (Average unless op=), then splits the first dimension across the ranks (the first
    dim % size ranks get a row more); this rank's rows."""
    _ready("reducescatter")
    _not_in_xla("reducescatter")
    tensor = tf.convert_to_tensor(tensor)
    code = _op_code(op, None, "reducescatter")
    return _ops_lib.ddp_reducescatter(
        tensor, _name_of("reducescatter", tensor, name, process_set, ignore_name_scope),
        reduce_op=code, prescale_factor=float(prescale_factor),
        postscale_factor=float(postscale_factor), process_set=_ops.set_id(process_set))


def join():
    """This rank has no more data: it takes part in the others' allreduces with zeros until every
    rank has joined. Returns the rank that joined last."""
    _ready("join")
    return _ops_lib.ddp_join()


def barrier(process_set=_ops.WORLD):
    """Returns once every rank of the set has reached it (through the engine, in order with the
    operations submitted before it)."""
    _ready("barrier")
    _not_in_xla("barrier")
    set_id = _ops.set_id(process_set)
    name = (_ddp.auto_name("barrier", set_id) if tf.executing_eagerly()
            else _graph_unique("barrier"))
    return _ops_lib.ddp_barrier(name, process_set=set_id)


def broadcast_variables(variables, root_rank, process_set=_ops.WORLD, _kind="broadcast_variables",
                        _name=None):
    """Assigns root_rank's values to the variables on every rank. Eagerly it is done on return;
    in a graph it returns the op that does it (a tf.group of the assignments), as Horovod's."""
    assigns = _broadcast_assigns(variables, root_rank, process_set, _kind, _name)
    return None if tf.executing_eagerly() else tf.group(*assigns)


def _broadcast_assigns(variables, root_rank, process_set, kind, name):
    """Each variable assigned root_rank's value: the assignments (in a graph, their new values)."""
    assigns = []
    for i, var in enumerate(variables):
        # The index first: Keras 3's variable names ("kernel", "bias") repeat across layers.
        label = name or getattr(var, "path", None) or getattr(var, "name", "")
        assigns.append(var.assign(broadcast(var, root_rank, name=f"{kind}.{i}.{_normalize(label)}",
                                            ignore_name_scope=True, process_set=process_set)))
    return assigns


def broadcast_global_variables(root_rank, process_set=_ops.WORLD):
    """TensorFlow 1's graphs: the op that assigns root_rank's values to every global variable
    (tf.compat.v1.global_variables()). Eager TensorFlow has no global variables: there, use
    broadcast_variables(model.variables, root_rank) (RuntimeError, as Horovod's)."""
    if tf.executing_eagerly():
        raise RuntimeError(
            "ddp.tensorflow.broadcast_global_variables() does not work in eager mode (TensorFlow "
            "2 keeps no global variables): use broadcast_variables(model.variables, root_rank), "
            "or the Keras callback BroadcastGlobalVariablesCallback")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank, process_set,
                              _kind="broadcast_global_variables")


def __getattr__(name):
    # Keras is imported on first use only: `import ddp.tensorflow` stays free of it.
    if name == "SyncBatchNormalization":
        from .sync_batch_norm import SyncBatchNormalization
        return SyncBatchNormalization
    if name == "elastic":
        import importlib
        return importlib.import_module(".elastic", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "allreduce", "grouped_allreduce", "allgather", "broadcast",
    "alltoall", "reducescatter", "join", "barrier", "broadcast_variables", "Sum", "Average",
    "Min", "Max", "Product", "Adasum", "DDPError", "Compression", "DistributedGradientTape",
    "PartialDistributedGradientTape", "broadcast_global_variables", "SyncBatchNormalization",
]

from . import _grads  # noqa: E402,F401  (registers the ops' gradients)
from . import util  # noqa: E402
from ._reduce import _eager_reducers, _reduce_gradients  # noqa: E402,F401
from .tape import DistributedGradientTape, PartialDistributedGradientTape  # noqa: E402
from .util import _executing_eagerly  # noqa: E402,F401

from . import extras as _extras  # noqa: E402
from .extras import *  # noqa: E402,F401,F403

__all__ += _extras.__all__
