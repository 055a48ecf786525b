# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Horovod's operations in ddp.torch, with Horovod's semantics: any fixed-size dtype where
nothing is reduced (allgather, broadcast, alltoall move bytes), gradients through allgather,
broadcast, alltoall and reducescatter (in the world and in a process set), grouped allgather and
reduce-scatter."""

import sys

import torch

import ddp.torch as hvd


def fail(what):
    sys.exit(f"rank {hvd.rank()}: {what}")


def check(label, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        fail(f"{label}: got {got} ({got.dtype}, {tuple(got.shape)}), want {want} "
             f"({want.dtype}, {tuple(want.shape)})")


def rows_of(r, dtype):
    """Rank r's (r + 1) x 3 block of `dtype`, distinct per rank and row."""
    base = torch.arange((r + 1) * 3, dtype=torch.int64).reshape(r + 1, 3) + 100 * r
    if dtype == torch.bool:
        return (base % 2) == 1
    if dtype.is_complex:
        return torch.complex(base.float(), -base.float()).to(dtype)
    return base.to(dtype)


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()

    # Dtypes libddp does not reduce move as bytes: uneven allgather, broadcast (both forms, the
    # in-place one into the same memory), alltoall, sync and async.
    for dtype in (torch.int16, torch.bool, torch.complex64, torch.float64):
        tag = str(dtype).split(".")[1]
        mine = rows_of(rank, dtype)
        want = torch.cat([rows_of(r, dtype) for r in range(size)])
        check(f"allgather {tag}", hvd.allgather(mine, name=f"ag.{tag}"), want)
        check(f"allgather_async {tag}",
              hvd.synchronize(hvd.allgather_async(mine, name=f"aga.{tag}")), want)
        root = size - 1
        got = hvd.broadcast(mine[:1].clone(), root, name=f"bc.{tag}")
        check(f"broadcast {tag}", got, rows_of(root, dtype)[:1])
        target = rows_of(rank, dtype)[:1].clone()
        pointer = target.data_ptr()
        out = hvd.broadcast_(target, root, name=f"bc_.{tag}")
        if out is not target or target.data_ptr() != pointer:
            fail(f"broadcast_ {tag} did not work in place")
        check(f"broadcast_ {tag}", target, rows_of(root, dtype)[:1])
        blocks = torch.stack([rows_of(rank, dtype)[0] for _ in range(size)])  # size x 3
        got = hvd.alltoall(blocks, name=f"a2a.{tag}")
        check(f"alltoall {tag}", got, torch.stack([rows_of(r, dtype)[0] for r in range(size)]))

    # Gradients (Horovod's definitions), with an upstream gradient of rank + 1 on every rank.
    weight = float(rank + 1)
    mean = (size + 1) / 2  # the average of 1..size
    x = torch.ones(rank + 1, 3, requires_grad=True)
    (hvd.allgather(x, name="grad.ag") * weight).sum().backward()
    check("allgather grad", x.grad, torch.full((rank + 1, 3), mean))
    x = torch.ones(4, requires_grad=True)
    (hvd.broadcast(x, 0, name="grad.bc") * weight).sum().backward()
    check("broadcast grad", x.grad, torch.full((4,), mean if rank == 0 else 0.0))
    x = torch.ones(2 * size, 3, requires_grad=True)
    (hvd.alltoall(x, name="grad.a2a") * weight).sum().backward()
    want = torch.cat([torch.full((2, 3), float(j + 1)) for j in range(size)])
    check("alltoall grad", x.grad, want)
    x = torch.ones(2 * size, requires_grad=True)
    (hvd.reducescatter(x, op=hvd.Sum, name="grad.rs") * weight).sum().backward()
    want = torch.cat([torch.full((2,), float((j + 1) * size)) for j in range(size)])
    check("reducescatter grad", x.grad, want)

    # The allgather gradient in a process set: this rank's place in the set, not in the job.
    members = list(range(1, size))  # [0, 1] at 2 ranks would be the whole job, added already
    ps = hvd.add_process_set(members)
    if rank in members:
        x = torch.ones(rank + 1, 2, requires_grad=True)
        (hvd.allgather(x, name="grad.ag.ps", process_set=ps) * weight).sum().backward()
        set_mean = sum(r + 1 for r in members) / len(members)
        check("allgather grad in a process set", x.grad, torch.full((rank + 1, 2), set_mean))

    # Grouped allgather and reduce-scatter: one handle, a list of results.
    a, b = rows_of(rank, torch.float32), torch.full((size * 2,), float(rank))
    handle = hvd.grouped_allgather_async([a, b], name="grouped.ag")
    got = hvd.synchronize(handle)
    if not hvd.poll(handle) or len(got) != 2:
        fail(f"grouped_allgather: {got}")
    check("grouped_allgather[0]", got[0], torch.cat([rows_of(r, torch.float32)
                                                     for r in range(size)]))
    check("grouped_allgather[1]", got[1], torch.cat([torch.full((size * 2,), float(r))
                                                     for r in range(size)]))
    got = hvd.grouped_reducescatter([torch.ones(size * 2), torch.ones(size, 3)], op=hvd.Sum,
                                    name="grouped.rs")
    check("grouped_reducescatter[0]", got[0], torch.full((2,), float(size)))
    check("grouped_reducescatter[1]", got[1], torch.full((1, 3), float(size)))
    hvd.barrier()
    hvd.shutdown()
    print(f"rank {rank}: ok")


if __name__ == "__main__":
    main()
