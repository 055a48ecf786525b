# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Prints what bindings/torch_native/CMakeLists.txt needs to build against this Python's torch.

One line per field, `key=value`: version (major_minor), include (|-separated), libdir, abi (the
_GLIBCXX_USE_CXX11_ABI torch was built with), python_include, ext_suffix,
pybind11 (the PYBIND11_* ABI definitions torch was built with, |-separated); or `missing=<why>`
when there is no torch or it has no C++ headers (Debian's torch: apt install libtorch-dev).
"""
import os
import sysconfig

try:
    import torch
except ImportError as e:
    print(f"missing=no torch ({e})")
    raise SystemExit(0)

root = os.path.dirname(torch.__file__)
# PyPI's wheels carry their headers; Debian's python3-torch has them in libtorch-dev.
candidates = [os.path.join(root, "include"), "/usr/include"]
include = [d for d in candidates if os.path.isfile(os.path.join(d, "ATen", "record_function.h"))]
if not include:
    print(f"missing=torch {torch.__version__} at {root} has no C++ headers "
          f"(Debian's python3-torch: install libtorch-dev)")
    raise SystemExit(0)
include = include[:1]
api = os.path.join(include[0], "torch", "csrc", "api", "include")
if os.path.isdir(api):
    include.append(api)
major, minor = torch.__version__.split("+")[0].split(".")[:2]
print(f"version={major}_{minor}")
print(f"full_version={torch.__version__}")
print("include=" + "|".join(include))
print(f"libdir={os.path.join(root, 'lib')}")
print(f"abi={int(torch._C._GLIBCXX_USE_CXX11_ABI)}")  # noqa: SLF001 - torch's build facts
print(f"python_include={sysconfig.get_paths()['include']}")
print(f"ext_suffix={sysconfig.get_config_var('EXT_SUFFIX')}")
abi = [f'PYBIND11_{name}="{getattr(torch._C, f"_PYBIND11_{name}")}"'  # noqa: SLF001
       for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI")
       if getattr(torch._C, f"_PYBIND11_{name}", None) is not None]  # noqa: SLF001
print("pybind11=" + "|".join(abi))
