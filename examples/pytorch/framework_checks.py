# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""What the framework examples (lightning_digits.py, deepspeed_digits.py, accelerate_digits.py)
check on every rank once they have trained: that torch.distributed's default group runs on
libddp's backend `ddp`, that every rank ends with the same parameters (the gradients were
exchanged), and the test accuracy against a target."""
import torch
import torch.distributed as dist


def check_trained(model, x_test, y_test, target, what):
    """Prints one line per rank and returns the exit status: 0 when all three hold."""
    rank, size = dist.get_rank(), dist.get_world_size()
    backend = dist.get_backend()
    flat = torch.cat([p.detach().float().reshape(-1).cpu() for p in model.parameters()])
    every = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(every, flat)
    same = all(torch.equal(other, every[0]) for other in every)
    model.eval()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    print(f"{what}: rank {rank} of {size}: backend {backend}, the same parameters on every rank: "
          f"{same}, test accuracy {accuracy:.2%}", flush=True)
    problems = [p for p, bad in ((f"the backend is {backend}, not ddp", backend != "ddp"),
                                 ("the ranks' parameters differ", not same),
                                 (f"accuracy below {target:.2%}", accuracy < target)) if bad]
    for problem in problems:
        print(f"{what}: rank {rank}: {problem}", flush=True)
    return 1 if problems else 0
