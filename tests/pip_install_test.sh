#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
# `pip install .` into a fresh virtual environment (Debian's Python, nothing from the system's
# site-packages): scikit-build-core builds libddp and the extension from this checkout, pip brings
# NumPy. Then the installed `ddprun` runs the numpy API worker as a 2-rank job.
set -euo pipefail
source_dir=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

/usr/bin/python3 -m venv "$work/venv"
(cd "$source_dir" && "$work/venv/bin/pip" install -q --disable-pip-version-check .)
cd "$work"
"$work/venv/bin/python" -c 'import ddp, sys; print("installed ddp", ddp.__version__, "from", ddp.__file__)'
timeout 300 "$work/venv/bin/ddprun" -np 2 "$work/venv/bin/python" \
  "$source_dir/tests/python/workers/api_numpy.py" | tee "$work/out.log"
grep -q "rank 0: ok" "$work/out.log" && grep -q "rank 1: ok" "$work/out.log"
echo "pip install test: pip install . gave a working ddp and ddprun"
