# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""init_process_group("ddp") through each of torch's rendezvous: init_method env://, tcp://,
file://, and store=. Also the bad input the backend refuses at once, with clear errors. Run as
rank RANK of WORLD_SIZE (set by the test, with MASTER_ADDR/MASTER_PORT for env://):
    c10d_init.py env|tcp|file|store PORT_OR_FILE
Prints "c10d init ok <how>"."""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import ddp.torch  # registers the backend

how, where = sys.argv[1], sys.argv[2]
# tcp-no-rank: WORLD_SIZE exported and RANK not (as PyTorch's own suite runs its ranks): torch is
# handed both, and the launcher's half-set variables must not matter.
rank = int(os.environ["RANK"] if how != "tcp-no-rank" else os.environ.pop("RANK"))
size = int(os.environ["WORLD_SIZE"])
if how in ("env", "env-detail"):  # env-detail: under TORCH_DISTRIBUTED_DEBUG=DETAIL
    dist.init_process_group("ddp")
elif how == "env-mixed":  # torch 2: ddp for CPU tensors beside another backend for CUDA's
    dist.init_process_group("cpu:ddp,cuda:gloo")
    cpu = dist.group.WORLD._get_backend(torch.device("cpu"))
    assert cpu.name() == "ddp" or "DDP" in type(cpu).__name__, type(cpu)
elif how in ("tcp", "tcp-no-rank"):
    dist.init_process_group("ddp", init_method=f"tcp://127.0.0.1:{where}", rank=rank,
                            world_size=size)
elif how == "file":
    dist.init_process_group("ddp", init_method=f"file://{where}", rank=rank, world_size=size)
else:
    store = dist.TCPStore("127.0.0.1", int(where), size, rank == 0, timedelta(seconds=60))
    dist.init_process_group("ddp", store=store, rank=rank, world_size=size)
assert (dist.get_rank(), dist.get_world_size()) == (rank, size)
t = torch.full((3,), float(rank + 1))
dist.all_reduce(t)
assert t.tolist() == [size * (size + 1) / 2] * 3, t
if how == "env-detail":  # torch's checking wrapper around a later group's backend (torch 2)
    objects = [None] * size
    dist.all_gather_object(objects, {"rank": rank}, group=dist.new_group(list(range(size))))
    assert objects == [{"rank": r} for r in range(size)], objects


def refused(what, call, *words):
    try:
        call()
    except (ValueError, RuntimeError, NotImplementedError) as e:
        for w in words:
            assert w in str(e), f"{what}: {w!r} not in {e}"
        return
    sys.exit(f"rank {rank}: {what} was not refused")


refused("too few all_gather outputs",
        lambda: dist.all_gather([torch.empty(2)], torch.ones(2)), "output")
if torch.__version__ < "2":  # 1.13 does not hand a backend PREMUL_SUM's factor
    refused("PREMUL_SUM", lambda: dist.all_reduce(
        torch.ones(2), op=dist._make_nccl_premul_sum(2.0)), "PREMUL_SUM", "torch 2")
else:
    refused("PREMUL_SUM of integers", lambda: dist.all_reduce(
        torch.ones(2, dtype=torch.int32), op=dist._make_nccl_premul_sum(2.0)), "PREMUL_SUM",
        "floating-point")
refused("BAND on floats", lambda: dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND),
        "BAND", "float")
if torch.__version__ < "2":  # torch 2 runs meta tensors' collectives itself (shapes only)
    refused("a meta tensor", lambda: dist.all_reduce(torch.empty(2, device="meta")), "meta")
if hasattr(torch._C._distributed_c10d, "Backend") and ddp.torch._native.module is None:
    # torch 2 without the backend's C++ part (served otherwise: workers/c10d_p2p.py)
    refused("recv from any source", lambda: dist.recv(torch.ones(1)), "src=")
refused("send to itself", lambda: dist.send(torch.ones(1), dst=rank), "rank")
# Outputs that cannot hold what the input asks for: refused at the call, before anything is sent
# (every rank here passes the same, so the ranks stay in step).
refused("all_gather outputs of another size", lambda: dist.all_gather(
    [torch.empty(3) for _ in range(size)], torch.ones(2)), "elements")
refused("all_gather_into_tensor of another dtype", lambda: dist.all_gather_into_tensor(
    torch.empty(2 * size, dtype=torch.float64), torch.ones(2)), "float64")
refused("all_to_all_single split sizes", lambda: dist.all_to_all_single(
    torch.empty(size), torch.ones(size), input_split_sizes=[1] * (size + 1)), "split sizes")
if size > 1:
    refused("all_to_all_single uneven without splits", lambda: dist.all_to_all_single(
        torch.empty(size + 1), torch.ones(size + 1)), "evenly")
dist.barrier()
t = torch.ones(2)
dist.all_reduce(t)
assert t.tolist() == [float(size)] * 2, f"after the refusals: {t}"
# Outputs that do not hold what the peers send (each sends one element, each output holds two):
# known once the data has moved. On torch 2 that operation fails, on its own (the group goes
# on); torch 1.13's Work cannot raise, so there the group's next operation raises it.
outs = [torch.empty(2) for _ in range(size)]
try:
    dist.all_to_all(outs, [torch.ones(1) for _ in range(size)])
    if torch.__version__ < "2":
        dist.barrier()
except (ValueError, RuntimeError) as e:
    assert "the ranks sent [1" in str(e), e
else:
    sys.exit(f"rank {rank}: all_to_all into outputs of other sizes was not refused")
if torch.__version__ < "2":
    # The group keeps that error: no rank leaves before all have heard it (one that left would be
    # the others' error instead), meeting through torch's store; rank 0 hosts it and leaves last.
    store = dist.distributed_c10d._get_default_store()
    for key in ("refused-done", "refused-left") if rank == 0 else ("refused-done",):
        store.add(key, 1)
        while store.add(key, 0) < size:
            time.sleep(0.01)
    if rank != 0:
        store.add("refused-left", 1)
    print(f"c10d init ok {how}", flush=True)
    sys.exit(0)
dist.barrier()
print(f"c10d init ok {how}", flush=True)
dist.destroy_process_group()
