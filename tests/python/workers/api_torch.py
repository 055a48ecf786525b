# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddp.torch's collectives on torch tensors of every dtype (bfloat16 included) and op, against
float64 references; autograd through allreduce; clear errors. Run on N ranks."""
import fractions
import sys

import torch

import ddp.torch as ddp
from ddp import _ops as ddp_ops
from ddp.torch import functions as _f

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int32, torch.int64]
OPS = [ddp.Sum, ddp.Average, ddp.Min, ddp.Max, ddp.Product]
TOL = {torch.float16: 2e-2, torch.bfloat16: 5e-2, torch.float32: 1e-5, torch.float64: 1e-12}


def data(rank, dtype, op, count, salt=0):
    g = torch.Generator().manual_seed(hash((rank, DTYPES.index(dtype), int(op), count, salt))
                                      % 2**31)
    if op == ddp.Product:
        values = torch.randint(1, 3, (count,), generator=g)
    elif dtype == torch.uint8:
        values = torch.randint(0, 50, (count,), generator=g)
    elif not dtype.is_floating_point:
        values = torch.randint(-25, 25, (count,), generator=g)
    else:
        values = torch.randn(count, generator=g, dtype=torch.float64) * 4
    return values.to(dtype)


def reference(inputs, op, dtype):
    stack = torch.stack([x.to(torch.float64) for x in inputs])
    if op == ddp.Sum:
        return stack.sum(0)
    if op == ddp.Average:
        out = stack.sum(0) / len(inputs)
        return out if dtype.is_floating_point else torch.trunc(out)
    if op == ddp.Min:
        return stack.min(0).values
    if op == ddp.Max:
        return stack.max(0).values
    return stack.prod(0)


def check(name, got, want, dtype):
    if got.dtype != dtype:
        sys.exit(f"rank {ddp.rank()}: {name}: dtype {got.dtype}, want {dtype}")
    got64 = got.to(torch.float64)
    if dtype.is_floating_point:
        ok = torch.allclose(got64, want, rtol=TOL[dtype], atol=TOL[dtype] * 4)
    else:
        ok = torch.equal(got64, want)
    if not ok:
        sys.exit(f"rank {ddp.rank()}: {name}: got {got}, want {want}")


def expect_error(name, fn, *fragments):
    try:
        fn()
    except ddp.DDPError as e:
        for fragment in fragments:
            if fragment not in str(e):
                sys.exit(f"rank {ddp.rank()}: {name}: error {str(e)!r} lacks {fragment!r}")
        return e
    sys.exit(f"rank {ddp.rank()}: {name}: no DDPError raised")


def main():
    ddp.init()
    rank, size = ddp.rank(), ddp.size()
    for dtype in DTYPES:
        tag = str(dtype).split(".")[1]
        for op in OPS:
            for count in (0, 1, 33, 5000):
                inputs = [data(r, dtype, op, count) for r in range(size)]
                want = reference(inputs, op, dtype)
                mine = inputs[rank].clone()
                name = f"{tag}.{op.name}.{count}"
                check(f"allreduce {name}", ddp.allreduce(mine, op=op, name=f"a.{name}"), want,
                      dtype)
                assert torch.equal(mine, inputs[rank])
                pointer = mine.data_ptr()
                out = ddp.synchronize(ddp.allreduce_async_(mine, op=op, name=f"b.{name}"))
                assert out is mine and mine.data_ptr() == pointer
                check(f"allreduce_ {name}", mine, want, dtype)
        mine = torch.full((rank + 1, 2), rank).to(dtype)
        want = torch.cat([torch.full((r + 1, 2), r, dtype=torch.float64) for r in range(size)])
        check(f"allgather {tag}", ddp.allgather(mine, name=f"g.{tag}"), want, dtype)
        # into the caller's output (torch.distributed's all_gather_into_tensor)
        same = torch.full((2, 3), rank).to(dtype)
        out = torch.full((2 * size, 3), -1).to(dtype)
        assert _f._allgather_into_async(same, out).wait() is out
        check(f"allgather into {tag}", out, torch.arange(size).repeat_interleave(6).reshape(
            2 * size, 3).to(torch.float64), dtype)
        for root in range(size):
            x = data(rank, dtype, ddp.Sum, 17, salt=root)
            want = data(root, dtype, ddp.Sum, 17, salt=root).to(torch.float64)
            check(f"broadcast {tag}", ddp.broadcast(x, root, name=f"bc.{tag}.{root}"), want, dtype)
            ddp.broadcast_(x, root, name=f"bc_.{tag}.{root}")
            check(f"broadcast_ {tag}", x, want, dtype)
        rows = 2 * size + 1
        inputs = [data(r, dtype, ddp.Sum, rows * 3).reshape(rows, 3) for r in range(size)]
        full = reference(inputs, ddp.Sum, dtype)
        counts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
        start = sum(counts[:rank])
        check(f"reducescatter {tag}", ddp.reducescatter(inputs[rank], op=ddp.Sum,
                                                         name=f"rs.{tag}"),
              full[start:start + counts[rank]], dtype)
        # into the caller's output (torch.distributed's reduce_scatter_tensor): a row per rank
        even = [data(r, dtype, ddp.Sum, size * 4, salt=1).reshape(size, 4) for r in range(size)]
        out = torch.full((4,), -1).to(dtype)
        assert _f._reducescatter_into_async(even[rank], out, ddp.Sum).wait() is out
        check(f"reducescatter into {tag}", out, reference(even, ddp.Sum, dtype)[rank], dtype)
        mine = torch.tensor([[rank * 10 + j] for j in range(size)]).to(dtype)
        want = torch.tensor([[r * 10 + rank] for r in range(size)], dtype=torch.float64)
        check(f"alltoall {tag}", ddp.alltoall(mine, name=f"a2a.{tag}"), want, dtype)

    # grouped, in place
    group = [torch.full((4,), float(rank)), torch.ones(2, 2)]
    ddp.grouped_allreduce_(group, op=ddp.Sum)
    check("group.0", group[0], torch.full((4,), size * (size - 1) / 2, dtype=torch.float64),
          torch.float32)
    check("group.1", group[1], torch.full((2, 2), float(size), dtype=torch.float64),
          torch.float32)

    # autograd: d/dx of allreduce(Sum) of x * (rank + 1) is (rank + 1) * size
    x = torch.ones(3, requires_grad=True)
    y = ddp.allreduce(x * (rank + 1), op=ddp.Sum, name="grad.sum")
    y.sum().backward()
    check("autograd", x.grad, torch.full((3,), float((rank + 1) * size), dtype=torch.float64),
          torch.float32)
    z = ddp.allreduce(torch.ones(2, requires_grad=True) * 2, name="grad.avg")
    assert z.requires_grad and torch.allclose(z, torch.full((2,), 2.0))

    # objects and optimizer-free helpers
    state = {"w": torch.arange(4.0) + rank}
    ddp.broadcast_parameters(state, root_rank=size - 1)
    check("broadcast_parameters", state["w"], torch.arange(4.0, dtype=torch.float64) + size - 1,
          torch.float32)
    assert ddp.allgather_object(rank) == list(range(size))

    expect_error("complex", lambda: ddp.allreduce(torch.ones(2, dtype=torch.complex64)),
                 "complex64")
    expect_error("bool", lambda: ddp.allreduce(torch.ones(2, dtype=torch.bool)), "bool")
    expect_error("non-contiguous", lambda: ddp.allreduce(torch.ones(3, 4).t()), "not contiguous")
    expect_error("device", lambda: ddp.allreduce(torch.ones(2, device="meta")), "meta")
    expect_error("sparse", lambda: ddp.allreduce(torch.ones(2).to_sparse()), "sparse")
    expect_error("numpy", lambda: ddp.allreduce([1.0]), "not a torch.Tensor")
    expect_error("root", lambda: ddp.broadcast(torch.ones(2), -1), "out of range")
    # The fast path (a dense tensor, plain arguments) and the general path (here taken for a
    # prescale that is not a float) take the same dtypes and ops from one table and leave
    # unknown ops to the engine: the same refusal at the call, whichever path.
    assert [d for d in _f._TORCH_CODES] == [getattr(torch, n) for n in ddp_ops.DTYPE_NAMES]
    fast = expect_error("fast op", lambda: ddp.allreduce_async(torch.ones(2), name="op9", op=9),
                        "allreduce 'op9': unknown reduce op 9 (libddp's: 0 sum, 1 average")
    general = expect_error("general op", lambda: ddp.allreduce_async(
        torch.ones(2), name="op9", op=9, prescale_factor=fractions.Fraction(1)),
        "unknown reduce op 9")
    assert str(fast) == str(general), (str(fast), str(general))
    for dtype in _f._TORCH_CODES:
        for prescale in (1.0, fractions.Fraction(1)):
            t = torch.ones(2, dtype=dtype)
            assert torch.equal(ddp.allreduce(t, op=ddp.Sum, prescale_factor=prescale),
                               torch.full((2,), size, dtype=dtype)), (dtype, prescale)
    expect_error("adasum", lambda: ddp.allreduce_async(torch.ones(2), op=ddp.Adasum), "Adasum")
    expect_error("op type", lambda: ddp.allreduce_async(torch.ones(2), op="sum"),
                 "op must be ddp.Sum")
    expect_error("into dtype", lambda: _f._allgather_into_async(torch.ones(2), torch.ones(
        2 * size, dtype=torch.float64)), "float32 but its output float64")
    # An output that does not hold the result fails after the collective, on every rank.
    expect_error("into size", lambda: _f._allgather_into_async(torch.ones(2), torch.ones(
        2 * size + 1)).wait(), "the result has", "the output given for it")
    expect_error("into scalar", lambda: _f._reducescatter_into_async(torch.tensor(1.0), torch.ones(
        1), ddp.Sum), "scalar")
    ddp.barrier()
    ddp.shutdown()
    print(f"rank {rank}: ok")


if __name__ == "__main__":
    main()
