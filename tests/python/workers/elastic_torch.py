# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""An elastic training job (ddp.torch.elastic) for tests/python/test_elastic.py.

A linear model learns a fixed target from 96 samples, sharded with ElasticSampler, 4 epochs of
batches of 4 per worker, committing after every batch. The state keeps the indices the job
processed each epoch (allgathered after each batch, kept by every rank), so a test can check
that the samples of every epoch were all seen, across failures and re-formings. Scenarios (argv[1]):

  fail HOST:SLOT        that worker exits with status 1 at epoch 1, batch 2 (its first life only);
                        the gradients go compressed (int8), their residuals kept over the reset
  grow FILE LINE        rank 0 appends LINE to the discovery file at epoch 0, batch 2, and the
                        job commits until the driver's new generation interrupts it
  plain                 nothing happens (a plain, not elastic, launch: run trains once)
  grow-shrink FILE LINE as grow, then, once the job has 3 workers, rank 0 rewrites FILE without
                        LINE at epoch 2, batch 1, and the job goes on until it is back to 2

Every worker prints "done rank R size S generation G sizes A,B,... checksum C seen OK|..." once
training is over.
"""
import hashlib
import os
import sys
import time

import torch

import ddp
import ddp.torch as hvd

SAMPLES, BATCH, EPOCHS = 96, 4, 4


class Data(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(SAMPLES, 8, generator=g)
        self.y = self.x @ torch.arange(1.0, 9.0).unsqueeze(1)

    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        return self.x[i], self.y[i], i


def seen_all(seen):
    """"OK" when every sample of every epoch is in SEEN (a list of index lists per epoch), else
    the first epoch's missing ones."""
    for epoch, indices in enumerate(seen):
        missing = set(range(SAMPLES)) - set(indices)
        if missing:
            return f"epoch {epoch} missed {sorted(missing)}"
    return "OK"


def main():
    scenario = sys.argv[1]
    me = os.environ.get("DDP_ELASTIC_ID", "")  # none in a plain launch
    hvd.init()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    # "fail" also compresses (int8, with error feedback): the residuals carry over the reset.
    compression = hvd.Compression.int8 if scenario == "fail" else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)
    data = Data()
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=1)
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH, sampler=sampler)
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0,
                                   batch=0, seen=[[] for _ in range(EPOCHS)], sizes=[])
    resets, carried = [], []
    state.register_reset_callbacks([lambda: resets.append(hvd.size()),
                                    lambda: carried.append(ddp.stats()["residual_floats"])])

    def checkpoint_loop(until, what):
        """Commits until the driver interrupts (HostsUpdatedInterrupt) or `until` holds."""
        deadline = time.monotonic() + 120
        while not until():
            if time.monotonic() > deadline:
                raise RuntimeError(f"no re-forming of the job 120 s after {what}")
            time.sleep(0.2)
            state.commit()

    @hvd.elastic.run
    def train(state):
        if not state.sizes or state.sizes[-1] != hvd.size():
            state.sizes.append(hvd.size())
        for state.epoch in range(state.epoch, EPOCHS):
            for x, y, index in loader:
                if scenario == "fail" and me == sys.argv[2] and state.epoch == 1 and \
                        state.batch == 2 and hvd.elastic.generation() == 0:
                    os._exit(1)
                if scenario.startswith("grow") and state.epoch == 0 and state.batch == 2 and \
                        hvd.size() == 2 and 3 not in state.sizes:
                    if hvd.rank() == 0:
                        with open(sys.argv[2], "a", encoding="utf-8") as f:
                            f.write(sys.argv[3] + "\n")
                    checkpoint_loop(lambda: False, "adding a host")
                if scenario == "grow-shrink" and state.epoch == 2 and state.batch == 1 and \
                        hvd.size() == 3:
                    if hvd.rank() == 0:
                        with open(sys.argv[2], encoding="utf-8") as f:
                            kept = [line for line in f if line.strip() != sys.argv[3]]
                        with open(sys.argv[2] + ".new", "w", encoding="utf-8") as f:
                            f.writelines(kept)
                        os.replace(sys.argv[2] + ".new", sys.argv[2])
                    # The workers of the host that left are stopped: the others fail on them.
                    checkpoint_loop(lambda: False, "removing a host")
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                optimizer.step()
                # Every rank keeps the record: any of them may be rank 0 after a failure.
                indices = hvd.allgather_object([int(i) for i in index])
                state.seen[state.epoch].extend(i for part in indices for i in part)
                sampler.record_batch(state.batch, BATCH)
                state.batch += 1
                state.commit()
            state.batch = 0
            sampler.set_epoch(state.epoch + 1)
            state.commit()

    train(state)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    checksum = hashlib.sha256(weights.numpy().tobytes()).hexdigest()[:16]
    seen = seen_all(state.seen) if hvd.rank() == 0 else "OK"
    print(f"done rank {hvd.rank()} size {hvd.size()} generation {hvd.elastic.generation()} "
          f"sizes {','.join(map(str, state.sizes))} resets {resets} checksum {checksum} "
          f"seen {seen}", flush=True)
    print(f"residual floats after each reset {carried}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
