# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""How k8s/eks.py runs commands: every step says what it does and how long it took; a command
that touches AWS or the cluster is printed before it runs, and in a dry run (DRY_RUN=1) printed
instead; a failure ends the run with one line that says what to do (Failure), never a
traceback."""
from __future__ import annotations

import contextlib
import os
import pathlib
import shlex
import shutil
import subprocess
import time

K8S = pathlib.Path(__file__).resolve().parents[1]
ROOT = K8S.parent
LOCAL = pathlib.Path(os.environ.get("EKS_LOCAL", K8S / "local"))  # git-ignored
DRY_RUN = os.environ.get("DRY_RUN", "0") not in ("", "0")


class Failure(Exception):
    """A run cannot go on; the message is the one line the user reads (what failed, what to
    do)."""


@contextlib.contextmanager
def step(what: str):
    print(f"==> {what}", flush=True)
    start = time.monotonic()
    try:
        yield
    finally:
        print(f"<== {what}: {time.monotonic() - start:.1f} s", flush=True)


def quote(*words) -> str:
    return " ".join(shlex.quote(str(w)) for w in words)


def last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def sh(command: str, offline: bool = False, capture: bool = False) -> str:
    """Runs a shell command from the repository root, or in a dry run prints it (unless it is
    offline: those run). A failure is a Failure naming the command and its last error line."""
    if DRY_RUN and not offline:
        print(f"    would run: {command}", flush=True)
        return ""
    print(f"    $ {command}", flush=True)
    done = subprocess.run(command, shell=True, cwd=ROOT, text=True,
                          stdout=subprocess.PIPE if capture else None,
                          stderr=subprocess.PIPE if capture else None)
    if capture and done.stderr:
        print(done.stderr, end="", flush=True)
    if done.returncode != 0:
        why = last_line(done.stderr) if capture else ""
        raise Failure(f"`{command}` failed (exit {done.returncode})" + (f": {why}" if why else ""))
    return done.stdout or ""


def probe(command: str) -> subprocess.CompletedProcess:
    """Runs a read-only question (a tool's version, whether an image or a kind exists) and
    returns its outcome, whatever it is; nothing is printed. The caller decides what a failure
    means. In a dry run the questions to AWS and the cluster are not asked: callers check
    DRY_RUN first."""
    return subprocess.run(command, shell=True, cwd=ROOT, text=True, capture_output=True)


def need(tool: str, why: str) -> None:
    """A Failure unless TOOL is on PATH."""
    if shutil.which(tool) is None:
        raise Failure(f"{tool} is not installed here, and {why}: install it and run again")
