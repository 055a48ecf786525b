# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""A small job with a straggler, for docs/observability.md's timeline picture: 3 ranks, 6
gradients a step, rank 2's "forward and backward" 3x the others'."""
import time
import numpy as np
import ddp
ddp.init()
grads = [np.ones(1 << 14, np.float32) for _ in range(6)]
for step in range(8):
    time.sleep(0.004 if ddp.rank() != 2 else 0.012)  # the "forward and backward"; rank 2 slower
    handles = [ddp.allreduce_async(g, name=f"layer{i}") for i, g in enumerate(grads)]
    for h in handles:
        ddp.synchronize(h)
