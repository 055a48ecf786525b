# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Page faults of a freed-and-reallocated 48 MiB block (above glibc's largest mmap threshold)
before and after ddp.init(), as JSON: {"before": faults, "after": faults, "outcome": ...}.
Each side allocates, touches and frees the block 6 times; with freed memory kept, only the first
allocation after init faults its pages in."""
import ctypes
import json
import resource

import ddp

SIZE = 48 << 20
ROUNDS = 6

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]


def faults():
    start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(ROUNDS):
        block = libc.malloc(SIZE)
        assert block, "malloc failed"
        ctypes.memset(block, 1, SIZE)
        libc.free(block)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start


before = faults()
assert ddp._ddp.freed_memory() is None
ddp.init()
after = faults()
print(json.dumps({"before": before, "after": after, "outcome": ddp._ddp.freed_memory()}))
ddp.shutdown()
