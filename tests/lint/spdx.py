#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Every source file of the repository (code, build files, manifests, scripts) starts with its
SPDX lines: `make lint-spdx` checks, `tests/lint/spdx.py --fix` adds them where missing.
Documents and data (Markdown, JSON, logs, corpora, results) carry none."""
import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOLDER = "SPDX-FileCopyrightText: 2026 The libddp Authors"
LICENSE = "SPDX-License-Identifier: Apache-2.0"
SLASHES = {".cc", ".h", ".cu", ".c", ".inc"}
HASHES = {".py", ".sh", ".tf", ".cmake", ".yaml", ".yml", ".toml"}
NAMED_HASHES = {"CMakeLists.txt", "Makefile", ".clang-tidy", ".clang-format", ".gitignore",
                ".dockerignore", "ddp.pc.in", "ddpConfig.cmake.in"}
NAMED_SLASHES = {"version.h.in"}
# Their first lines are data that something else reads whole (test inputs, fuzzing corpora).
SKIPPED_FOLDERS = ("tests/fuzz/corpus/", "benchmarks/results/")


def comment_of(path: str) -> str | None:
    """The comment leader of PATH's kind, or None for a file that carries no SPDX lines."""
    name = os.path.basename(path)
    ext = os.path.splitext(name)[1]
    if path.startswith(SKIPPED_FOLDERS):
        return None
    if ext in SLASHES or name in NAMED_SLASHES:
        return "//"
    if ext in HASHES or name in NAMED_HASHES or name.startswith("Dockerfile"):
        return "#"
    if not ext:
        with open(os.path.join(ROOT, path), "rb") as f:
            if f.read(2) == b"#!":
                return "#"  # an executable script
    return None


def check(path: str, leader: str, fix: bool) -> bool:
    full = os.path.join(ROOT, path)
    with open(full) as f:
        lines = f.read().split("\n")
    head = lines[:6]
    if f"{leader} {LICENSE}" in head and f"{leader} {HOLDER}" in head:
        return True
    if not fix:
        return False
    at = 1 if lines and lines[0].startswith("#!") else 0
    lines[at:at] = [line for line in (f"{leader} {HOLDER}", f"{leader} {LICENSE}")
                    if line not in head]
    with open(full, "w") as f:
        f.write("\n".join(lines))
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fix", action="store_true", help="add the lines where they are missing")
    args = parser.parse_args()
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    missing = [path for path in files
               if os.path.isfile(os.path.join(ROOT, path)) and (leader := comment_of(path))
               and not check(path, leader, args.fix)]
    for path in missing:
        print(f"{path}: no SPDX lines ('{HOLDER}', '{LICENSE}'); tests/lint/spdx.py --fix adds "
              "them")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
