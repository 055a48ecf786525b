# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Every shared library an unpacked wheel's binaries need, resolved as the dynamic loader would
(their RUNPATHs, then the system's): each must be inside the wheel, in the manylinux policy's set
(glibc's, libstdc++, libgcc_s), or one of the libraries left out on purpose (packaging/wheel.sh:
the plugins' MPI, libfabric and NCCL, which must be the cluster's, and torch's, loaded by
`import torch`). Prints the table; exits non-zero naming anything else.

    check_libraries.py UNPACKED_WHEEL_DIR
"""
import os
import re
import subprocess
import sys

MANYLINUX = {"libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0",
             "libstdc++.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2"}
LEFT_OUT = re.compile(r"^(libmpi\.so\.40|libfabric\.so\.1|libnccl\.so\.2|libc10\.so|"
                      r"libtorch_cpu\.so|libtorch_python\.so)$")


def dynamic(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True,
                         check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    runpath = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library (?:runpath|rpath): \[([^\]]+)\]", out)
    dirs = []
    for entry in runpath:
        dirs += [d.replace("$ORIGIN", os.path.dirname(path)) for d in entry.split(":")]
    return needed, dirs


def main():
    root = os.path.realpath(sys.argv[1])
    binaries = [os.path.join(d, f) for d, _, files in os.walk(root) for f in files
                if re.search(r"\.so(\.|$)", f)]
    bad = []
    for path in sorted(binaries):
        needed, dirs = dynamic(path)
        kinds = {"wheel": [], "manylinux": [], "left out on purpose": []}
        for name in needed:
            if any(os.path.exists(os.path.join(d, name)) for d in dirs):
                kinds["wheel"].append(name)
            elif name in MANYLINUX:
                kinds["manylinux"].append(name)
            elif LEFT_OUT.match(name):
                kinds["left out on purpose"].append(name)
            else:
                bad.append(f"{os.path.relpath(path, root)} needs {name}")
        print(f"{os.path.relpath(path, root)}: " + "; ".join(
            f"{kind} {' '.join(names)}" for kind, names in kinds.items() if names))
    if bad:
        sys.exit("the wheel does not carry: " + "; ".join(bad))
    print(f"{len(binaries)} binaries: every library they need is in the wheel, in the manylinux "
          f"set, or left out on purpose")


if __name__ == "__main__":
    main()
