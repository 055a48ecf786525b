#!/bin/bash
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
# Prepares the GPU machine's checks (tests/gpu/check.sh) on this Debian machine: the GPU machine
# (Ubuntu 24.04, CUDA, torch; no network) lacks Abseil, GoogleTest and pybind11's CMake files, so
# Debian's packages are unpacked into .device/root, which git ignores and the device tool carries
# (carry: [".device"]). Run from the repository root.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download libabsl-dev libabsl20220623 libgtest-dev libgmock-dev libssl-dev \
   pybind11-dev)
mkdir -p .device/root
for f in "$work"/*.deb; do dpkg -x "$f" .device/root; done
grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
cp tests/gpu/check.sh .device/check.sh
du -sh .device
