# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The collectives as TensorFlow ops: allreduce (dense and sparse, grouped), allgather,
broadcast, alltoall (even and with splits), reducescatter, join and barrier; dtypes libddp does
not reduce move as their bytes where only data moves."""
import tensorflow as tf

from .. import _ddp, _ops
from .._ops import ReduceOp
from ._library import ops_lib, ready
from ._names import name_of, not_in_xla, op_code, graph_unique

def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=None,
              op=None, prescale_factor=1.0, postscale_factor=1.0, name=None,
              process_set=_ops.WORLD, ignore_name_scope=False):
    """op over the ranks of `tensor` (Average unless op=; Horovod's deprecated average= too),
    scaled by prescale_factor before and postscale_factor after. Sparse tensors
    (tf.IndexedSlices) are allgathered, as Horovod does (values and indices), which is their sum;
    Average divides the values by the set's size (true division: integers become floats)."""
    del device_dense, device_sparse  # CPU tensors; GPU ones are staged by TensorFlow
    ready("allreduce")
    not_in_xla("allreduce")
    code = op_code(op, average, "allreduce")
    if isinstance(tensor, tf.IndexedSlices):
        return _sparse_allreduce(tensor, code, prescale_factor, postscale_factor, name,
                                 process_set, ignore_name_scope, "allreduce")
    tensor = tf.convert_to_tensor(tensor)
    compressed, ctx = (tensor, None) if compression is None else compression.compress(tensor)
    # A direct call compresses as asked (the engine refuses what PowerSGD cannot take, naming
    # it); the optimizers and the tape pass only what the compressor takes (_reduce.py).
    codec, codec_rank = _ops.engine_codec(compression, "tensorflow.allreduce")
    reduced = ops_lib.ddp_allreduce(
        compressed, name_of("allreduce", tensor, name, process_set, ignore_name_scope),
        reduce_op=code, prescale_factor=_ops.check_scale(prescale_factor, "allreduce", "prescale"),
        postscale_factor=_ops.check_scale(postscale_factor, "allreduce", "postscale"),
        process_set=_ops.set_id(process_set), codec=codec, codec_rank=codec_rank)
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
    """allreduce of every tensor, negotiated and reduced as one unit (one per dtype, and with
    PowerSGD one for the matrices it takes and one, uncompressed, for the rest, as the
    optimizers reduce gradients); sparse ones (tf.IndexedSlices) allgathered as allreduce does
    them."""
    del device_dense, device_sparse
    ready("grouped_allreduce")
    not_in_xla("grouped_allreduce")
    tensors = [t if isinstance(t, tf.IndexedSlices) else tf.convert_to_tensor(t)
               for t in tensors]
    if not tensors:
        raise _ops.error("ddp.tensorflow.grouped_allreduce: needs at least one tensor")
    code = op_code(op, average, "grouped_allreduce")
    group = name_of("grouped_allreduce", getattr(tensors[0], "values", tensors[0]), name,
                     process_set, ignore_name_scope)
    out = [None] * len(tensors)
    by_dtype = {}
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            out[i] = _sparse_allreduce(t, code, prescale_factor, postscale_factor,
                                       f"{group}.sparse.{i}", process_set, True,
                                       "grouped_allreduce")
        else:
            codec = _ops.engine_codec(_ops.for_gradient(compression, t.shape),
                                      "tensorflow.grouped_allreduce")
            by_dtype.setdefault((t.dtype, codec), []).append(i)
    for k, ((_, (codec, codec_rank)), members) in enumerate(by_dtype.items()):
        pairs = [(tensors[i], None) if compression is None else compression.compress(tensors[i])
                 for i in members]
        reduced = ops_lib.ddp_grouped_allreduce(
            [p[0] for p in pairs], group if len(by_dtype) == 1 else f"{group}.{k}",
            reduce_op=code, prescale_factor=float(prescale_factor),
            postscale_factor=float(postscale_factor), process_set=_ops.set_id(process_set),
            codec=codec, codec_rank=codec_rank)
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
    ready("allgather")
    not_in_xla("allgather")
    tensor = tf.convert_to_tensor(tensor)
    if tensor.dtype not in _NATIVE:
        rows, back = _as_bytes(tensor, "allgather")
        return back(allgather(rows, name, ignore_name_scope, process_set))
    return ops_lib.ddp_allgather(
        tensor, name_of("allgather", tensor, name, process_set, ignore_name_scope),
        process_set=_ops.set_id(process_set))


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=_ops.WORLD):
    """root_rank's tensor on every rank (root_rank: a rank of the job)."""
    ready("broadcast")
    not_in_xla("broadcast")
    tensor = tf.convert_to_tensor(tensor)
    if tensor.dtype not in _NATIVE:
        rows, back = _as_bytes(tensor, "broadcast")
        return back(broadcast(rows, root_rank, name, ignore_name_scope, process_set))
    root = _ops.check_root(root_rank, process_set, "broadcast")
    return ops_lib.ddp_broadcast(
        tensor, name_of("broadcast", tensor, name, process_set, ignore_name_scope),
        root_rank=root, process_set=_ops.set_id(process_set))


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=_ops.WORLD):
    """Sends rows of the first dimension to each rank of the set and returns what it received,
    the first rank's first. Without `splits` the first dimension splits evenly and the result is
    the received tensor; with `splits` (rows for each rank, Horovod's) it is the pair (received
    tensor, received splits). Differentiable."""
    ready("alltoall")
    not_in_xla("alltoall")
    tensor = tf.convert_to_tensor(tensor)
    if tensor.dtype not in _NATIVE:
        rows, back = _as_bytes(tensor, "alltoall")
        if splits is None:
            return back(alltoall(rows, None, name, ignore_name_scope, process_set))
        moved, received = alltoall(rows, splits, name, ignore_name_scope, process_set)
        return back(moved), received
    name = name_of("alltoall", tensor, name, process_set, ignore_name_scope)
    set_id = _ops.set_id(process_set)
    if splits is None:
        # Each rank splits its own first dimension evenly (Horovod's rule), and the ranks' first
        # dimensions may differ. Eagerly the even exchange is tried first: ranks whose shapes
        # differ all fail it (a disagreement) and all go the uneven way. A graph cannot catch
        # that, so it always goes the uneven way (one small allgather more).
        n = len(_ops.process_set_ranks(process_set))
        if tf.executing_eagerly():
            try:
                return ops_lib.ddp_alltoall(tensor, name, process_set=set_id)
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
    table = ops_lib.ddp_allgather(tf.reshape(splits, [1, n]), f"{name}.splits",
                                   process_set=set_id)
    received = table[:, members.index(_ddp.rank())]
    block = tf.reduce_max(table)
    tail = tf.shape(tensor, out_type=tf.int64)[1:]
    no_pad = [[0, 0]] * (tensor.shape.rank - 1)
    parts = tf.split(tensor, splits, num=n, axis=0)
    padded = tf.concat([tf.pad(p, [[0, block - tf.shape(p, out_type=tf.int64)[0]]] + no_pad)
                        for p in parts], axis=0)
    out = tf.reshape(ops_lib.ddp_alltoall(padded, name, process_set=set_id),
                     tf.concat([[n, block], tail], axis=0))
    rows = tf.concat([out[j, :received[j]] for j in range(n)], axis=0)
    return rows, tf.cast(received, tf.int32)


