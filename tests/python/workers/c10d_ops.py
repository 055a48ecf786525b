# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Every torch.distributed operation of the 'ddp' backend, every dtype and reduce op that Gloo
serves on CPU, against references computed from every rank's (reproducible) inputs. Started with
torchrun's variables (ddprun sets them); init_process_group("ddp") with env://. Exits non-zero on
the first mismatch, naming it. Prints "c10d ops ok <n checks>"."""
import sys
import zlib

import torch
import torch.distributed as dist

import ddp.torch  # noqa: F401 - registers the backend

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int32, torch.int64]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
R = dist.ReduceOp
checks = 0


def data(rank, dtype, shape, salt, small=False):
    g = torch.Generator().manual_seed(zlib.crc32(repr((rank, dtype, tuple(shape), salt)).encode()))
    if small or dtype == torch.uint8:
        values = torch.randint(0 if dtype == torch.uint8 else -2, 3, shape, generator=g)
    elif not dtype.is_floating_point:
        values = torch.randint(-40, 40, shape, generator=g)
    else:
        values = torch.randint(-64, 64, shape, generator=g).double() / 8  # exact in f16/bf16
    return values.to(dtype)


def expect(what, got, want):
    global checks
    checks += 1
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        sys.exit(f"rank {dist.get_rank()}: {what}: got {got} want {want}")


def name(op):
    """A ReduceOp's name on every torch (1.13's ReduceOp objects neither hash nor convert)."""
    kind = getattr(op, "op", op)
    return getattr(kind, "name", str(kind))


def reference(op, inputs):
    stack = torch.stack([x.double() if x.is_floating_point() else x.long() for x in inputs])
    fold = {"SUM": lambda s: s.sum(0), "PRODUCT": lambda s: s.prod(0),
            "MIN": lambda s: s.min(0).values, "MAX": lambda s: s.max(0).values}
    if name(op) in fold:
        return fold[name(op)](stack).to(inputs[0].dtype)
    bitwise = {"BAND": torch.bitwise_and, "BOR": torch.bitwise_or,
               "BXOR": torch.bitwise_xor}[name(op)]
    acc = inputs[0].clone()
    for x in inputs[1:]:
        acc = bitwise(acc, x)
    return acc


def reduce_ops(dtype):
    ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX]
    return ops + [R.BAND, R.BOR, R.BXOR] if dtype in INTS else ops


def check_reductions(rank, size, dtype):
    for op in reduce_ops(dtype):
        for count in (1, 7, 1000):
            small = name(op) == "PRODUCT"
            inputs = [data(r, dtype, (count,), name(op), small) for r in range(size)]
            want = reference(op, inputs)
            t = inputs[rank].clone()
            dist.all_reduce(t, op=op)
            expect(f"all_reduce {name(op)} {dtype} {count}", t, want)
            root = count % size
            t = inputs[rank].clone()
            dist.reduce(t, dst=root, op=op)
            expect(f"reduce {name(op)} {dtype} to {root}", t,
                   want if rank == root else inputs[rank])
        if name(op) not in ("BAND", "BOR", "BXOR"):
            inputs = [data(r, dtype, (size * 5,), "rs" + name(op), name(op) == "PRODUCT")
                      for r in range(size)]
            want = reference(op, inputs)[rank * 5:(rank + 1) * 5]
            out = torch.empty(5, dtype=dtype)
            dist.reduce_scatter(out, list(inputs[rank].clone().chunk(size)), op=op)
            expect(f"reduce_scatter {name(op)} {dtype}", out, want)
            out = torch.empty(5, dtype=dtype)
            reduce_scatter_tensor(out, inputs[rank].clone(), op=op)
            expect(f"reduce_scatter_tensor {name(op)} {dtype}", out, want)


def reduce_scatter_tensor(out, inp, op):
    if hasattr(dist, "reduce_scatter_tensor"):
        return dist.reduce_scatter_tensor(out, inp, op=op)
    return dist._reduce_scatter_base(out, inp, op=op)


def all_gather_into_tensor(out, inp):
    if hasattr(dist, "all_gather_into_tensor"):
        return dist.all_gather_into_tensor(out, inp)
    return dist._all_gather_base(out, inp)


def check_movers(rank, size, dtype):
    inputs = [data(r, dtype, (3, 2), 11) for r in range(size)]
    for src in range(size):
        t = inputs[rank].clone()
        dist.broadcast(t, src=src)
        expect(f"broadcast {dtype} from {src}", t, inputs[src])
    outs = [torch.empty(3, 2, dtype=dtype) for _ in range(size)]
    dist.all_gather(outs, inputs[rank])
    expect(f"all_gather {dtype}", torch.stack(outs), torch.stack(inputs))
    out = torch.empty(size * 3, 2, dtype=dtype)
    all_gather_into_tensor(out, inputs[rank])
    expect(f"all_gather_into_tensor {dtype}", out, torch.cat(inputs))
    root = size - 1
    gathered = [torch.empty(3, 2, dtype=dtype) for _ in range(size)] if rank == root else None
    dist.gather(inputs[rank], gathered, dst=root)
    if rank == root:
        expect(f"gather {dtype}", torch.stack(gathered), torch.stack(inputs))
    pieces = [data(r, dtype, (4,), 13) for r in range(size)]
    out = torch.empty(4, dtype=dtype)
    dist.scatter(out, pieces if rank == 0 else None, src=0)
    expect(f"scatter {dtype}", out, pieces[rank])
    check_alltoall(rank, size, dtype)


def check_alltoall(rank, size, dtype):
    # Even: row r of every rank's input goes to rank r.
    ins = [data(r, dtype, (size, 3), 17) for r in range(size)]
    out = torch.empty(size, 3, dtype=dtype)
    dist.all_to_all_single(out, ins[rank])
    expect(f"all_to_all_single {dtype}", out, torch.stack([ins[r][rank] for r in range(size)]))
    # Uneven: rank r sends (r + d) % 3 rows to rank d.
    sends = [[(r + d) % 3 for d in range(size)] for r in range(size)]
    ins = [data(r, dtype, (sum(sends[r]), 2), 19) for r in range(size)]
    recv = [sends[r][rank] for r in range(size)]
    out = torch.empty(sum(recv), 2, dtype=dtype)
    dist.all_to_all_single(out, ins[rank], output_split_sizes=recv, input_split_sizes=sends[rank])
    want = torch.cat([ins[r].split(sends[r])[rank] for r in range(size)])
    expect(f"all_to_all_single uneven {dtype}", out, want)
    ins = [[data(r, dtype, (d + 1,), 23) for d in range(size)] for r in range(size)]
    outs = [torch.empty(rank + 1, dtype=dtype) for _ in range(size)]
    dist.all_to_all(outs, ins[rank])
    for r in range(size):
        expect(f"all_to_all {dtype} from {r}", outs[r], ins[r][rank])


def check_the_rest(rank, size):
    objs = [None] * size
    dist.all_gather_object(objs, {"rank": rank, "name": f"r{rank}"})
    assert objs == [{"rank": r, "name": f"r{r}"} for r in range(size)], objs
    box = [f"from {rank}"]
    dist.broadcast_object_list(box, src=size - 1)
    assert box == [f"from {size - 1}"], box
    got = [None] * size if rank == 0 else None
    dist.gather_object(rank * 10, got, dst=0)
    assert rank != 0 or got == [r * 10 for r in range(size)], got
    mine = [None]
    dist.scatter_object_list(mine, [f"to {r}" for r in range(size)] if rank == 0 else None, src=0)
    assert mine == [f"to {rank}"], mine
    dist.barrier()
    # Asynchronous work: futures and wait.
    t = torch.full((4,), float(rank + 1))
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    assert work.wait()
    assert torch.equal(fut.wait()[0], torch.full((4,), size * (size + 1) / 2)), fut.wait()
    assert fut.done()
    # torch 2's ProcessGroup hands out a Work of its own around a Python backend's, whose
    # is_completed() stays False (its future is the backend's); torch 1.13's is the backend's.
    assert work.is_completed() or torch.__version__ >= "2"
    if hasattr(R, "AVG"):
        t = torch.full((3,), float(rank))
        dist.all_reduce(t, op=R.AVG)
        expect("all_reduce AVG", t, torch.full((3,), (size - 1) / 2))
    if torch.__version__ >= "2":  # PREMUL_SUM: every input times the factor, then summed
        check_premul_sum(rank, size)
    check_sparse(rank, size)
    check_parameters(rank, size)


def check_parameters(rank, size):
    """Tensors that require grad (a model's parameters) move as data, as with Gloo: no autograd
    in torch.distributed's collectives, none refused for it."""
    weight = torch.nn.Parameter(torch.full((2, 3), float(rank)))
    outs = [torch.empty(2, 3) for _ in range(size)]
    dist.all_gather(outs, weight)
    expect("all_gather of a Parameter", torch.stack(outs),
           torch.arange(size, dtype=torch.float32).repeat_interleave(6).reshape(size, 2, 3))
    whole = torch.nn.Parameter(torch.empty(size * 2, 3))
    all_gather_into_tensor(whole, weight)
    expect("all_gather_into_tensor into a Parameter", whole.detach(),
           torch.arange(size, dtype=torch.float32).repeat_interleave(6).reshape(size * 2, 3))
    dist.broadcast(weight, src=0)
    expect("broadcast of a Parameter", weight.detach(), torch.zeros(2, 3))
    part = torch.nn.Parameter(torch.empty(2))
    reduce_scatter_tensor(part, torch.ones(size * 2, requires_grad=True), op=R.SUM)
    expect("reduce_scatter_tensor into a Parameter", part.detach(),
           torch.full((2,), float(size)))


def check_sparse(rank, size):
    """Sparse (COO) allreduce, SUM and AVG: ranks hold different numbers of entries (rank 1
    none), overlapping in places, with a dense dimension; other ops are refused."""
    def mine(r):
        rows = list(range(r, 2 * r + 1)) if r != 1 else []
        indices = torch.tensor([rows, [r % 3] * len(rows)], dtype=torch.int64).reshape(2, -1)
        values = torch.full((len(rows), 2), float(r + 1)).reshape(len(rows), 2)
        return torch.sparse_coo_tensor(indices, values, (2 * size + 1, 3, 2))
    want = sum(mine(r).to_dense() for r in range(size))
    for op, scale in ((R.SUM, 1), (getattr(R, "AVG", None), size)):
        if op is None:
            continue
        t = mine(rank)
        dist.all_reduce(t, op=op)
        if not t.is_sparse:
            sys.exit(f"rank {rank}: sparse all_reduce {name(op)}: the result is {t.layout}")
        expect(f"sparse all_reduce {name(op)}", t.to_dense(), want / scale)
    try:
        dist.all_reduce(mine(rank), op=R.MAX)
        sys.exit(f"rank {rank}: a sparse MAX was not refused")
    except ValueError as e:
        assert "sparse allreduce takes ReduceOp.SUM or AVG" in str(e), e


def check_premul_sum(rank, size):
    whole = (size - 1) * size / 2  # the sum of the ranks
    for factor in (0.5, torch.tensor([0.25])):
        op = dist._make_nccl_premul_sum(factor)
        f = float(factor)
        for dtype in (torch.float32, torch.float64, torch.bfloat16):
            t = torch.full((5,), float(rank), dtype=dtype)
            dist.all_reduce(t, op=op)
            expect(f"all_reduce PREMUL_SUM({f}) {dtype}", t, torch.full((5,), f * whole,
                                                                       dtype=dtype))
        t = torch.full((4,), float(rank))
        dist.reduce(t, dst=0, op=op)
        expect(f"reduce PREMUL_SUM({f})", t, torch.full((4,), f * whole if rank == 0 else
                                                        float(rank)))
        inp = torch.arange(size * 3, dtype=torch.float32) + rank
        out = torch.empty(3)
        reduce_scatter_tensor(out, inp, op=op)
        want = f * (torch.arange(size * 3, dtype=torch.float32) * size + whole)
        expect(f"reduce_scatter_tensor PREMUL_SUM({f})", out, want[rank * 3:(rank + 1) * 3])


def main():
    dist.init_process_group("ddp")
    rank, size = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "ddp", dist.get_backend()
    for dtype in DTYPES:
        check_reductions(rank, size, dtype)
        check_movers(rank, size, dtype)
    check_the_rest(rank, size)
    print(f"c10d ops ok {checks}", flush=True)
    dist.destroy_process_group()


main()
