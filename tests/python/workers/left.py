# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Rank 2 leaves the job on purpose (and stays alive); the others' next collective fails with a
DDPError that says so, as data too: code ABORTED (the job is broken for good), ranks [2]."""
import sys
import time

import numpy as np

import ddp


def main():
    ddp.init()
    ddp.barrier()
    if ddp.rank() == 2:
        ddp.shutdown()
        time.sleep(2)  # alive while the others find out
        print("rank 2: left")
        return
    try:
        ddp.allreduce(np.ones(4), name="after.leaving")
    except ddp.DDPError as e:
        if e.code != "ABORTED" or 2 not in e.ranks or e.tensor != "after.leaving":
            sys.exit(f"rank {ddp.rank()}: {e.code} {e.ranks} {e.tensor}: {e}")
        print(f"rank {ddp.rank()}: ok")
        return
    sys.exit(f"rank {ddp.rank()}: no error after rank 2 left")


if __name__ == "__main__":
    main()
