# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Horovod's semantics in ddp.torch, where they differ from a plain API: errors raised at the
call (a name still in flight is a ValueError there), a barrier that does not wait for unrelated
pending operations, a dropped handle whose output the engine still writes, ProcessSet objects
(add, remove, duplicates), Horovod's argument positions, compression=, alltoall with uneven
splits and sparse_allreduce_async."""

import gc
import json
import os
import shutil
import sys
import tempfile
import time

import torch

import ddp.torch as hvd


def fail(what):
    sys.exit(f"rank {hvd.rank()}: {what}")


def check(what, got, want):
    if not torch.equal(got, want):
        fail(f"{what}: got {got}, want {want}")


def expect_value_error(what, call, *words):
    try:
        call()
    except ValueError as e:
        if not isinstance(e, hvd.DDPError) or any(w not in str(e) for w in words):
            fail(f"{what}: {type(e).__name__}: {e}")
        return e
    fail(f"{what}: no ValueError")


def duplicate_names(rank, size):
    # Horovod's test, made deterministic: the second submission of a name still in flight raises
    # at the call (not at synchronize), on each rank in turn. Each rank's turn has a name of its
    # own, which no other rank has submitted yet, so its first submission cannot have finished
    # (in Horovod's test the other ranks' first submissions complete the operation, and the
    # second one is refused only while the engine has not run it yet: a race, which an engine
    # that runs an operation as soon as its last rank submits it loses). The barriers between do
    # not wait for the pending submissions; each completes once every rank has submitted its name.
    x = torch.full((17, 17), float(rank + 1))
    handles = []
    for turn in range(size):
        if rank == turn:
            handles.append(hvd.allreduce_async(x, name=f"dup{turn}", op=hvd.Sum))
            expect_value_error("duplicate name", lambda: hvd.allreduce_async(x, name=f"dup{turn}"),
                               f"'dup{turn}'", "in flight")
        hvd.barrier()
    handles += [hvd.allreduce_async(x, name=f"dup{turn}", op=hvd.Sum)
                for turn in range(size) if turn != rank]
    for h in handles:
        check("the first submission's sum", hvd.synchronize(h),
              torch.full((17, 17), float(size * (size + 1) // 2)))
    # A refused call leaves nothing pending and does not advance the automatic names.
    check("after the refusal", hvd.allreduce(x, op=hvd.Sum),
          torch.full((17, 17), float(size * (size + 1) // 2)))


def dropped_handles(rank, size):
    # The handle of a pending allreduce_async (not in place: ddp.torch allocates the output) is
    # dropped at once; the engine writes the output when the others come, so the output must
    # outlive the handle. Churn the allocator meanwhile: a freed output would be reused.
    for i in range(20):
        if rank == 0:
            hvd.allreduce_async(torch.ones(4096), name=f"dropped.{i}")
            gc.collect()
            junk = [torch.full((4096,), 7.0) for _ in range(64)]
            del junk
        else:
            time.sleep(0.01)
            hvd.synchronize(hvd.allreduce_async(torch.ones(4096), name=f"dropped.{i}"))
        hvd.barrier()


def process_sets(rank, size):
    gs = hvd.global_process_set
    if gs.process_set_id != 0 or gs.ranks != list(range(size)) or gs.size() != size:
        fail(f"global_process_set: {gs}")
    odd = hvd.ProcessSet([r for r in range(size) if r % 2][::-1])  # ranks in any order
    if odd.process_set_id is not None or odd.size() is not None or odd.rank() is not None:
        fail(f"a set not added yet: {odd}")
    added = hvd.add_process_set(odd)
    if added is not odd or odd.ranks != sorted(odd.ranks) or odd.process_set_id is None:
        fail(f"add_process_set returned {added} for {odd}")
    if odd.included() != (rank % 2 == 1) or odd.size() != len(odd.ranks):
        fail(f"{odd}: included {odd.included()}, size {odd.size()}")
    if odd.rank() != (odd.ranks.index(rank) if rank in odd.ranks else -1):
        fail(f"{odd}: rank() {odd.rank()}")
    # The same ranks again (or the whole job) are a duplicate, as in Horovod.
    expect_value_error("duplicate set", lambda: hvd.add_process_set(list(odd.ranks)),
                       "exists already")
    expect_value_error("the whole job", lambda: hvd.add_process_set(range(size)),
                       "exists already")
    even = hvd.add_process_set(range(0, size, 2))
    mine = odd if rank in odd.ranks else even
    x = torch.full((3,), float(rank))
    check("allreduce in a set", hvd.allreduce(x, op=hvd.Sum, process_set=mine),
          torch.full((3,), float(sum(mine.ranks))))
    check("allgather in a set", hvd.allgather(x.view(1, 3), process_set=mine),
          torch.stack([torch.full((3,), float(r)) for r in mine.ranks]))
    root = mine.ranks[-1]
    got = hvd.broadcast_object({"from": rank}, root_rank=root, process_set=mine)
    if got != {"from": root}:
        fail(f"broadcast_object in a set: {got}")
    if hvd.allgather_object(rank, process_set=mine) != mine.ranks:
        fail("allgather_object in a set")
    hvd.barrier(process_set=mine)
    # Removed: the object is no longer usable, its ranks may be added again.
    if not hvd.remove_process_set(odd) or odd.process_set_id is not None:
        fail(f"remove_process_set: {odd}")
    if hvd.remove_process_set(odd) or hvd.remove_process_set(hvd.global_process_set):
        fail("removing a removed set or the global one returned True")
    if rank in odd.ranks:
        try:
            hvd.allreduce(x, process_set=odd)
            fail("a removed set was usable")
        except hvd.DDPError as e:
            if "removed" not in str(e):
                fail(f"a removed set: {e}")
    again = hvd.add_process_set(odd.ranks)
    if rank in again.ranks:
        check("a set added again", hvd.allreduce(x, op=hvd.Max, process_set=again),
              torch.full((3,), float(again.ranks[-1])))
    hvd.remove_process_set(again)
    hvd.remove_process_set(even)


def horovod_positions(rank, size):
    # Horovod's positions: allreduce_(tensor, average, name, op), allreduce(tensor, average,
    # name, compression, op), reducescatter(tensor, name, compression, op).
    total = size * (size + 1) // 2
    t = torch.IntTensor([rank + 1])
    if hvd.allreduce_(t, None, "positions.int", hvd.Sum) != total:
        fail(f"allreduce_(t, None, name, Sum): {t}")
    x = torch.full((4,), float(rank + 1))
    check("allreduce(x, ddp.Sum)", hvd.allreduce(x, hvd.Sum), torch.full((4,), float(total)))
    check("allreduce(x, False, name)", hvd.allreduce(x, False, "positions.sum"),
          torch.full((4,), float(total)))
    check("allreduce(x, None, name, fp16, Sum)",
          hvd.allreduce(x, None, "positions.fp16", hvd.Compression.fp16, hvd.Sum),
          torch.full((4,), float(total)))
    got = hvd.allreduce(x.double(), compression=hvd.Compression.fp16, op=hvd.Sum)
    if got.dtype != torch.float64 or not torch.all(got == total):
        fail(f"compression=fp16 came back as {got}")
    rows = torch.ones(2 * size, 2)
    check("reducescatter(t, name, none, Sum)",
          hvd.reducescatter(rows, "positions.rs", hvd.Compression.none, hvd.Sum),
          torch.full((2, 2), float(size)))
    check("grouped_allreduce(ts, False)", hvd.grouped_allreduce([x, x * 2], False)[1],
          torch.full((4,), float(2 * total)))


def uneven_alltoall(rank, size):
    # Rank r sends j + r + 1 rows to rank j (rows valued 100 r + j); what rank r receives from j
    # is r + j + 1 rows valued 100 j + r, with the received splits.
    splits = torch.tensor([j + rank + 1 for j in range(size)], dtype=torch.int32)
    x = torch.cat([torch.full((j + rank + 1, 2), float(100 * rank + j)) for j in range(size)])
    got, received = hvd.alltoall(x, splits, name="uneven")
    want = torch.cat([torch.full((rank + j + 1, 2), float(100 * j + rank)) for j in range(size)])
    check("alltoall with splits", got, want)
    check("received splits", received, torch.tensor([rank + j + 1 for j in range(size)],
                                                    dtype=torch.int32))
    # Without splits each rank splits its own first dimension evenly, and the ranks' first
    # dimensions may differ (rank r sends r + 1 rows to each rank), with the gradient.
    y = torch.cat([torch.full((rank + 1, 2), float(10 * rank + j)) for j in range(size)])
    y.requires_grad_()
    got = hvd.alltoall(y, name="uneven.even")
    check("alltoall of different first dimensions", got.detach(),
          torch.cat([torch.full((j + 1, 2), float(10 * j + rank)) for j in range(size)]))
    (got * (rank + 1)).sum().backward()
    check("its gradient", y.grad, torch.cat([torch.full((rank + 1, 2), float(j + 1))
                                             for j in range(size)]))
    # Zero rows to some ranks, a list of splits, an async handle.
    counts = [2 if j == rank else 0 for j in range(size)]
    got, received = hvd.synchronize(hvd.alltoall_async(torch.full((2, 1), float(rank)), counts))
    check("alltoall to oneself only", got, torch.full((2, 1), float(rank)))
    check("received splits (list)", received, torch.tensor(counts))
    expect_value_error("splits over the rows", lambda: hvd.alltoall(torch.ones(size - 1),
                                                                      torch.ones(size,
                                                                                 dtype=torch.int32)),
                       "add up to")
    expect_value_error("float splits", lambda: hvd.alltoall(torch.ones(size),
                                                            torch.ones(size)), "integers")
    # The gradient goes back the way the rows came.
    x = x.clone().requires_grad_()
    out, _ = hvd.alltoall(x, splits, name="uneven.grad")
    (out * (rank + 1)).sum().backward()
    want = torch.cat([torch.full((j + rank + 1, 2), float(j + 1)) for j in range(size)])
    check("uneven alltoall gradient", x.grad, want)


def sparse(rank, size):
    torch.manual_seed(rank)
    dense = torch.zeros(20, 3)
    dense[rank::size + 1] = torch.rand(len(range(rank, 20, size + 1)), 3)
    want = hvd.allreduce(dense, op=hvd.Average, name="sparse.dense")
    handle = hvd.sparse_allreduce_async(dense.to_sparse(), name="sparse", op=hvd.Average)
    got = handle()
    if not got.is_sparse or not torch.allclose(got.to_dense(), want):
        fail(f"sparse_allreduce_async: {got}")


def optimizer_features(rank, size):
    # Sparse gradients (nn.Embedding(sparse=True)) reduced as sparse or, with sparse_as_dense, as
    # dense; groups; Horovod's _parameter_names; broadcast_optimizer_state on a fresh optimizer.
    for sparse_as_dense in (False, True):
        torch.manual_seed(0)
        emb = torch.nn.Embedding(10, 3, sparse=True)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=1.0),
                                       named_parameters=emb.named_parameters(),
                                       sparse_as_dense=sparse_as_dense)
        hvd.broadcast_parameters(emb.state_dict(), root_rank=0)
        before = emb.weight.detach().clone()
        emb(torch.tensor([rank, 9])).sum().backward()
        opt.step()
        # The average gradient: 1/size on each rank's row, 1 on row 9 (everyone's).
        want = before.clone()
        for r in range(size):
            want[r] -= 1.0 / size
        want[9] -= 1.0
        if not torch.allclose(emb.weight.detach(), want):
            fail(f"sparse gradients (sparse_as_dense={sparse_as_dense}): {emb.weight}")
        if not emb.weight.grad.is_sparse:  # with sparse_as_dense: reduced dense, sparse again
            fail(f"sparse_as_dense={sparse_as_dense}: the gradient came back dense")
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for groups in (2, [list(model[0].parameters()), list(model[1].parameters())]):
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters(), groups=groups)
        names = opt._parameter_names
        if (len(set(names.values())) != 4
                or {id(p) for p in names} != {id(p) for p in model.parameters()}):
            fail(f"_parameter_names: {names}")
        model(torch.full((2, 4), float(rank))).sum().backward()
        opt.synchronize()
        grads = [p.grad.clone() for p in model.parameters()]
        for g in grads:
            everyone = hvd.allgather(g.unsqueeze(0))
            if not torch.allclose(everyone, everyone[:1].expand_as(everyone)):
                fail(f"groups={groups}: ranks differ after synchronize")
        with opt.skip_synchronize():
            opt.step()
        opt.zero_grad()
        opt.remove_hooks()
    # An optimizer in a process set this rank is not in trains on its own (Horovod's rule).
    solo = hvd.add_process_set([0])
    local = torch.nn.Linear(2, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(local.parameters(), lr=1.0),
                                   named_parameters=local.named_parameters(), process_set=solo)
    local(torch.full((1, 2), float(rank))).sum().backward()
    opt.step()
    if not torch.equal(local.weight.grad, torch.full((1, 2), float(rank))):
        fail(f"an optimizer of a set {solo}: gradient {local.weight.grad}")
    opt.remove_hooks()
    hvd.remove_process_set(solo)
    # SparseAdam with sparse_as_dense: reduced dense, handed back sparse.
    emb = torch.nn.Embedding(4, 2, sparse=True)
    hvd.broadcast_parameters(emb.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(emb.parameters()),
                                   named_parameters=emb.named_parameters(), sparse_as_dense=True)
    emb(torch.tensor([rank % 4])).sum().backward()
    opt.step()
    if not emb.weight.grad.is_sparse:
        fail("sparse_as_dense did not give the optimizer its sparse gradient back")
    opt.remove_hooks()
    # Duplicate parameter names are a ValueError, as in Horovod.
    a, b = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)
    expect_value_error("duplicate parameter names", lambda: hvd.DistributedOptimizer(
        torch.optim.SGD(list(a.parameters()) + list(b.parameters()), lr=0.1),
        named_parameters=list(a.named_parameters()) + list(b.named_parameters())), "unique")
    # A fresh optimizer's state is made (zero gradients, one local step) and broadcast.
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0, model=model)
    if any(p.grad is None for p in model.parameters()) or not opt.state_dict()["state"]:
        fail("broadcast_optimizer_state did not make the state of a fresh optimizer")
    opt.remove_hooks()
    # Adasum is a name scripts import; libddp refuses it.
    try:
        hvd.allreduce(torch.ones(2), op=hvd.Adasum)
        fail("op=Adasum did not raise")
    except hvd.DDPError as e:
        if "Adasum" not in str(e) or e.code != "UNIMPLEMENTED":
            fail(f"Adasum: {e}")
    # grouped_allgather is differentiable.
    x = torch.ones(1, 2, requires_grad=True)
    y = torch.ones(2, requires_grad=True)
    a, b = hvd.grouped_allgather([x, y])
    (a.sum() * (rank + 1) + b.sum()).backward()
    check("grouped_allgather gradient", x.grad, torch.full((1, 2), (size + 1) / 2))
    # horovodrun's variables, set by ddprun.
    if os.environ.get("HOROVOD_RANK") != str(rank) or os.environ.get("HOROVOD_SIZE") != str(size):
        fail("HOROVOD_RANK/HOROVOD_SIZE not set by ddprun")


def timeline(rank, size):
    # start_timeline/stop_timeline at run time: '{rank}' gives each rank its file; without it
    # only rank 0 writes (Horovod's rule); each file is complete JSON once stopped.
    folder = hvd.broadcast_object(tempfile.mkdtemp() if rank == 0 else None, root_rank=0)
    for marks in (True, False):
        path = os.path.join(folder, f"tl-{{rank}}-{marks}.json")
        hvd.start_timeline(path, mark_cycles=marks)
        hvd.allreduce(torch.ones(3), name="timeline.test")
        time.sleep(0.05)
        hvd.stop_timeline()
        with open(path.replace("{rank}", str(rank))) as f:
            text = f.read()
        trace = json.loads(text)
        names = {e.get("name") for e in trace}
        if not {"NEGOTIATE", "ALLREDUCE"} <= names or "timeline.test" not in text:
            fail(f"timeline (marks {marks}): {sorted(n for n in names if n)}")
        if ("CYCLE_START" in names) != marks or "start_time_since_epoch_in_micros" not in text:
            fail(f"timeline cycle markers (marks {marks})")
    shared = os.path.join(folder, "shared.json")
    hvd.start_timeline(shared)
    hvd.allreduce(torch.ones(3), name="timeline.shared")
    hvd.stop_timeline()
    hvd.barrier()
    if rank == 0:
        with open(shared) as f:
            if '"pid":0,' not in f.read():
                fail("the shared timeline is not rank 0's")
        files = sorted(os.listdir(folder))
        if len(files) != 2 * size + 1:
            fail(f"timeline files: {files}")
    hvd.barrier()
    if rank == 0:
        shutil.rmtree(folder)


def sync_batch_norm(rank, size):
    # SyncBatchNorm on CPU tensors: each rank's slice of one batch (of different sizes) gives the
    # outputs, input gradients and running statistics of torch's BatchNorm on the whole batch;
    # the weight's gradients, summed over ranks, are the whole batch's.
    torch.manual_seed(0)
    rows = [r + 2 for r in range(size)]
    whole = torch.randn(sum(rows), 3, 4, dtype=torch.float64)
    start = sum(rows[:rank])
    mine = whole[start:start + rows[rank]].clone().requires_grad_()
    sync = hvd.SyncBatchNorm(3).double()
    ref = torch.nn.BatchNorm1d(3).double()
    for m in (sync, ref):
        m.weight.data = torch.tensor([1.0, 2.0, -0.5], dtype=torch.float64)
        m.bias.data = torch.tensor([0.1, 0.0, 0.3], dtype=torch.float64)
    full = whole.clone().requires_grad_()
    w = torch.randn_like(whole)
    (ref(full) * w).sum().backward()
    out = sync(mine)
    (out * w[start:start + rows[rank]]).sum().backward()
    ref_out = torch.nn.functional.batch_norm(whole, None, None, ref.weight, ref.bias, True)
    if not torch.allclose(out.detach(), ref_out[start:start + rows[rank]], atol=1e-10):
        fail("SyncBatchNorm output")
    if not torch.allclose(mine.grad, full.grad[start:start + rows[rank]], atol=1e-10):
        fail("SyncBatchNorm input gradient")
    grad_w = hvd.allreduce(sync.weight.grad, op=hvd.Sum)
    if not torch.allclose(grad_w, ref.weight.grad, atol=1e-10):
        fail(f"SyncBatchNorm weight gradient {grad_w} != {ref.weight.grad}")
    if not (torch.allclose(sync.running_mean, ref.running_mean, atol=1e-12)
            and torch.allclose(sync.running_var, ref.running_var, atol=1e-12)):
        fail("SyncBatchNorm running statistics")
    sync.eval()
    if not torch.equal(sync(mine.detach()), torch.nn.functional.batch_norm(
            mine.detach(), sync.running_mean, sync.running_var, sync.weight, sync.bias, False)):
        fail("SyncBatchNorm in eval")


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    duplicate_names(rank, size)
    dropped_handles(rank, size)
    process_sets(rank, size)
    horovod_positions(rank, size)
    uneven_alltoall(rank, size)
    sparse(rank, size)
    optimizer_features(rank, size)
    timeline(rank, size)
    sync_batch_norm(rank, size)
    hvd.barrier()
    print(f"rank {rank}: ok")


if __name__ == "__main__":
    main()
