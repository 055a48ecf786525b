# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""What a rank started by Ray or Spark reports to the tests (tests/python/test_ray.py,
test_spark.py): its place as libddp sees it, an allreduce's result, and how it reaches its peers:
the processes whose shared-memory segments it maps (a segment's name carries its creator's pid:
libddp/src/transport/shm/segment.cc) and its established TCP connections and listening ports
(from /proc), so that a test can tell shared memory from TCP between any two ranks."""
import os
import socket


def _tcp_sockets():
    """(listening ports, [(local port, remote port)] established) of this process."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    listening, established = set(), []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            rows = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if cols[9] not in inodes:
                continue
            local, remote = int(cols[1].rsplit(":", 1)[1], 16), int(cols[2].rsplit(":", 1)[1], 16)
            if cols[3] == "0A":
                listening.add(local)
            elif cols[3] == "01":
                established.append((local, remote))
    return sorted(listening), established


def _shm_creators():
    """The pids whose libddp segments this process maps (ddp-<uid>-<pidns>-<pid>-...)."""
    pids = set()
    for line in open("/proc/self/maps"):
        if "/dev/shm/ddp-" in line:
            name = line.split("/dev/shm/")[1].strip()
            pids.add(int(name.split("-")[3]))
    return sorted(pids)


def probe(value):
    """ddp.init(), an allreduce of VALUE + rank, and where this rank stands; ddp.shutdown()."""
    import numpy as np

    import ddp
    ddp.init()
    total = ddp.allreduce(np.full(8, value + ddp.rank(), dtype=np.float64), op=ddp.Sum)
    listening, established = _tcp_sockets()
    out = {"rank": ddp.rank(), "size": ddp.size(), "local_rank": ddp.local_rank(),
           "local_size": ddp.local_size(), "cross_rank": ddp.cross_rank(),
           "cross_size": ddp.cross_size(), "host": socket.gethostname(), "pid": os.getpid(),
           "sum": float(total[0]), "shm_pids": _shm_creators(), "listening": listening,
           "established": established,
           "env": {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                    "MASTER_ADDR", "MASTER_PORT",
                                                    "HOROVOD_RANK")}}
    ddp.shutdown()
    return out


def fail_on(rank_to_fail):
    """ddp.init(); the given rank raises, the others go to an allreduce it never joins."""
    import numpy as np

    import ddp
    ddp.init()
    if ddp.rank() == rank_to_fail:
        raise ValueError(f"rank {rank_to_fail} fails on purpose")
    ddp.allreduce(np.ones(4), name="never.finished")
    return ddp.rank()
