# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The profiler events of the 'ddp' backend: under torch's profiler (record_shapes=True), every
operation is one asynchronous event "ddp:<op>" (Gloo's names) whose input shapes are those of
the tensors it reads (complex as real views), ended before its wait() returns; nothing is
recorded outside a profiler. Started with torchrun's variables (ddprun sets them). Exits non-zero
on the first mismatch; prints "c10d profile ok <n checks>"."""
import sys

import torch
import torch.distributed as dist
from torch.autograd.profiler import profile

import ddp.torch  # noqa: F401 - registers the backend

checks = 0


def fail(message):
    sys.exit(f"rank {dist.get_rank()}: {message}")


def events(prof, title):
    return [e for e in prof.function_events if e.name == f"ddp:{title}"]


def expect(title, calls, shapes, count=1):
    """Runs `calls` (each returns a Work, or what a blocking call returns) under the profiler,
    waits for them, and checks that exactly `count` events "ddp:<title>" were recorded, each
    async, with `shapes`."""
    global checks
    with profile(record_shapes=True) as prof:
        works = [call() for call in calls]
        for work in works:
            if hasattr(work, "wait"):
                work.wait()
    got = events(prof, title)
    if len(got) != count:
        fail(f"{title}: {len(got)} events, want {count}: "
             f"{sorted(e.name for e in prof.function_events)}")
    for e in got:
        if not e.is_async or e.count != 1 or e.cpu_time < 0:
            fail(f"{title}: event async={e.is_async} count={e.count} time={e.cpu_time}")
        if shapes is not None and e.input_shapes != shapes:
            fail(f"{title}: input shapes {e.input_shapes}, want {shapes}")
    checks += 1


def main():
    dist.init_process_group("ddp")
    rank, size = dist.get_rank(), dist.get_world_size()
    t = torch.ones(3, 5)
    expect("all_reduce", [lambda: dist.all_reduce(t)], [[3, 5]])
    expect("all_reduce", [lambda: dist.all_reduce(t, async_op=True),
                          lambda: dist.all_reduce(torch.ones(7), async_op=True)], None, count=2)
    expect("all_reduce", [lambda: dist.all_reduce(torch.ones(4, dtype=torch.complex64))],
           [[4, 2]])
    expect("all_reduce", [lambda: dist.all_reduce_coalesced([torch.ones(2), torch.ones(3, 3)])],
           [[2], [3, 3]])
    expect("broadcast", [lambda: dist.broadcast(t, src=size - 1)], [[3, 5]])
    expect("reduce", [lambda: dist.reduce(t, dst=0)], [[3, 5]])
    expect("all_gather", [lambda: dist.all_gather([torch.empty(6) for _ in range(size)],
                                                  torch.ones(6))], [[6]])
    gather_base = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
    expect("all_gather_into_tensor", [lambda: gather_base(torch.empty(size * 4), torch.ones(4))],
           [[4]])
    expect("all_to_all", [lambda: dist.all_to_all_single(torch.empty(size * 2),
                                                         torch.ones(size * 2))], [[size * 2]])
    expect("barrier", [dist.barrier], [])
    if size >= 2:
        # Rank 0 sends each other rank a tensor of its own shape; each other rank receives it.
        if rank == 0:
            expect("send", [lambda peer=peer: dist.send(torch.ones(peer, 3), dst=peer)
                            for peer in range(1, size)], None, count=size - 1)
        else:
            expect("recv", [lambda: dist.recv(torch.empty(rank, 3), src=0)], [[rank, 3]])
    # Outside a profiler nothing is recorded, and a later profiler sees only its own operations.
    dist.all_reduce(t)
    with profile(record_shapes=True) as prof:
        pass
    if events(prof, "all_reduce"):
        fail("an event outside the profiler")
    dist.barrier()
    print(f"c10d profile ok {checks}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
