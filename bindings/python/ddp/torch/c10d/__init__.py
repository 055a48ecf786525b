# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The torch.distributed backend "ddp": `dist.init_process_group("ddp")` on libddp's engine.

`import ddp.torch` registers it. The backend is thin, as third-party backends are: operations
that submit to the same fusion engine as ddp.torch's (shared memory within a host, TCP, MPI or
libfabric between hosts, NCCL for CUDA tensors), and a Work per operation that wraps a torch
Future, which DDP's reducer chains its callbacks on. On torch 2 torch calls a C++ Backend built
for its torch (bindings/torch_native/backend.cc, in a ProcessGroup named "ddp"), which forwards
each operation here (backend.py's _Forwarded); on torch 1.13, and on torch 2 without that module,
torch calls a Python ProcessGroup or Backend (backend.py). A thread per
process group finishes the operations in the order they were issued (the engine finishes them in
that order) and completes their futures, with torch's backend error (DistBackendError where the
version has it) when the job broke: the message names the ranks, host and tensor as DDPError
does, and the exception carries `ranks` and `tensor`.

Rendezvous goes through the store torch hands in (`env://`, `tcp://`, `file://` or `store=`):
rank 0 hosts libddp's own store and puts its address and the job token there (ddp/_rendezvous.py);
`ddp://` (rendezvous.py) reads the launcher's variables instead. The default group is
libddp's job; every later group (new_group) is a libddp job of its own among its members
(_ddp.group_init), whose id the operations take as their process set.
docs/pytorch-distributed.md says what is served and where the backend differs from Gloo.

The rooms: backend (the classes torch makes, and the registration), operations (start, submit,
barriers, shutdown; the profiler wrap), reductions, gathers and exchanges (the operations),
reduce_ops (torch's ops in libddp's terms), tensors (reshaping), checks (arguments), work (the
Work torch gets), finish (the thread that completes a group's operations), groups (subgroups, the
default group's join, point to point), rendezvous (ddp://), monitored (monitored_barrier),
profile (profiler events).
"""

from .backend import ProcessGroupDDP, create_extended, register
from .operations import NAME

try:
    from .backend import BackendDDP  # torch 2 (torch has a Backend class)
except ImportError:  # torch 1.13
    pass
