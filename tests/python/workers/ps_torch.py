# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddp.torch.ParameterServerOptimizer. sync: every worker ends with the weights of plain SGD on the
concatenated batch (computed here as the reference); sync2: the same with each step's gradient
accumulated over two backward passes (backward_passes_per_step=2); int8: sync with int8 pushes,
near plain SGD's weights and the same on every worker; async: the weights every
worker pulls at the end are the servers', the same on all, and the loss went down. In every
mode each push was made by a gradient hook, during backward, and none by step()."""
import sys

import torch

import ddp.ps as ps
import ddp.torch as ddp

mode = sys.argv[1]
passes = 2 if mode == "sync2" else 1
# int8: sync with int8 pushes (error feedback): the weights stay near plain SGD's, the same on
# every worker, and the pushes carried about a quarter of the gradients' bytes.
compression = ddp.Compression.int8 if mode == "int8" else None
mode = "sync" if mode in ("sync2", "int8") else mode
ps.init()
w, n = ps.worker_index(), ps.num_workers()
def net():
    return torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


torch.manual_seed(1234)
reference = net()  # worker 0's initial weights
torch.manual_seed(1234 + w)  # different initial weights: the servers must make them equal
model = net()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
opt = ddp.ParameterServerOptimizer(opt, named_parameters=model.named_parameters(), mode=mode,
                                   backward_passes_per_step=passes, compression=compression)
if mode == "sync":  # (async: the others may have updated them already)
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.equal(p.data, q.data), "workers did not start from worker 0's weights"
ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.5)
gen = torch.Generator().manual_seed(7)
x = torch.randn(8 * n, 20, generator=gen)
y = torch.randint(0, 3, (8 * n,), generator=gen)
first = None
for step in range(15):
    opt.zero_grad()
    half = 8 // passes
    for k in range(passes):  # the gradient of the worker's 8 samples' mean loss, in parts
        rows = slice(w * 8 + k * half, w * 8 + (k + 1) * half)
        loss = torch.nn.functional.cross_entropy(model(x[rows]), y[rows]) / passes
        loss.backward()
    assert opt.pushed_from_hooks == (step + 1) * 4, opt.pushed_from_hooks  # before step()
    opt.step()
    if mode == "sync":
        ref_opt.zero_grad()
        torch.nn.functional.cross_entropy(reference(x), y).backward()
        ref_opt.step()
        for p, q in zip(model.parameters(), reference.parameters()):
            atol = 1e-6 if compression is None else 2e-3
            assert torch.allclose(p.data, q.data, atol=atol), (step, (p - q).abs().max())
    first = loss.item() if first is None else first
if mode == "async":
    ps.register("barrier", torch.zeros(1).numpy())
    ps.push_pull("barrier", torch.ones(1).numpy())
    opt.pull_parameters()
    digest = float(sum(p.data.double().sum() for p in model.parameters()))
    print(f"worker {w}: digest {digest:.10e}", flush=True)
    assert loss.item() < first, (first, loss.item())
if compression is not None:
    digest = float(sum(p.data.double().sum() for p in model.parameters()))
    print(f"worker {w}: digest {digest:.10e}", flush=True)
    pushed = ps.worker_stats()["push_bytes"]["int8"]
    assert 0.25 < pushed["pushed"] / pushed["decoded"] < 0.3, pushed
opt.finish()
print(f"worker {w}: ok", flush=True)
