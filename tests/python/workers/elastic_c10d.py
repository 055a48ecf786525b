# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""A torch.distributed training script that recovers in its own processes (ddp.torch.elastic.run
over the default group on the `ddp` backend), for tests/python/test_elastic_c10d.py.

A linear model wrapped in torch's DistributedDataParallel learns a fixed target from 96 samples,
sharded with ElasticSampler, 4 epochs of batches of 4 per worker, committing after every batch.
The state keeps the indices the job processed each epoch (torch.distributed.all_gather_object),
so a test can check that no sample of an epoch was lost across a failure. argv[1]: the worker ids
(DDP_ELASTIC_ID, comma-separated) that SIGKILL themselves at epoch 1, batch 2 of the job's first
generation (ID/cut: that worker takes its simulated host's link down instead, `ip link set eth0
down`, and trains on, test_chaos.py; ID@G: in generation G, at the first step after the job
re-formed, back at that batch); argv[2], when given: the number of workers to wait for after
the kill, committing until the replacement joins (else 2 workers would finish the few steps left
before a new process has imported torch).

Every worker prints "done rank R size S generation G sizes A,B,... worlds A,B,... checksum C
seen OK|..." (worlds: torch.distributed's world size at each call of the function).
"""
import hashlib
import os
import signal
import subprocess
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from elastic_torch import BATCH, EPOCHS, Data, seen_all  # the Horovod-API twin's data

from ddp.torch import elastic


def main():
    victims = {}  # worker id -> (how, the generation it fails in)
    for spec in sys.argv[1].split(","):
        spec, _, when = spec.partition("@")
        wid, _, how = spec.partition("/")
        victims[wid] = (how, int(when or 0))
    wait_for = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    me = os.environ["DDP_ELASTIC_ID"]
    dist.init_process_group("ddp", init_method="ddp://")
    torch.manual_seed(int(me.split(":")[1].split(".")[0]))  # different until synchronised
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = Data()
    sampler = elastic.ElasticSampler(data, shuffle=True, seed=1)
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH, sampler=sampler)
    state = elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0,
                               batch=0, seen=[[] for _ in range(EPOCHS)], sizes=[])
    worlds = []

    @elastic.run
    def train(state):
        worlds.append(dist.get_world_size())
        if not state.sizes or state.sizes[-1] != dist.get_world_size():
            state.sizes.append(dist.get_world_size())
        net = DistributedDataParallel(state.model)  # on the group of this generation
        for state.epoch in range(state.epoch, EPOCHS):
            for x, y, index in loader:
                if me in victims and state.epoch == 1 and state.batch == 2 and \
                        elastic.generation() == victims[me][1]:
                    if victims[me][0] == "cut":
                        subprocess.run(["ip", "link", "set", "eth0", "down"], check=True)
                    else:
                        os.kill(os.getpid(), signal.SIGKILL)
                if wait_for and elastic.generation() > 0 and dist.get_world_size() < wait_for:
                    deadline = time.monotonic() + 120
                    while time.monotonic() < deadline:  # the replacement joins at a commit
                        time.sleep(0.1)
                        state.commit()
                    raise RuntimeError("no replacement joined within 120 s")
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(net(x), y)
                loss.backward()
                optimizer.step()
                indices = [None] * dist.get_world_size()
                dist.all_gather_object(indices, [int(i) for i in index])
                state.seen[state.epoch].extend(i for part in indices for i in part)
                sampler.record_batch(state.batch, BATCH)
                state.batch += 1
                state.commit()
            state.batch = 0
            sampler.set_epoch(state.epoch + 1)
            state.epoch += 1  # what a failure from here on comes back to
            state.commit()

    train(state)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    checksum = hashlib.sha256(weights.numpy().tobytes()).hexdigest()[:16]
    seen = seen_all(state.seen)
    print(f"done rank {dist.get_rank()} size {dist.get_world_size()} generation "
          f"{elastic.generation()} sizes {','.join(map(str, state.sizes))} worlds "
          f"{','.join(map(str, worlds))} checksum {checksum} seen {seen}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
