#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
# `make torch-suite` (full) and `make torch-suite-ci` (ci): torch's own distributed suite on gloo,
# then on ddp, in each venv (.venv: Debian's torch 1.13; .venv-torch2: PyTorch 2), then
# compare.py: every test that passes on gloo and not on ddp, by reason. docs/testing.md says more.
#
#   tests/torch_suite/run_all.sh full|ci
#
# Environment: TORCH_SUITE_VENVS (default ".venv .venv-torch2"), TORCH_SUITE_OUT (default
# build/torch-suite), TORCH_SUITE_TIMEOUT (seconds before a test's ranks are killed, default 300),
# TORCH_SUITE_START (forkserver, the default, or spawn: torch's own way, 3-7 s more a rank),
# TORCH_SUITE_ARGS (more run_suite.py options, e.g. "-k all_reduce").
# ci: the tests named in tests/torch_suite/ci_tests.txt; exits 1 if one passes on gloo and not on
# ddp. Gloo's side is the recorded run in gloo-baseline/torch-<version>.json where it holds this
# torch's version and exactly these tests (gloo is not libddp's code: it changes only with torch,
# which is pinned), else run live, as TORCH_SUITE_LIVE_GLOO=1 always does. full: every test, and the ddp tests that failed on the profiler's events alone run again
# without those checks (ddp-noprof.json), to show what else fails there.
set -euo pipefail
mode=${1:?usage: run_all.sh full|ci}
here=$(cd "$(dirname "$0")" && pwd)
out=${TORCH_SUITE_OUT:-build/torch-suite}/$mode
read -r -a venvs <<<"${TORCH_SUITE_VENVS:-.venv .venv-torch2}"
read -r -a extra <<<"${TORCH_SUITE_ARGS:-}"
common=(--start-method "${TORCH_SUITE_START:-forkserver}" --timeout "${TORCH_SUITE_TIMEOUT:-300}"
        "${extra[@]}")
[ "$mode" = ci ] && common+=(--tests-file "$here/ci_tests.txt")
[ "$mode" = ci ] || [ "$mode" = full ] || { echo "run_all.sh: full or ci, not $mode" >&2; exit 2; }

run() {  # run PYTHON DIR NAME ARGS...: one run_suite.py, its output in DIR/NAME.log
  local py=$1 dir=$2 name=$3
  shift 3
  local start=$SECONDS
  "$py" "$here/run_suite.py" "$@" --out "$dir/$name.json" >"$dir/$name.log" 2>&1 ||
    { echo "run_suite.py failed, see $dir/$name.log" >&2; tail -5 "$dir/$name.log" >&2; return 1; }
  echo "  $name: $(tail -1 "$dir/$name.log") [$((SECONDS - start)) s]"
}

rm -rf "$out"
for venv in "${venvs[@]}"; do
  py=$venv/bin/python
  "$py" -c 'import expecttest' 2>/dev/null || "$py" -m pip install -q -r "$here/requirements.txt"
  version=$("$py" -c 'import torch; print(torch.__version__.split("+")[0])')
  dir=$out/torch-$version
  mkdir -p "$dir"
  echo "== $venv: torch $version ($(date -u +%H:%M:%S) UTC)"
  baseline=$here/gloo-baseline/torch-$version.json
  if [ "$mode" = ci ] && [ -z "${TORCH_SUITE_LIVE_GLOO:-}" ] && [ -z "${TORCH_SUITE_ARGS:-}" ] &&
      python3 "$here/compare.py" --baseline-fits "$baseline" "$here/ci_tests.txt"; then
    cp "$baseline" "$dir/gloo.json"
    echo "  gloo: the recorded run ($baseline; TORCH_SUITE_LIVE_GLOO=1 runs it live)"
  else
    run "$py" "$dir" gloo --backend gloo "${common[@]}"
  fi
  run "$py" "$dir" ddp --backend ddp "${common[@]}"
  if [ "$mode" = full ]; then
    python3 "$here/compare.py" --list-profiler-gaps "$dir" >"$dir/profiler-gaps.txt"
    if [ -s "$dir/profiler-gaps.txt" ]; then
      run "$py" "$dir" ddp-noprof --backend ddp --profiler-checks off "${common[@]}" \
        --tests-file "$dir/profiler-gaps.txt"
    fi
  fi
done
check=()
[ "$mode" = ci ] && check=(--fail-on-gap)
python3 "$here/compare.py" "${check[@]}" "$out"/torch-*
