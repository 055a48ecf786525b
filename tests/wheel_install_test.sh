#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
# The wheel in a clean room (`make test-wheel`, in `make test`): packaging/wheel.sh's wheel,
# installed with --no-deps into fresh virtual environments, run with the build trees,
# /usr/include and Abseil's shared libraries out of reach (a mount namespace hides them: tmpfs over
# the folders, /dev/null over each libabsl file), so that anything the wheel failed to carry
# fails here.
#
#   tests/wheel_install_test.sh [WHEEL]     (default: dist/libddp-<VERSION>-cp311-*.whl)
#
# 1. `auditwheel show`, and every library the wheel's binaries need, resolved as the loader
#    would: inside the wheel, in the manylinux set, or one of the plugins' and torch's own
#    libraries left out on purpose (packaging/wheel.sh) — nothing else.
# 2. pyenv's Python (not the Debian Python that built the wheel), numpy from PyPI: a 2-rank
#    allreduce under the installed ddprun; pip's metadata, ddp.__version__, the loaded
#    libddp.so and `ddprun --version` all say VERSION.
# 3. Debian's Python with Debian's torch 1.13 (a wheel built against torch 2.15, on another
#    torch): the Horovod-style step and init_process_group("ddp") with DDP, on the Python path.
# 4. torch 2.15 (.venv-torch2's, seen through a .pth line after the venv's own site-packages,
#    so `ddp` comes from the wheel and torch is not fetched again): the same, on the native path;
#    then the native module corrupted: the same again, on the Python path, with its one warning.
# Root is needed for the mount namespace (make test runs as root): without one the test stops,
# since nothing it checks would then be hidden.
set -euo pipefail
source_dir=$(cd "$(dirname "$0")/.." && pwd)
cd "$source_dir"
version=$(cat VERSION)
tools=${WHEEL_VENV:-.venv-wheel}
arch=$(uname -m)
wheel=${1:-$(ls dist/libddp-"$version"-cp311-*"$arch".whl 2>/dev/null | head -n 1 || true)}
[ -f "$wheel" ] || { echo "wheel test: no wheel (make wheel first)" >&2; exit 1; }
wheel=$(cd "$(dirname "$wheel")" && pwd)/$(basename "$wheel")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
step() { echo "== wheel test: $*"; }

step "auditwheel show $(basename "$wheel")"
"$tools/bin/auditwheel" show "$wheel" | sed -n '1,4p'
echo "(the versioned-symbol list auditwheel also prints counts the libraries of the plugins'"
echo " own dependencies, left out on purpose: the tag is the one above)"

# Runs "$@" with the build trees, /usr/include and Abseil's libraries hidden.
hidden() {
  if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
    echo "wheel test: FAILED: hiding the build trees, headers and Abseil needs a mount" \
         "namespace (root: unshare -m)" >&2
    exit 1
  fi
  unshare -m --propagation private bash -c '
    set -e
    mount -t tmpfs none /usr/include
    for d in "$0"/build "$0"/build-*; do [ -d "$d" ] && mount -t tmpfs none "$d"; done
    multiarch=$(gcc -print-multiarch)
    libs=(/usr/lib/"$multiarch"/libabsl_*)
    # HIDE_PLUGIN_LIBS=1: Open MPI and libfabric too, as on a machine without them.
    [ -n "${HIDE_PLUGIN_LIBS:-}" ] && libs+=(/usr/lib/"$multiarch"/lib{mpi.so.40,fabric.so.1}*)
    for f in "${libs[@]}"; do
      if [ -f "$f" ] && [ ! -L "$f" ]; then mount --bind /dev/null "$f"; fi
    done
    [ -z "$(ls /usr/include)" ] || exit 90
    [ ! -e "$0/build/CMakeCache.txt" ] || exit 91
    shift; exec "$@"' "$source_dir" _ "$@"
}

step "what the wheel's binaries load"
mkdir "$work/unpacked" && (cd "$work/unpacked" && python3 -m zipfile -e "$wheel" .)
hidden python3 tests/wheel/check_libraries.py "$work/unpacked"

run_job() {  # VENV MODE: a 2-rank job of tests/wheel/worker.py under the venv's ddprun
  local venv=$1 mode=$2
  (cd "$work" && hidden timeout 300 "$venv/bin/ddprun" -np 2 "$venv/bin/python" \
     "$source_dir/tests/wheel/worker.py" "$mode") >"$work/job.log" 2>&1 || { cat "$work/job.log"; return 1; }
  cat "$work/job.log"
  # Both ranks ok, with ddp from the venv (not from the checkout).
  [ "$(grep -c "^\[[01]\] rank [01]: ok $mode: .* from $venv/" "$work/job.log")" = 2 ]
}

pyenv_python=$(command -v python3)
[ "$("$pyenv_python" -c 'import sys; print(sys.prefix)')" != /usr ] ||
  echo "wheel test: python3 on PATH is Debian's: the venv is made from the building Python" >&2
