# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""send and recv of the 'ddp' backend: blocking and async, matched by tag whatever the order of
other tags, a ring exchange as the first transfers, batch_isend_irecv, in a later group, several
dtypes; recv without src= (from any source): each send found once, by recv and irecv, the sender
named, and a timeout in torch's words where nobody sends (torch 1.13, and torch 2 through the
backend's C++ part; without it, refused with the reason); an isend's and irecv's Work completed
after wait(); sends of many tags leave no threads behind. Run as every rank of a job of
WORLD_SIZE >= 2 with torch's env:// variables. Prints "c10d p2p ok <rank>"."""
import collections
import re
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import ddp.torch  # registers the backend
from ddp.torch.c10d import finish as c10d_finish

# Idle threads go after 0.2 s here (10 s by default): every part below runs with finishers and
# completers coming and going under it.
c10d_finish.IDLE_SECONDS = 0.2
forwarded = False


def expect(what, got, want):
    if not torch.equal(got, want):
        sys.exit(f"rank {dist.get_rank()}: {what}: got {got} want {want}")


def any_source(rank, size):
    """Every rank sends each other rank two tensors of its rank (tag 5), and one
    more with tag 6 that the receiver takes by src= first; every rank receives with recv and
    irecv without src=: each send is taken once, holding its sender's rank."""
    mine, sends = torch.full((10,), float(rank)), []
    for dst in range(size):  # isend: a send completes once its receiver has posted the recv
        if dst != rank:
            sends.append(dist.isend(mine, dst, tag=6))
            sends += [dist.isend(mine, dst, tag=5) for _ in range(2)]
    senders = []
    for src in range(size):  # the tag-6 ones by src=: they do not stand in the way of tag 5
        if src != rank:
            t = torch.empty(10)
            dist.recv(t, src=src, tag=6)
            expect(f"tag 6 from {src}", t, torch.full((10,), float(src)))
    for i in range(2 * (size - 1)):
        t = torch.empty(10)
        if i % 2 == 0:
            sender = dist.recv(t, tag=5)
        else:
            work = dist.irecv(t, tag=5)
            work.wait()
            assert work.is_completed(), "irecv from any source: not completed after wait()"
            sender = work._source_rank()
        expect(f"from any source, sent by {sender}", t, torch.full((10,), float(sender)))
        senders.append(sender)
    for w in sends:
        w.wait()
    if sorted(senders) != sorted([r for r in range(size) if r != rank] * 2):
        sys.exit(f"rank {rank}: from any source, the senders were {senders}")
    # Nobody sends: torch's "Timed out" after the group's timeout, and the job goes on.
    group = dist.new_group(timeout=timedelta(seconds=1))
    if rank == 0:
        started = time.monotonic()
        try:
            dist.recv(torch.empty(1), group=group, tag=9)
        except RuntimeError as e:
            assert "Timed out" in str(e) and "any source" in str(e), e
            assert time.monotonic() - started >= 1, "failed before the group's timeout"
        else:
            sys.exit("recv from any source with no sender returned")


def idle_threads_go(rank, size):
    """Rank 0 sends rank 1 a tensor under each of 30 tags (a finisher each on both ends); once
    idle, those finishers are gone, and every group keeps at most one completer; a tag used again
    gets a finisher anew."""
    def count():
        names = [t.name for t in threading.enumerate()]
        finishers = [n for n in names if re.fullmatch(r"ddp-c10d-p2p\d+>\d+\.\d+", n)]
        completers = collections.Counter(n.rsplit("-done", 1)[0] for n in names if "-done" in n)
        return finishers, completers

    tags = range(100, 130)
    if rank == 0:
        works = [dist.isend(torch.full((4,), float(tag)), 1, tag=tag) for tag in tags]
    elif rank == 1:
        got = {tag: torch.empty(4) for tag in tags}
        works = [dist.irecv(got[tag], 0, tag=tag) for tag in tags]
    else:
        works = []
    for w in works:
        w.wait()
    if rank == 1:
        for tag in tags:
            expect(f"tag {tag}", got[tag], torch.full((4,), float(tag)))
    if rank in (0, 1) and not count()[0]:
        sys.exit(f"rank {rank}: no transfer finisher seen after 30 tags")
    deadline = time.monotonic() + 20
    while True:
        finishers, completers = count()
        if not finishers and all(n <= 1 for n in completers.values()):
            break
        if time.monotonic() > deadline:
            sys.exit(f"rank {rank}: idle threads stayed: {finishers} {dict(completers)}")
        time.sleep(0.1)
    if rank in (0, 1):  # an old tag again
        t = torch.full((2,), 7.0) if rank == 0 else torch.empty(2)
        (dist.send if rank == 0 else dist.recv)(t, 1 - rank, tag=100)
        expect("tag 100 again", t, torch.full((2,), 7.0))


