# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""A stream-ordered CUDA allreduce that fails after its handle finished: the backend's watcher
thread must notice (here the deadline, DDP_TIMEOUT_SECONDS=1, passes while the collective waits
behind a 3-second kernel), fail waiting on that handle with the reason, and fail the next
operation, instead of the error going unseen. One rank per GPU; run with DDP_TIMEOUT_SECONDS=1."""
import time

import torch

import ddp.torch as ddp


def main():
    ddp.init()
    torch.cuda.set_device(ddp.local_rank())
    dev = torch.device("cuda", ddp.local_rank())
    x = torch.ones(1024, device=dev)
    ddp.allreduce_(x, op=ddp.Sum, name="warm")  # the communicator exists
    torch.cuda._sleep(6_000_000_000)  # ~3 s of GPU time on the current stream
    late = torch.ones(1024, device=dev)
    h = ddp.allreduce_async_(late, op=ddp.Sum, name="late")
    start = time.monotonic()
    ddp.synchronize(h)  # stream-ordered: returns once enqueued, the host does not wait
    assert time.monotonic() - start < 0.5, "synchronize waited for the GPU"
    assert not ddp.poll(h), "poll() says done while the GPU is still asleep"
    deadline = time.monotonic() + 20
    while not ddp.poll(h):  # a failed collective counts as done
        assert time.monotonic() < deadline, "the watcher never gave up on the late collective"
        time.sleep(0.05)
    try:
        h.wait()
        raise AssertionError("waiting on the failed collective's handle succeeded")
    except ddp.DDPError as e:
        assert "did not finish within" in str(e), str(e)
        print(f"rank {ddp.rank()}: the handle answers: {e}")
    try:
        ddp.allreduce(torch.ones(4, device=dev), name="after")
        raise AssertionError("an allreduce after the failure succeeded")
    except ddp.DDPError as e:
        print(f"rank {ddp.rank()}: the next operation answers: {e}")
    torch.cuda.synchronize()
    print(f"rank {ddp.rank()}: cuda watcher ok")


if __name__ == "__main__":
    main()
