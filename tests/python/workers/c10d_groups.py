# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Later process groups of the 'ddp' backend (new_group, new_subgroups): each a libddp job among
its members alone. Run as every rank of a job of WORLD_SIZE >= 2 with torch's env:// variables.
Checks collectives in disjoint and overlapping groups (roots given as global ranks, as torch
takes them), a group of every rank beside the default one, operations interleaved between groups,
object collectives, DDP on a group, and that a non-member takes no part. Prints
"c10d groups ok <rank>"."""
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import ddp.torch  # noqa: F401 - registers the backend


def expect(what, got, want):
    if not torch.equal(got, want):
        sys.exit(f"rank {dist.get_rank()}: {what}: got {got} want {want}")


def check_group(group, members, rank, tag):
    n = len(members)
    t = torch.full((6,), float(rank + 1))
    dist.all_reduce(t, group=group)
    expect(f"{tag} all_reduce", t, torch.full((6,), float(sum(m + 1 for m in members))))
    t = torch.full((3,), float(rank))
    dist.broadcast(t, src=members[-1], group=group)  # a global rank
    expect(f"{tag} broadcast", t, torch.full((3,), float(members[-1])))
    outs = [torch.empty(2) for _ in range(n)]
    dist.all_gather(outs, torch.full((2,), float(rank)), group=group)
    expect(f"{tag} all_gather", torch.stack(outs),
           torch.stack([torch.full((2,), float(m)) for m in members]))
    inp = torch.arange(n * 2, dtype=torch.float32) + rank
    out = torch.empty(2)
    reduce_scatter_tensor(out, inp, group)
    me = members.index(rank)
    want = (torch.arange(n * 2, dtype=torch.float32) * n + sum(members))[me * 2:(me + 1) * 2]
    expect(f"{tag} reduce_scatter_tensor", out, want)
    t = torch.full((2,), float(rank))
    dist.reduce(t, dst=members[0], op=dist.ReduceOp.MAX, group=group)
    if rank == members[0]:
        expect(f"{tag} reduce", t, torch.full((2,), float(max(members))))
    box = [f"{tag} from {rank}"]
    dist.broadcast_object_list(box, src=members[0], group=group)
    assert box == [f"{tag} from {members[0]}"], box
    dist.barrier(group=group)


def reduce_scatter_tensor(out, inp, group):
    if hasattr(dist, "reduce_scatter_tensor"):
        return dist.reduce_scatter_tensor(out, inp, group=group)
    return dist._reduce_scatter_base(out, inp, group=group)


def ddp_on_group(group, members, rank):
    """DDP over a group: the averaged gradient is the group's members' (each a slice of one
    batch), which one process computes from the members' slices."""
    torch.manual_seed(1)
    model = torch.nn.Linear(5, 2)
    reference = torch.nn.Linear(5, 2)
    reference.load_state_dict(model.state_dict())
    x = torch.randn(3 * len(members), 5)
    me = members.index(rank)
    wrapped = DistributedDataParallel(model, process_group=group)
    wrapped(x[me * 3:(me + 1) * 3]).sum().backward()
    reference(x).sum().backward()
    want = reference.weight.grad / len(members)
    if not torch.allclose(model.weight.grad, want, atol=1e-6):
        sys.exit(f"rank {rank}: DDP on a group: got {model.weight.grad} want {want}")


def main():
    dist.init_process_group("ddp")
    rank, size = dist.get_rank(), dist.get_world_size()
    evens, odds = list(range(0, size, 2)), list(range(1, size, 2))
    # Every rank makes every group, in the same order, as torch requires.
    g_evens, g_odds = dist.new_group(evens), dist.new_group(odds)
    g_all = dist.new_group(list(range(size)))
    g_first = dist.new_group([0, size - 1])  # overlaps both halves (size 2: the whole job)
    mine, mine_members = (g_evens, evens) if rank % 2 == 0 else (g_odds, odds)
    check_group(mine, mine_members, rank, "halves")
    check_group(g_all, list(range(size)), rank, "all")
    if rank in (0, size - 1):
        check_group(g_first, [0, size - 1], rank, "ends")
    # Interleaved: the default group, then a group, then the default group again, async.
    a, b = torch.full((4,), 1.0), torch.full((4,), float(rank))
    w1 = dist.all_reduce(a, async_op=True)
    w2 = dist.all_reduce(b, group=mine, async_op=True)
    w1.wait()
    w2.wait()
    expect("interleaved default", a, torch.full((4,), float(size)))
    expect("interleaved group", b, torch.full((4,), float(sum(mine_members))))
    ddp_on_group(mine, mine_members, rank)
    # A non-member's group handle is not a group of its own: it takes no part.
    other = g_odds if rank % 2 == 0 else g_evens
    assert other == dist.GroupMember.NON_GROUP_MEMBER, other
    if size % 2 == 0 and torch.__version__ >= "2":  # 1.13's new_subgroups* want CUDA
        pairs = [[r, r + 1] for r in range(0, size, 2)]
        sub, _ = dist.new_subgroups_by_enumeration(pairs)
        check_group(sub, pairs[rank // 2], rank, "new_subgroups_by_enumeration")
    dist.barrier()
    print(f"c10d groups ok {rank}", flush=True)
    dist.destroy_process_group()


main()
