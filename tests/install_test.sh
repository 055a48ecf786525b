#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
# Installs libddp into a temporary prefix, builds examples/cpp against it with find_package(ddp)
# and with pkg-config, and runs the example as a real 2-rank job; then builds examples/ps the same
# way and runs it as a parameter-server job (2 workers, 1 server). examples/c is compiled as C11
# (pkg-config) and run as a 3-rank job.
#
#   install_test.sh BUILD_DIR SOURCE_DIR        installs BUILD_DIR first
#   install_test.sh --prefix PREFIX SOURCE_DIR  uses what is installed there (the .deb's files:
#                                               tests/package_test.sh)
set -euo pipefail
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
if [ "$1" = --prefix ]; then
  prefix=$2
  source_dir=$3
else
  source_dir=$2
  prefix=$work/prefix
  cmake --install "$1" --prefix "$prefix" >/dev/null
fi
cmake -S "$source_dir/examples/cpp" -B "$work/ex" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/ex" >/dev/null
libdir=$(dirname "$(find "$prefix" -name 'libddp.so' | head -n 1)")
PKG_CONFIG_PATH="$libdir/pkgconfig" g++ "$source_dir/examples/cpp/allreduce_example.cc" \
  $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs ddp) \
  -Wl,-rpath,"$libdir" -o "$work/example_pc"

# The C example, as C (no C++ compiler flags): the C API's header must be plain C.
PKG_CONFIG_PATH="$libdir/pkgconfig" cc -std=c11 -Wall -Wextra -Wpedantic -Werror \
  "$source_dir/examples/c/allreduce.c" $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags-only-I --libs ddp) \
  -Wl,-rpath,"$libdir" -o "$work/example_c"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export DDP_SIZE=2 DDP_RENDEZVOUS_ADDR=127.0.0.1 DDP_RENDEZVOUS_PORT=$port DDP_TIMEOUT_SECONDS=60
export DDP_JOB_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
DDP_RANK=0 "$work/ex/allreduce_example" >"$work/rank0.log" 2>&1 &
pid0=$!
DDP_RANK=1 "$work/example_pc" >"$work/rank1.log" 2>&1 &
pid1=$!
status=0
wait $pid0 || status=1
wait $pid1 || status=1
cat "$work/rank0.log" "$work/rank1.log"
grep -q "rank 0: ok" "$work/rank0.log" && grep -q "rank 1: ok" "$work/rank1.log" || status=1
# The C program, 3 ranks.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export DDP_SIZE=3 DDP_RENDEZVOUS_PORT=$port
pids=()
for r in 0 1 2; do
  DDP_RANK=$r "$work/example_c" >"$work/c$r.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
cat "$work/c0.log" "$work/c1.log" "$work/c2.log"
for r in 0 1 2; do grep -q "rank $r: ok" "$work/c$r.log" || status=1; done
cmake -S "$source_dir/examples/ps" -B "$work/ps" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/ps" >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export DDP_SIZE=3 DDP_RENDEZVOUS_PORT=$port DDP_PS_SERVERS=1
pids=()
for r in 0 1 2; do
  DDP_RANK=$r "$work/ps/ps_example" >"$work/ps$r.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
cat "$work/ps0.log" "$work/ps1.log" "$work/ps2.log"
grep -q "worker 0: ok" "$work/ps0.log" && grep -q "worker 1: ok" "$work/ps1.log" &&
  grep -q "server 0: ok" "$work/ps2.log" || status=1
[ $status -eq 0 ] && echo "install test: find_package and pkg-config builds ran a 2-rank job, the C example a 3-rank job, and a parameter-server job"
exit $status
