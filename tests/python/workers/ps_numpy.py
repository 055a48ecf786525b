# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddp.ps on numpy arrays, on every rank of a parameter-server job (ddprun --servers, mpirun with
DDP_PS_SERVERS, or colocated). Server-only ranks serve inside ps.init() and exit there."""
import os

import numpy as np

import ddp
import ddp.ps as ps

ps.init()
w, n = ps.worker_index(), ps.num_workers()
assert ps.is_worker() and 0 <= w < n, (w, n)
assert ps.num_servers() == int(os.environ.get("DDP_PS_SERVERS") or 0) or \
    (os.environ.get("DDP_PS_SERVERS") in (None, "0") and ps.num_servers() == n)

# Sync keys of every numpy dtype, one large enough to be split over every server.
for dtype in (np.float32, np.float64, np.float16, np.int8, np.uint8, np.int32, np.int64):
    size = 70000 if dtype == np.float32 else 257
    name = f"sync.{np.dtype(dtype).name}"
    init = (np.arange(size) % 7).astype(dtype)
    ps.register(name, init if w == 0 else np.zeros(size, dtype))
    assert np.array_equal(ps.pull(name), init), name  # worker 0's value for everyone
    for step in range(3):
        grad = ((np.arange(size) % 3) + w + step).astype(dtype)
        h = ps.push_pull_async(name, grad)
        got = h.wait()
        want = sum(((np.arange(size) % 3) + v + step) for v in range(n)).astype(dtype)
        assert np.array_equal(got, want), (name, step)
        assert h.version == step + 1 and h.contributors == n, (h.version, h.contributors)
assert sum(ps.server_bytes()) == 70000 * 4 + 257 * (8 + 2 + 1 + 1 + 4 + 8) + 0, ps.server_bytes()
assert min(ps.server_bytes()) > 0, ps.server_bytes()  # the large key reached every server

# Async: every push applied once (server-side "sum"), then Adam's results against numpy's.
ps.register("counted", np.zeros(1000, np.float32), mode="async", optimizer="sum")
for _ in range(25):
    ps.push("counted", np.ones(1000, np.float32))
ps.register("barrier", np.zeros(1, np.int32))
ps.push_pull("barrier", np.ones(1, np.int32))
assert np.all(ps.pull("counted") == 25 * n), ps.pull("counted")[:4]

# Compressed pushes (by a name, as ddp.Compression, Horovod's fp16): with error feedback the sum of
# the pulled sums stays within one step's loss per worker of the exact sum, however many steps.
x = np.arange(1000) * 0.37
for name, compression, loss in (("c.int8", ddp.Compression.int8, 5.1 / 254),
                                ("c.fp16", ddp.Compression.fp16, 2.0 ** -9),
                                ("c.bf16", "bf16", 2.0 ** -5)):
    ps.register(name, np.zeros(1000, np.float32), compression=compression)
    pulled, exact = np.zeros(1000), np.zeros(1000)
    for step in range(10):
        pulled += ps.push_pull(name, (np.sin(x + w + step) * 5).astype(np.float32))
        exact += sum((np.sin(x + v + step) * 5).astype(np.float32) for v in range(n))
    assert np.abs(pulled - exact).max() <= 1.5 * n * loss + 1e-3, (name, np.abs(pulled - exact))
stats = ps.worker_stats()
# One partition of 1000 values each: int8 is a byte per value and 4 scales of 4 bytes.
assert stats["push_bytes"]["int8"] == {"pushed": 10 * 1016, "decoded": 10 * 4000}, stats
assert stats["push_bytes"]["fp16"]["pushed"] == stats["push_bytes"]["bf16"]["pushed"] == 20000
assert stats["residual_floats"] == 3000, stats

# Mistakes are DDPErrors naming the key.
for call, what in ((lambda: ps.pull("nope"), "no key 'nope'"),
                   (lambda: ps.push("counted", np.ones(3, np.float32)), "shape"),
                   (lambda: ps.register("counted", np.ones(3)), "registered already"),
                   (lambda: ps.register("ints", np.ones(3, np.int32), mode="async"),
                    "floating dtype"),
                   (lambda: ps.register("low", np.ones((4, 4), np.float32),
                                        compression=ddp.Compression.powersgd(2)),
                    "key 'low': PowerSGD cannot compress parameter-server pushes"),
                   (lambda: ps.register("i8", np.ones(3, np.int32), compression="int8"),
                    "int8 compression takes float32 keys"),
                   (lambda: ps.register("z", np.ones(3, np.float32), compression="zip"),
                    "compression must be None, one of")):
    try:
        call()
    except ps.DDPError as e:
        assert what in str(e), (what, str(e))
    else:
        raise AssertionError(f"no error for {what}")
ps.finish()
print(f"worker {w}: ok", flush=True)
