# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddp.torch's parts compiled against the torch in use: the module
ddp/torch/_native_torch<major>_<minor> (bindings/torch_native), built by `make build` for each
torch line it finds and by `pip install --no-build-isolation .` for the environment's torch.

It holds the backend's profiler events (c10d/profile.py) and, on torch 2, the C++ Backend that
torch calls (c10d/backend.py forwards it to the Python operations). Without it the backend works
the same through torch's Python trampolines, less what those cannot carry, and says so
(`missing`).
"""
import importlib

import torch


def _load():
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    name = f"ddp.torch._native_torch{major}_{minor}"
    try:
        return importlib.import_module(name), None
    except ImportError as e:
        return None, (f"{name} is not built for torch {torch.__version__} ({e}); `make build`, or "
                      f"`pip install --no-build-isolation .` in this environment, builds it")


module, missing = _load()
