# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""A job across simulated hosts (tests/python/test_run_hosts.py): every rank checks the place
ddprun (or mpirun) gave it against libddp's own view, that the job token is on no command line
of the machine, and an allreduce across the hosts. `die R` makes rank R exit 3 once all are up;
`stop R` makes it stop itself (SIGSTOP) while the others allreduce, which fails naming it."""
import os
import pathlib
import signal
import socket
import sys
import time

import numpy as np

import ddp


def token_on_a_command_line(token: bytes) -> list:
    found = []
    for proc in pathlib.Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and token in (proc / "cmdline").read_bytes():
                found.append(proc.name)
        except OSError:
            pass  # it ended while we looked
    return found


def main():
    ddp.init()
    rank, size = ddp.rank(), ddp.size()
    env = os.environ
    if "OMPI_COMM_WORLD_RANK" in env:  # started by Open MPI's mpirun: its view, host names
        host = socket.gethostname()
        checks = {
            "rank": (rank, int(env["OMPI_COMM_WORLD_RANK"])),
            "local_rank": (ddp.local_rank(), int(env["OMPI_COMM_WORLD_LOCAL_RANK"])),
            "local_size": (ddp.local_size(), int(env["OMPI_COMM_WORLD_LOCAL_SIZE"])),
        }
    else:
        host = env["DDP_HOSTNAME"] if "DDP_HOSTNAME" in env else "?"
        checks = {
            "local_rank": (ddp.local_rank(), int(env["DDP_LOCAL_RANK"])),
            "local_size": (ddp.local_size(), int(env["DDP_LOCAL_SIZE"])),
            "cross_size": (ddp.cross_size(), int(env["DDP_CROSS_SIZE"])),
        }
        leaked = token_on_a_command_line(env["DDP_JOB_TOKEN"].encode())
        if leaked:
            sys.exit(f"rank {rank}: the job token is on the command line of processes {leaked}")
    for what, (lib, launcher) in checks.items():
        if lib != launcher:
            sys.exit(f"rank {rank}: libddp's {what} {lib} but the launcher said {launcher}")
    total = ddp.allreduce(np.full(1024, rank + 1, dtype=np.float32), op=ddp.Sum, name="sum")
    if not np.all(total == size * (size + 1) / 2):
        sys.exit(f"rank {rank}: wrong sum {total[:4]}")
    hosts = ddp.allgather_object(host)
    # One write: print() writes the text and its newline separately, and unbuffered (as with
    # PYTHONUNBUFFERED) mpirun's forwarding may put another rank's line between them.
    sys.stdout.write(f"rank {rank} of {size} on {host} local {ddp.local_rank()}/"
                     f"{ddp.local_size()} hosts {','.join(hosts)} pid {os.getpid()} ok\n")
    sys.stdout.flush()
    if sys.argv[1:2] == ["die"]:
        ddp.barrier()
        if rank == int(sys.argv[2]):
            sys.exit(3)
        time.sleep(60)  # the launcher must stop us long before this
        sys.exit(f"rank {rank}: still running 60 s after rank {sys.argv[2]} died")
    if sys.argv[1:2] == ["stop"]:
        ddp.barrier()
        if rank == int(sys.argv[2]):
            os.kill(os.getpid(), signal.SIGSTOP)
        ddp.allreduce(np.ones(4, dtype=np.float32), name="after")  # DDPError, naming the stopped
        sys.exit(f"rank {rank}: an allreduce with a stopped rank succeeded")
    ddp.barrier()


if __name__ == "__main__":
    main()
