#!/bin/sh
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
# run_fuzzer.sh HARNESS SECONDS SCRATCH ARTIFACTS SEEDS [RUNS]: runs one libFuzzer harness for
# SECONDS (0: no limit) or until it has run RUNS inputs, whichever comes first, from the
# committed SEEDS (read only) plus what earlier runs found in SCRATCH (written), crashes saved
# under ARTIFACTS; prints libFuzzer's own count of executions. Fails on any finding.
set -eu
harness=$1 seconds=$2 scratch=$3 artifacts=$4 seeds=$5 runs=${6:--1}
mkdir -p "$scratch" "$artifacts"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
"$harness" -max_total_time="$seconds" -runs="$runs" -timeout=25 -rss_limit_mb=2048 -max_len=65536 \
  -print_final_stats=1 -artifact_prefix="$artifacts" "$scratch" "$seeds" >"$log" 2>&1 || status=$?
grep -a -E "^(stat::number_of_executed_units|stat::peak_rss_mb|Done [0-9]+ runs)" "$log" || true
if [ "$status" -ne 0 ]; then
  tail -n 60 "$log"
  echo "$(basename "$harness"): FAILED (exit $status; the input is under $artifacts)" >&2
  exit 1
fi
echo "$(basename "$harness"): no finding (limits: ${seconds} s, ${runs} runs; 0 s or -1 runs: none)"
