#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
# The object files of the reduce kernels (one per ISA build, libddp/src/reduce/isa/) keep their
# code to themselves: each defines exactly one global symbol, its kernel table, and nothing weak
# (an inline function or template the linker could pick from a -mavx512f build for callers on any
# CPU), and runs no code when the library loads (no static initializers).
# Usage: reduce_kernels_objects_test.sh NM OBJECT...
set -euo pipefail
nm=$1
shift
status=0
for object in "$@"; do
  defined=$("$nm" --defined-only --extern-only "$object" | awk '{print $2, $3}')
  weak=$(echo "$defined" | awk '$1 ~ /^[VvWwui]$/')
  tables=$(echo "$defined" | awk '$1 !~ /^[VvWwui]$/' | grep -c 'KernelsE$' || true)
  others=$(echo "$defined" | awk '$1 !~ /^[VvWwui]$/' | grep -v 'KernelsE$' || true)
  if [[ -n "$weak" || "$tables" != 1 || -n "$others" ]]; then
    echo "FAIL $object: expected only its kernel table, found:"
    "$nm" -C --defined-only --extern-only "$object"
    status=1
  fi
  if objdump -h "$object" | grep -qE '\.(init_array|ctors)'; then
    echo "FAIL $object: has static initializers"
    status=1
  fi
  [[ $status == 0 ]] && echo "ok $(basename "$object")"
done
exit $status