def main():
    global forwarded
    dist.init_process_group("ddp")
    rank, size = dist.get_rank(), dist.get_world_size()
    # torch 2: whether torch calls the backend's C++ part (bindings/torch_native), as built here.
    forwarded = hasattr(ddp.torch._native.module, "ForwardingBackend")
    assert forwarded or not hasattr(torch._C._distributed_c10d, "Backend"), \
        "torch 2: the backend's C++ part was not built"
    # A ring: everyone sends right and receives from the left at once, three times. These are the
    # first transfers: each rank's first isend waits for its right neighbour, whose own first
    # isend waits for the next one (with 3 ranks or more, a cycle, unless the pairs' groups are
    # made off the caller's thread).
    for step in range(3):
        out, got = torch.full((1000,), float(rank * 100 + step)), torch.empty(1000)
        works = [dist.isend(out, (rank + 1) % size), dist.irecv(got, (rank - 1) % size)]
        for w in works:
            w.wait()
            if forwarded or not hasattr(torch._C._distributed_c10d, "Backend"):
                assert w.is_completed(), f"ring step {step}: a Work not completed after wait()"
        if forwarded:  # torch's Work.result(): the tensor each moved
            assert works[1].result()[0].data_ptr() == got.data_ptr(), "irecv's result()"
            assert works[0].exception() is None, works[0].exception()
        expect(f"ring step {step}", got, torch.full((1000,), float(((rank - 1) % size) * 100 +
                                                                   step)))
    # Rank 0 sends each other rank two tensors, tags 1 then 2; the receiver takes tag 2 first.
    if rank == 0:
        for peer in range(1, size):
            for dtype in (torch.float32, torch.int64, torch.bfloat16):
                dist.send(torch.full((3,), peer * 10 + 1, dtype=dtype), dst=peer, tag=1)
                dist.send(torch.full((5,), peer * 10 + 2, dtype=dtype), dst=peer, tag=2)
    else:
        for dtype in (torch.float32, torch.int64, torch.bfloat16):
            second, first = torch.empty(5, dtype=dtype), torch.empty(3, dtype=dtype)
            w2 = dist.irecv(second, src=0, tag=2)
            dist.recv(first, src=0, tag=1)
            w2.wait()
            expect(f"tag 1 {dtype}", first, torch.full((3,), rank * 10 + 1, dtype=dtype))
            expect(f"tag 2 {dtype}", second, torch.full((5,), rank * 10 + 2, dtype=dtype))
    # batch_isend_irecv: the same ring, the other way.
    out, got = torch.full((7,), float(rank)), torch.empty(7)
    ops = [dist.P2POp(dist.isend, out, (rank - 1) % size),
           dist.P2POp(dist.irecv, got, (rank + 1) % size)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    expect("batch_isend_irecv", got, torch.full((7,), float((rank + 1) % size)))
    # In a later group of the ranks but 0 (peers named by global rank, as torch takes them).
    rest = list(range(1, size))
    group = dist.new_group(rest)
    if len(rest) >= 2 and rank in rest:
        first, last = rest[0], rest[-1]
        if rank == first:
            dist.send(torch.arange(4.0), dst=last, group=group)
        elif rank == last:
            t = torch.empty(4)
            dist.recv(t, src=first, group=group)
            expect("in a group", t, torch.arange(4.0))
    # From any source: served on torch 1.13 and, through the backend's C++ part, on torch 2.
    if hasattr(torch._C._distributed_c10d, "Backend") and not forwarded:
        if size > 1 and rank == 1:  # torch 2 without that part: refused, saying why
            try:
                dist.recv(torch.empty(1))
            except (NotImplementedError, RuntimeError) as e:
                assert "src=" in str(e), e
            else:
                sys.exit("recv from any source was not refused")
    else:
        any_source(rank, size)
    idle_threads_go(rank, size)
    dist.barrier()
    print(f"c10d p2p ok {rank}", flush=True)
    dist.destroy_process_group()


main()
