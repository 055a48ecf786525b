#!/usr/bin/env bash
# `pip install .` into a fresh virtual environment (Debian's Python, nothing from the system's
# site-packages): scikit-build-core builds libddp and the extension from this checkout, pip brings
# NumPy. Then the installed `ddprun` runs the numpy API worker as a 2-rank job.
#
#   tests/pip_install_test.sh                     both, in a temporary venv removed afterwards
#   tests/pip_install_test.sh --install-only DIR  the install alone, into the venv DIR (made anew)
#   tests/pip_install_test.sh --check-only DIR    the job alone, with the venv DIR made above
# (make test installs in the background, beside the other suites, and checks at the end.)
set -euo pipefail
source_dir=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-all}
case "$mode" in
  all) work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; venv=$work/venv ;;
  --install-only|--check-only) venv=$(realpath -m "${2:?$mode needs a venv directory}")
    work=$(dirname "$venv") ;;
  *) echo "usage: $0 [--install-only DIR | --check-only DIR]" >&2; exit 2 ;;
esac

if [ "$mode" != --check-only ]; then
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  (cd "$source_dir" && "$venv/bin/pip" install -q --disable-pip-version-check .)
  [ "$mode" = --install-only ] && { echo "pip install test: installed into $venv"; exit 0; }
fi
cd "$work"
"$venv/bin/python" -c 'import ddp, sys; print("installed ddp", ddp.__version__, "from", ddp.__file__)'
timeout 300 "$venv/bin/ddprun" -np 2 "$venv/bin/python" \
  "$source_dir/tests/python/workers/api_numpy.py" | tee "$work/pip-test-out.log"
grep -q "rank 0: ok" "$work/pip-test-out.log" && grep -q "rank 1: ok" "$work/pip-test-out.log"
echo "pip install test: pip install . gave a working ddp and ddprun"