step "a fresh venv from $pyenv_python ($("$pyenv_python" -V)), the wheel and numpy"
"$pyenv_python" -m venv "$work/plain"
start=$(date +%s.%N)
"$work/plain/bin/pip" install -q --no-deps "$wheel"
end=$(date +%s.%N)
"$work/plain/bin/pip" install -q numpy
echo "wheel test: pip install --no-deps of the wheel: $(python3 -c "print(f'{$end - $start:.1f}')") s," \
     "$(du -h "$wheel" | cut -f1) wheel"
got=$(cd "$work" && hidden "$work/plain/bin/python" -c '
import importlib.metadata, ddp
print(importlib.metadata.version("libddp"), ddp.__version__, ddp._ddp.library_version(), ddp.__file__)')
echo "wheel test: pip, ddp, libddp.so, file: $got"
site() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
[ "$got" = "$version $version $version $(site "$work/plain")/ddp/__init__.py" ]
[ "$(cd "$work" && hidden "$work/plain/bin/ddprun" --version)" = "$version" ]
run_job "$work/plain" numpy

step "without Open MPI and libfabric on the machine: the errors a source build gives"
transports=$(cd "$work" && HIDE_PLUGIN_LIBS=1 hidden "$work/plain/bin/python" -c '
import ddp; print(ddp.mpi_built(), [name for name, _ in ddp._ddp.transports()])')
echo "mpi_built, transports: $transports"
[ "$transports" = "False ['tcp', 'shm']" ]
if (cd "$work" && DDP_TRANSPORT=ofi HIDE_PLUGIN_LIBS=1 hidden timeout 120 "$work/plain/bin/ddprun" \
      -np 2 "$work/plain/bin/python" "$source_dir/tests/wheel/worker.py" numpy) >"$work/job.log" 2>&1; then
  echo "wheel test: DDP_TRANSPORT=ofi ran without libfabric" >&2; exit 1
fi
grep -m 1 "could not be loaded" "$work/job.log"
grep -q "libfabric transport (libddp_ofi.so) could not be loaded: .*libfabric.so.1" "$work/job.log"

step "pip refuses the wheel where it does not fit (another Python, another platform)"
refused() {  # PIP WHEEL: pip must refuse it, saying so
  if "$1" install -q --no-deps "$2" >"$work/pip.log" 2>&1; then
    echo "wheel test: pip installed $(basename "$2") with $1" >&2; return 1
  fi
  grep -q "is not a supported wheel on this platform" "$work/pip.log" || { cat "$work/pip.log"; return 1; }
  echo "refused: $(basename "$2") for $("${1%/pip}/python" -V): $(grep -o "ERROR: .*" "$work/pip.log")"
}
other_python=$(ls "$(dirname "$(dirname "$(pyenv which python3 2>/dev/null || echo /x/x)")")"/../3.12*/bin/python3 2>/dev/null | head -n 1 || true)
if [ -n "$other_python" ]; then
  "$other_python" -m venv "$work/py312"
  refused "$work/py312/bin/pip" "$wheel"
else
  echo "wheel test: no Python 3.12 from pyenv here: the wrong-Python case not run" >&2
fi
other_arch=$([ "$arch" = aarch64 ] && echo x86_64 || echo aarch64)
foreign=$work/$(basename "$wheel" | sed "s/$arch/$other_arch/")
cp "$wheel" "$foreign"
refused "$work/plain/bin/pip" "$foreign"

step "Debian's Python and Debian's torch 1.13 (the wheel's torch-native module is for 2.15)"
/usr/bin/python3 -m venv --system-site-packages "$work/torch1"
"$work/torch1/bin/pip" install -q --no-deps "$wheel"
run_job "$work/torch1" torch
grep -q "backend path python" "$work/job.log"

if [ ! -x "$source_dir/.venv-torch2/bin/python" ]; then
  echo "wheel test: FAILED: no .venv-torch2 for the torch 2 part (make torch2-venv)" >&2
  exit 1
fi
torch2_site=$(site "$source_dir/.venv-torch2")
step "torch 2 from .venv-torch2, the wheel's own ddp first"
/usr/bin/python3 -m venv "$work/torch2"
"$work/torch2/bin/pip" install -q --no-deps "$wheel"
echo "$torch2_site" >"$(site "$work/torch2")/zz-torch2.pth"
run_job "$work/torch2" torch
grep -q "torch 2.*backend path native" "$work/job.log"
native=$(ls "$(site "$work/torch2")"/ddp/torch/_native_torch2_*.so)
step "the torch-native module corrupted ($(basename "$native")): the Python path, one warning"
head -c 4096 "$native" >"$native.part" && mv "$native.part" "$native"
run_job "$work/torch2" torch
grep -q "torch 2.*backend path python" "$work/job.log"
[ "$(grep -c "runs through torch's Python trampolines" "$work/job.log")" = 2 ]  # one per rank
echo "wheel test: the wheel installed and ran without a compiler, headers or the build tree"
