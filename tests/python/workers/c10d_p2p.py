"""send and recv of the 'ddp' backend: blocking and async, matched by tag whatever the order of
other tags, a ring exchange, batch_isend_irecv, in a later group, several dtypes; recv without
src= refused with the reason. Run as every rank of a job of WORLD_SIZE >= 2 with torch's env://
variables. Prints "c10d p2p ok <rank>"."""
import sys

import torch
import torch.distributed as dist

import ddp.torch  # noqa: F401 - registers the backend


def expect(what, got, want):
    if not torch.equal(got, want):
        sys.exit(f"rank {dist.get_rank()}: {what}: got {got} want {want}")


def main():
    dist.init_process_group("ddp")
    rank, size = dist.get_rank(), dist.get_world_size()
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
    # A ring: everyone sends right and receives from the left at once, three times.
    for step in range(3):
        out, got = torch.full((1000,), float(rank * 100 + step)), torch.empty(1000)
        works = [dist.isend(out, (rank + 1) % size), dist.irecv(got, (rank - 1) % size)]
        for w in works:
            w.wait()
        expect(f"ring step {step}", got, torch.full((1000,), float(((rank - 1) % size) * 100 +
                                                                   step)))
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
    # From any source: refused, saying why.
    if size > 1 and rank == 1:
        try:
            dist.recv(torch.empty(1))
        except (NotImplementedError, RuntimeError) as e:
            assert "src=" in str(e), e
        else:
            sys.exit("recv from any source was not refused")
    dist.barrier()
    print(f"c10d p2p ok {rank}", flush=True)
    dist.destroy_process_group()


main()
