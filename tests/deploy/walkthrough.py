# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The docs' walk-throughs (the ```sh blocks of k8s/README.md and terraform/README.md) against
the repository: a step that writes into a tracked file (`> k8s/.../fsx.env`, `kustomize edit`
in a tracked overlay) leaves the checkout dirty and the next `git pull` in conflict; values
from terraform go into a git-ignored local overlay instead (k8s/local_overlay.py)."""
from __future__ import annotations

import pathlib
import re
import subprocess

from deploycheck import ROOT

DOCS = [ROOT / "k8s" / "README.md", ROOT / "terraform" / "README.md"]
REDIRECT = re.compile(r"(?<![0-9&])>>?\s*(\"[^\"]+\"|'[^']+'|[^\s;|&)]+)")


def shell_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```(?:sh|bash|shell)\n(.*?)^```", markdown, re.M | re.S)


def tracked(root: pathlib.Path = ROOT) -> set[str]:
    done = subprocess.run(["git", "-C", str(root), "ls-files"], capture_output=True, text=True,
                          check=True)
    return set(done.stdout.splitlines())


def tracked_writes(doc: pathlib.Path, text: str | None = None,
                   files: set[str] | None = None) -> list[str]:
    """Commands of the doc's shell blocks that write into a tracked file. The blocks run from
    the repository root; paths are also read from the folder a block `cd`s into."""
    files = tracked() if files is None else files
    text = doc.read_text() if text is None else text
    problems = []
    for block in shell_blocks(text):
        cwd = pathlib.Path()
        for line in block.splitlines():
            command = line.split("#")[0]
            if (moved := re.match(r"\s*cd\s+(\S+)", command)):
                cwd = cwd / moved.group(1)
            if "kustomize edit" in command:
                where = re.search(r"\(cd ([^ &;)]+)", command)
                folder = (cwd / where.group(1)) if where else cwd
                problems.append(f"{doc.name}: `{line.strip()}`: kustomize edit rewrites "
                                f"{folder.as_posix()}/kustomization.yaml, a tracked file")
            for target in REDIRECT.findall(command):
                target = target.strip("\"'")
                for path in {target, (cwd / target).as_posix()}:
                    if path in files:
                        problems.append(f"{doc.name}: `{line.strip()}` writes {path}, a tracked "
                                        "file (make a local overlay: k8s/local_overlay.py)")
    return problems