def reducescatter(tensor, op=None, name=None, ignore_name_scope=False, process_set=_ops.WORLD,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces (Average unless op=), then splits the first dimension across the ranks (the first
    dim % size ranks get a row more); this rank's rows."""
    ready("reducescatter")
    not_in_xla("reducescatter")
    tensor = tf.convert_to_tensor(tensor)
    code = op_code(op, None, "reducescatter")
    return ops_lib.ddp_reducescatter(
        tensor, name_of("reducescatter", tensor, name, process_set, ignore_name_scope),
        reduce_op=code, prescale_factor=float(prescale_factor),
        postscale_factor=float(postscale_factor), process_set=_ops.set_id(process_set))


def join():
    """This rank has no more data: it takes part in the others' allreduces with zeros until every
    rank has joined. Returns the rank that joined last."""
    ready("join")
    return ops_lib.ddp_join()


def barrier(process_set=_ops.WORLD):
    """Returns once every rank of the set has reached it (through the engine, in order with the
    operations submitted before it)."""
    ready("barrier")
    not_in_xla("barrier")
    set_id = _ops.set_id(process_set)
    name = (_ddp.auto_name("barrier", set_id) if tf.executing_eagerly()
            else graph_unique("barrier"))
    return ops_lib.ddp_barrier(name, process_set=set_id)
