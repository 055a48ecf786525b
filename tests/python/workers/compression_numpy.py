# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddp.allreduce(compression=...) on numpy arrays: every codec within its error of the exact sum
and the same bits on every rank; the bytes counted by codec; what cannot be compressed refused
with its reason; a tensor whose compression changes mid-job (documented: allowed, its residual
carried over)."""
import hashlib

import numpy as np

import ddp

ddp.init()
rank, size = ddp.rank(), ddp.size()
n = 3001
mine = np.random.default_rng(rank).standard_normal(n).astype(np.float32) * (rank + 1)
exact = sum(np.random.default_rng(r).standard_normal(n).astype(np.float64) * (r + 1)
            for r in range(size))
largest = np.abs(exact).max()
# Each codec's bound on the sum (docs/compression.md): int8 half a step of a block's scale per
# encoding (size + 1 of them), bf16 and fp16 half an ulp per encoding.
step = largest / 127 * 0.5 * (size + 1)
bounds = {"bf16": largest * 2.0 ** -8 * (size + 1), "fp16": largest * 2.0 ** -11 * (size + 1),
          "int8": step, ddp.Compression.int8: step, "powersgd:3": None}
for codec, bound in bounds.items():
    x = mine[:3000].reshape(3, 1000) if codec == "powersgd:3" else mine
    out = ddp.allreduce(np.ascontiguousarray(x), op=ddp.Sum, name=f"t.{codec}",
                        compression=codec)
    if bound is not None:
        err = np.abs(out - exact).max()
        assert err <= bound, (codec, err, bound)
    else:  # a 3 x 1000 matrix at rank 3 is whole: exact up to float32 arithmetic
        want = sum(np.random.default_rng(r).standard_normal(n).astype(np.float32)[:3000]
                   .reshape(3, 1000) * (r + 1) for r in range(size))
        assert np.abs(out - want).max() < 1e-3 * np.abs(want).max(), np.abs(out - want).max()
    print("digest", codec if isinstance(codec, str) else codec.codec,
          hashlib.sha1(out.tobytes()).hexdigest()[:16], flush=True)

wire = ddp.stats()["wire_bytes"]
for codec in ("bf16", "fp16", "int8", "powersgd"):
    assert wire[codec]["sent"] > 0 and wire[codec]["received"] > 0, wire
before = ddp.stats()
ddp.allreduce(np.ones(1 << 16, np.float32), name="big.int8", compression="int8")
during = ddp.stats(since=before)["wire_bytes"]
assert during["int8"]["sent"] > 0 and during["bf16"]["sent"] == 0, during
f32 = 2 * (size - 1) / size * (1 << 16) * 4
assert during["int8"]["sent"] < 0.27 * f32, (during, f32)

# Refused, with the reason: integers, max, an unknown name, a vector for PowerSGD.
for args, kwargs, words in [
        ((np.ones(4, np.int32),), {"compression": "int8"}, "for floating-point tensors"),
        ((np.ones(4, np.float32),), {"compression": "bf16", "op": ddp.Max},
         "sums (sum or average), not max"),
        ((np.ones(4, np.float32),), {"compression": "zip"}, "compression must be None"),
        ((np.ones(4, np.float32),), {"compression": "powersgd:2"}, "approximates matrices")]:
    try:
        ddp.allreduce(*args, name=f"bad.{words[:6]}", **kwargs)
    except (ddp.DDPValueError, ValueError) as e:
        assert words in str(e), (words, str(e))
    else:
        raise AssertionError(f"not refused: {words}")

# A tensor's compression may change between steps (documented): its residual carries over.
x = np.full(512, 1e-3, np.float32)
x[0] = 1.0
for codec in ("int8", "bf16", "int8"):
    out = ddp.allreduce(x, op=ddp.Average, name="switching", compression=codec)
    assert np.abs(out - x).max() < 0.01, (codec, np.abs(out - x).max())
print("compression numpy ok", rank, flush=True)
