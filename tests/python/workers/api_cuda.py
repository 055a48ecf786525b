# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddp.torch on CUDA tensors (the NCCL backend): every collective, dtype and op, compared with the
same collective on CPU copies through libddp's CPU path (which test_api checks against float64
references), plus DistributedOptimizer on a CUDA model against the same training on CPU. One rank
per GPU (NCCL allows no more)."""
import torch

import ddp.torch as ddp
from ddp import _ddp
from api_torch import DTYPES, OPS, TOL, data  # the same inputs as the CPU test


def same(gpu, cpu, dtype, what):
    assert gpu.is_cuda, f"{what}: the result is not on the GPU"
    got = gpu.cpu()
    assert got.shape == cpu.shape, f"{what}: shape {tuple(got.shape)} != {tuple(cpu.shape)}"
    tol = TOL.get(dtype, 0)
    diff = (got.to(torch.float64) - cpu.to(torch.float64)).abs()
    bound = tol * (1 + cpu.to(torch.float64).abs())
    assert bool((diff <= bound).all()), f"{what}: max diff {diff.max().item()}"


def main():
    ddp.init()
    rank, size = ddp.rank(), ddp.size()
    torch.cuda.set_device(ddp.local_rank())
    dev = torch.device("cuda", ddp.local_rank())

    # Every dtype x op, sync / async / in place, through fusion (submitted together).
    handles = []
    for dtype in DTYPES:
        for op in OPS:
            for count in (0, 1, 1000, 65537):
                x = data(rank, dtype, op, count)
                want = ddp.allreduce(x, op=op, name=f"cpu.{dtype}.{int(op)}.{count}")
                # Produced on the current stream just before the submission: the collective
                # must wait for it (the ready event), not read stale memory.
                g = (x.to(dev, torch.float64) * 1).to(dtype)
                name = f"gpu.{dtype}.{int(op)}.{count}"
                handles.append((ddp.allreduce_async(g, op=op, name=name), want, dtype,
                                f"allreduce {dtype} {op} {count}"))
                g2 = x.to(dev)
                name = f"ip.{dtype}.{int(op)}.{count}"
                handles.append((ddp.allreduce_async_(g2, op=op, name=name), want, dtype,
                                f"allreduce_ {dtype} {op} {count}"))
    for h, want, dtype, what in handles:
        same(ddp.synchronize(h), want, dtype, what)

    # allreduce_async(_) of a CUDA tensor takes the C++ submission path (tensor_path.cc), not the
    # general one, and starts after the work queued on the current stream: the tensor is filled
    # on a side stream behind a long kernel and submitted while that stream is current. The
    # handle finishes once the collective is enqueued (stream-ordered): synchronize() on another
    # stream (the default one here) makes that stream wait for the result, not the host.
    side = torch.cuda.Stream(dev)
    for inplace in (True, False):
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)  # tens of milliseconds of GPU time on `side`
            late = torch.full((1 << 20,), float(rank + 1), device=dev)
            h = _ddp.torch_allreduce(late, f"fast.{inplace}", int(ddp.Sum), 1.0, 1.0, 0, inplace)
            assert h is not NotImplemented, "a CUDA tensor took the general submission path"
        out = ddp.synchronize(h)
        assert (out is late) == inplace
        want = torch.full((1 << 20,), float(size * (size + 1) // 2))
        same(out, want, torch.float32, f"allreduce on a side stream (in place: {inplace})")
    # Through the public functions and the general path (a grouped allreduce) too.
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        late = torch.full((4096,), 2.0, device=dev)
        h = ddp.allreduce_async_(late, op=ddp.Sum, name="fast.public")
        group = [torch.full((n,), 3.0, device=dev) for n in (5, 50000)]
        hg = ddp.grouped_allreduce_async_(group, op=ddp.Sum, name="general.group")
    same(h.wait(), torch.full((4096,), 2.0 * size), torch.float32, "allreduce_async_, side stream")
    for g, n in zip(ddp.synchronize(hg), (5, 50000)):
        same(g, torch.full((n,), 3.0 * size), torch.float32, "grouped allreduce on a side stream")
    # poll() says done only once the GPU is through (torch's Work.is_completed()).
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)
        slow = torch.ones(8, device=dev)
        h = ddp.allreduce_async_(slow, op=ddp.Sum, name="poll.gpu")
    ddp.synchronize(h)
    polled_early = ddp.poll(h)
    torch.cuda.synchronize()
    assert ddp.poll(h), "poll() is False after the GPU finished"
    print(f"rank {rank}: poll right after synchronize: {polled_early} (the GPU was still busy)")

    # Scale factors, grouped, broadcast, allgather (uneven), alltoall, reducescatter (uneven).
    x = data(rank, torch.float32, ddp.Sum, 777)
    same(ddp.allreduce(x.to(dev), op=ddp.Average, prescale_factor=2.0, postscale_factor=0.5),
         ddp.allreduce(x, op=ddp.Average, prescale_factor=2.0, postscale_factor=0.5),
         torch.float32, "scaled allreduce")
    xs = [data(rank, torch.bfloat16, ddp.Sum, n) for n in (3, 300, 30000)]
    for g, c in zip(ddp.grouped_allreduce([t.to(dev) for t in xs], op=ddp.Sum),
                    ddp.grouped_allreduce(xs, op=ddp.Sum)):
        same(g, c, torch.bfloat16, "grouped allreduce")
    b = torch.full((5, 3), float(rank), dtype=torch.float64)
    same(ddp.broadcast(b.to(dev), root_rank=size - 1), ddp.broadcast(b, root_rank=size - 1),
         torch.float64, "broadcast")
    bd = b.to(dev)
    ddp.broadcast_(bd, root_rank=0)
    same(bd, torch.zeros(5, 3, dtype=torch.float64), torch.float64, "broadcast_")
    rows = torch.arange((rank + 1) * 4, dtype=torch.int32).reshape(rank + 1, 4) + 100 * rank
    same(ddp.allgather(rows.to(dev)), ddp.allgather(rows), torch.int32, "allgather (uneven)")
    a = torch.arange(size * 2 * 3, dtype=torch.int64).reshape(size * 2, 3) + 1000 * rank
    same(ddp.alltoall(a.to(dev)), ddp.alltoall(a), torch.int64, "alltoall")
    r = data(rank, torch.float16, ddp.Sum, (2 * size + 1) * 6).reshape(2 * size + 1, 6)
    same(ddp.reducescatter(r.to(dev), op=ddp.Sum), ddp.reducescatter(r, op=ddp.Sum),
         torch.float16, "reducescatter (uneven)")
    # An allgather result keeps its memory alive on its own (the handle owns it).
    kept = ddp.allgather(rows.to(dev))
    torch.cuda.synchronize()
    del rows
    assert int(kept[0, 0].item()) == 0

    # DistributedOptimizer: a CUDA model and a CPU model with the same initial weights and
    # batches end bit-for-bit close after a few steps.
    def train(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 5)).to(device)
        opt = ddp.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
        ddp.broadcast_parameters(model.state_dict(), root_rank=0)
        g = torch.Generator().manual_seed(rank)
        for _ in range(5):
            inputs = torch.randn(16, 20, generator=g).to(device)
            labels = torch.randint(0, 5, (16,), generator=g).to(device)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(inputs), labels).backward()
            opt.step()
        return [p.detach().cpu() for p in model.parameters()]

    for pg, pc in zip(train(dev), train("cpu")):
        assert torch.allclose(pg, pc, atol=1e-5), "CUDA and CPU training diverged"

    ddp.shutdown()
    print(f"rank {rank}: cuda api ok on {torch.cuda.get_device_name(dev)}")


if __name__ == "__main__":
    main()
