#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""clang-tidy over libddp/src with the repository's profile (.clang-tidy): `make lint-tidy`.

It reads the compile commands of a configured build (CMake writes compile_commands.json). The
layers are unity builds, so each layer is checked through its unity files (a few translation
units that include the layer's .cc files: every header parsed once per unit, not once per file)
and the plugins' files one by one. Diagnostics in libddp's own files are reported; any is an
error. With FILES, only the units that compile them."""
import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = os.path.join(ROOT, "libddp", "src") + os.sep
LAYER_UNITY = re.compile(r"/libddp/CMakeFiles/ddp_layer_\w+\.dir/Unity/unity_\d+_cxx\.cxx$")


def units(build: str) -> dict[str, list[str]]:
    """Each translation unit of libddp/src in BUILD, with the libddp files it compiles."""
    path = os.path.join(build, "compile_commands.json")
    if not os.path.exists(path):
        sys.exit(f"clang_tidy.py: no {path}: configure the build first (make {build}/build.ninja)")
    with open(path) as f:
        entries = json.load(f)
    found: dict[str, list[str]] = {}
    for entry in entries:
        unit = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
        if LAYER_UNITY.search(unit):
            with open(unit) as f:
                found[unit] = [os.path.realpath(m) for m in re.findall(r'#include "([^"]+)"',
                                                                         f.read())]
        elif unit.startswith(SOURCES) and unit.endswith(".cc"):
            found[unit] = [unit]
    return found


def tidy(build: str, unit: str) -> tuple[int, str]:
    proc = subprocess.run(
        ["clang-tidy", "-p", build, "--quiet", f"--header-filter=^{re.escape(ROOT)}/libddp/",
         unit], capture_output=True, text=True, cwd=ROOT)
    # clang-tidy's count of the warnings it suppressed (system headers) is not a finding.
    lines = [line for line in (proc.stdout + proc.stderr).splitlines()
             if not re.match(r"^\d+ (warnings?|errors?)( and \d+ errors?)? generated\.$", line)]
    return proc.returncode, "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("files", nargs="*", help="only the units that compile these files")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    found = units(build)
    if args.files:
        wanted = {os.path.realpath(f) for f in args.files}
        found = {u: files for u, files in found.items() if wanted & set(files)}
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for unit, (code, text) in zip(found, pool.map(lambda u: tidy(build, u), found)):
            if code != 0 or re.search(r": (warning|error):", text):
                failed += 1
                print(f"== {os.path.relpath(unit, ROOT)}\n{text}", flush=True)
    print(f"clang-tidy: {len(found)} units, {failed} with findings")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
