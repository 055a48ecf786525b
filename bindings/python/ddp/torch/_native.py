# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddp.torch's parts compiled against the torch in use: the module
ddp/torch/_native_torch<major>_<minor> (bindings/torch_native), built by `make build` for each
torch line it finds, by `pip install --no-build-isolation .` for the environment's torch, and by
`make wheel` for the torch the wheel is made with.

It holds the backend's profiler events (c10d/profile.py) and, on torch 2, the C++ Backend that
torch calls (c10d/backend.py forwards it to the Python operations). Without it (another torch
line than the one it was built for, or a damaged file, which is checked before it is loaded: a
shared object cut short would kill the process with SIGBUS) the backend works the same through
torch's Python trampolines, less what those cannot carry, and says so once (`missing`): about
0.1 ms more per waited operation (benchmarks/results/backend_hop-2026-12-06-native-vs-python.md).
"""
import importlib
import importlib.util
import os
import struct

import torch


def _truncated(path):
    """Why the shared object at `path` cannot be loaded whole (a file cut short: the loader would
    map pages past its end and the process die of SIGBUS on first touch), or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            size = os.fstat(f.fileno()).st_size
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2:
                return "not a 64-bit ELF file"
            phoff, shoff = struct.unpack_from("<QQ", head, 0x20)
            phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", head, 0x36)
            if phentsize < 56:  # an ELF64 program header's size
                return f"a program header size of {phentsize}"
            end = max(phoff + phentsize * phnum, shoff + shentsize * shnum)
            if size < end:
                return f"{size} bytes where its headers need {end}"
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            for i in range(phnum):
                kind, _, offset, _, _, filesz = struct.unpack_from("<IIQQQQ", table, i * phentsize)
                if kind == 1:  # PT_LOAD
                    end = max(end, offset + filesz)
    except (OSError, struct.error, OverflowError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    return f"{size} bytes where its headers need {end}" if size < end else None


def _load():
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    name = f"ddp.torch._native_torch{major}_{minor}"
    build = ("`make build`, or `pip install --no-build-isolation .` in this environment, builds "
             "it; a wheel carries it for the torch it was made with")
    spec = importlib.util.find_spec(name)
    if spec is not None and spec.origin:
        broken = _truncated(spec.origin)
        if broken:
            return None, f"{spec.origin} is damaged ({broken}): reinstall ddp"
    try:
        return importlib.import_module(name), None
    except ImportError as e:
        return None, f"{name} is not built for torch {torch.__version__} ({e}); {build}"


module, missing = _load()
