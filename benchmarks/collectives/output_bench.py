# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Allgather and reduce-scatter through the `ddp` API (NumPy): the engine's own output against one
the caller gives (`allgather_into_async`), and against outputs all kept alive (every call's
output is then fresh memory). Run under a launcher, e.g.

    .venv/bin/ddprun -np 2 .venv/bin/python benchmarks/collectives/output_bench.py --mib 32

Prints, on rank 0, the median per call in ms over --calls calls after --warmup."""
import argparse
import statistics
import time

import numpy as np

import ddp


def median_ms(call, calls, warmup):
    times = []
    for _ in range(warmup + calls):
        ddp.barrier()
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
        del result
    return 1e3 * statistics.median(times[warmup:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=32, help="MiB per rank (default 32)")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=4)
    args = parser.parse_args()
    ddp.init()
    x = np.ones((args.mib << 20) // 4, dtype=np.float32)
    out = np.empty(x.size * ddp.size(), dtype=np.float32)
    kept = []
    rows = {
        "allgather, the engine's output": lambda: ddp.allgather(x),
        "allgather into the caller's output":
            lambda: ddp._numpy.ops.allgather_into_async(x, out).wait(),
        "allgather, every output kept": lambda: kept.append(ddp.allgather(x)),
        "reducescatter, the engine's output": lambda: ddp.reducescatter(x),
    }
    results = {what: median_ms(call, args.calls, args.warmup) for what, call in rows.items()}
    if ddp.rank() == 0:
        print(f"{ddp.size()} ranks, {args.mib} MiB per rank, median of {args.calls} calls, ms:")
        for what, ms in results.items():
            print(f"  {what}: {ms:.1f}")
    ddp.shutdown()


if __name__ == "__main__":
    main()
