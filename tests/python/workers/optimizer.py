# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""DistributedOptimizer against single-process training on the concatenated batch.

usage: optimizer.py MODE   (plain | fp16 | passes | join | predivide | adam)
Every rank builds the same global data; rank r trains on its slice of each global batch. Each rank
also trains a reference copy of the model alone on the whole batch (which is what averaging the
ranks' gradients amounts to). After the steps: parameters are bit-identical on every rank and
match the reference to float tolerance. Exits non-zero on failure.
"""
import copy
import sys

import torch
import torch.nn.functional as F

import ddp.torch as ddp

STEPS, BATCH = 6, 8  # per-rank batch


def make_model():
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def global_batch(step, size, rows=BATCH):
    g = torch.Generator().manual_seed(step)
    return torch.randn(size * rows, 10, generator=g), torch.randint(0, 3, (size * rows,),
                                                                   generator=g)


def make_optimizer(kind, params):
    if kind == "adam":
        return torch.optim.Adam(params, lr=0.01)
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def fail(message):
    sys.exit(f"rank {ddp.rank()}: {message}")


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def main():
    mode = sys.argv[1]
    ddp.init()
    rank, size = ddp.rank(), ddp.size()
    model = make_model()
    # Start from different weights on purpose: broadcast_parameters must fix that.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(rank)
    ddp.broadcast_parameters(model.state_dict(), root_rank=0)
    reference = make_model()
    if not torch.equal(flat(model), flat(reference)):
        fail("broadcast_parameters did not give rank 0's weights")

    kind = "adam" if mode == "adam" else "sgd"
    base = make_optimizer(kind, model.parameters())
    ref_opt = make_optimizer(kind, reference.parameters())
    options = {}
    if mode == "fp16":
        options["compression"] = ddp.Compression.fp16
    if mode == "passes":
        options["backward_passes_per_step"] = 2
    if mode == "predivide":
        options["gradient_predivide_factor"] = float(size)
    opt = ddp.DistributedOptimizer(base, named_parameters=model.named_parameters(), **options)

    if mode == "adam":
        # Give every rank a different optimizer state, then make it rank 0's.
        for p in model.parameters():
            opt.state[p]["step"] = torch.tensor(float(rank + 3))
            opt.state[p]["exp_avg"] = torch.full_like(p, 0.01 * (rank + 1))
            opt.state[p]["exp_avg_sq"] = torch.full_like(p, 0.001 * (rank + 1))
        for group in opt.param_groups:
            group["lr"] = 0.01 * (rank + 1)
        ddp.broadcast_optimizer_state(opt, root_rank=0)
        ref_opt.load_state_dict(copy.deepcopy(opt.state_dict()))
        for p in model.parameters():
            if not torch.equal(opt.state[p]["exp_avg"], torch.full_like(p, 0.01)):
                fail("broadcast_optimizer_state did not give rank 0's state")
        if opt.param_groups[0]["lr"] != 0.01:
            fail("broadcast_optimizer_state did not give rank 0's learning rate")

    # join: rank r stops after STEPS - r steps; the joined ranks count in the average with zeros
    # (Horovod's rule): the reference's loss is scaled by the active ranks over all of them.
    my_steps = STEPS - rank if mode == "join" else STEPS
    for step in range(STEPS):
        active = [r for r in range(size) if (STEPS - r if mode == "join" else STEPS) > step]
        x, y = global_batch(step, size)
        micro = 2 if mode == "passes" else 1
        # reference: the whole batch of the active ranks, in `micro` accumulated halves
        ref_opt.zero_grad()
        for m in range(micro):
            rows = [r * BATCH + m * BATCH // micro + i
                    for r in active for i in range(BATCH // micro)]
            (F.cross_entropy(reference(x[rows]), y[rows]) * len(active) / size).backward()
        ref_opt.step()
        if step >= my_steps:
            continue
        opt.zero_grad()
        for m in range(micro):
            rows = slice(rank * BATCH + m * BATCH // micro, rank * BATCH + (m + 1) * BATCH // micro)
            F.cross_entropy(model(x[rows]), y[rows]).backward()
        opt.step()
        if step + 1 == my_steps:
            # This rank's parameters stop here; they must equal the reference's at this step.
            tol = 2e-3 if mode == "fp16" else 1e-5
            if not torch.allclose(flat(model), flat(reference), rtol=tol, atol=tol):
                diff = (flat(model) - flat(reference)).abs().max().item()
                fail(f"{mode}: parameters differ from single-process training by {diff}")
    if mode == "join":
        last = ddp.join()
        if last != 0:
            fail(f"join returned {last}, expected rank 0 (which trains longest)")
    else:
        gathered = ddp.allgather(flat(model).unsqueeze(0), name="final")
        if not all(torch.equal(gathered[0], gathered[r]) for r in range(size)):
            fail(f"{mode}: parameters are not bit-identical on every rank")

    # Misuse: zero_grad with reductions pending, and too many backward passes. Not after join():
    # the ranks that joined may have shut down already, so a backward pass here would submit
    # gradients that no one else reduces (the engine then rightly names the rank that left).
    if mode != "join":
        loss = model(torch.randn(2, 10)).sum()
        loss.backward()
        try:
            opt.zero_grad()
            fail("zero_grad with reductions pending did not raise")
        except ddp.DDPError as e:
            if "zero_grad" not in str(e) or "step()" not in str(e):
                fail(f"unclear zero_grad error: {e}")
        if mode != "passes":
            try:
                model(torch.randn(2, 10)).sum().backward()
                fail("a second backward pass before step() did not raise")
            except ddp.DDPError as e:
                if "backward_passes_per_step" not in str(e):
                    fail(f"unclear error: {e}")
        opt.synchronize()
        with opt.skip_synchronize():
            opt.step()
    ddp.shutdown()
    print(f"rank {rank}: {mode} ok")


if __name__ == "__main__":
    main()
