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


def elastic_train(progress_dir, finish_file, step_seconds=0.05, fail_once=None):
    """An elastic job's training loop (ddp.elastic.run) for RayExecutor's elastic mode: every
    step adds exactly 1.0 to each weight whatever the size (the mean of an allreduce of ones), so
    that weights == steps on every rank shows no step was lost or applied twice across resets.
    Each step writes "STEP SIZE GENERATION" to PROGRESS_DIR/<host>-<pid>; training ends at the
    first step after FINISH_FILE appears (rank 0 looks, the allreduce tells the others). FAIL_ONCE
    (a path): the last rank raises at step 5 if it is the first to create that file."""
    import time

    import numpy as np

    import ddp
    ddp.init()
    state = ddp.elastic.NumpyState(step=0, weights=[0.0] * 4, sizes=[])
    mine = os.path.join(progress_dir, f"{socket.gethostname()}-{os.getpid()}")

    @ddp.elastic.run
    def train(state):
        while True:
            finish = 1.0 if ddp.rank() == 0 and os.path.exists(finish_file) else 0.0
            total = ddp.allreduce(np.array([1.0, 1.0, 1.0, 1.0, finish]), op=ddp.Sum,
                                  name="elastic.step")
            if total[4] > 0:
                return
            state.weights = [w + t / ddp.size() for w, t in zip(state.weights, total[:4])]
            state.step += 1
            if not state.sizes or state.sizes[-1] != ddp.size():
                state.sizes = state.sizes + [ddp.size()]
            if fail_once and state.step >= 5 and ddp.rank() == ddp.size() - 1:
                try:
                    os.close(os.open(fail_once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    pass
                else:
                    raise RuntimeError("failing once on purpose")
            with open(mine, "w") as f:
                f.write(f"{state.step} {ddp.size()} {ddp.elastic.generation()}\n")
            time.sleep(step_seconds)
            state.commit()

    train(state)
    return {"rank": ddp.rank(), "size": ddp.size(), "host": socket.gethostname(),
            "hostname_env": os.environ.get("DDP_HOSTNAME"), "step": state.step,
            "weights": state.weights, "sizes": state.sizes,
            "generation": ddp.elastic.generation(), "shm_pids": _shm_creators(),
            "pid": os.getpid()}


def die_on(rank_to_die):
    """ddp.init(); the given rank's process is killed (SIGKILL), the others go to an allreduce
    it never joins."""
    import signal

    import numpy as np

    import ddp
    ddp.init()
    if ddp.rank() == rank_to_die:
        os.kill(os.getpid(), signal.SIGKILL)
    ddp.allreduce(np.ones(4), name="never.finished")
    return ddp.rank()
