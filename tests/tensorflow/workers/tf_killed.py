# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The last rank is SIGKILLed mid-job; every other rank's next ddp.tensorflow operation raises a
TensorFlow error (tf.errors.OpError) carrying libddp's message, which names the dead rank and
the tensor. Prints "rank R: ok" on the survivors."""
import os
import signal
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

import ddp.tensorflow as hvd


def main():
    # ddprun stops the others (SIGTERM) as soon as it sees a rank die: keep running meanwhile, to
    # see what the op raises (the launcher's SIGKILL comes after its grace period).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    hvd.allreduce(tf.ones([8]), name="before")
    hvd.barrier()
    if r == n - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        for step in range(1000):
            hvd.allreduce(tf.ones([1024]), name=f"grad.{step}")
    except tf.errors.OpError as e:
        message = e.message
        if f"rank {n - 1}" not in message or "grad." not in message:
            sys.exit(f"rank {r}: the error does not name rank {n - 1} and the tensor: "
                     f"{type(e).__name__}: {message}")
        print(f"rank {r}: ok ({type(e).__name__}: {message[:160]})", flush=True)
        os._exit(0)
    sys.exit(f"rank {r}: no error after rank {n - 1} was killed")


if __name__ == "__main__":
    main()
