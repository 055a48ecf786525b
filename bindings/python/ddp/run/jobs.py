# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The jobs this user's ddprun started on this machine, a file each, so that `ddprun status` and
`ddprun dump` find a job's store: $XDG_RUNTIME_DIR/ddp-jobs (else the temporary folder's
ddp-jobs-<uid>), a folder only its owner may enter, holding the job's id (ddprun's pid), command,
ranks, store address and token, and, once it has ended, when and with which status. Ended jobs'
files go after a day."""
from __future__ import annotations

import json
import os
import pathlib
import tempfile
import time

KEEP_ENDED_SECONDS = 86400


def folder() -> pathlib.Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = pathlib.Path(runtime) / "ddp-jobs" if runtime and os.path.isdir(runtime) else \
        pathlib.Path(tempfile.gettempdir()) / f"ddp-jobs-{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    st = base.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(f"{base}: not this user's own folder (owner {st.st_uid}, mode "
                              f"{oct(st.st_mode & 0o777)}): ddprun keeps its jobs' tokens there")
    return base


def _write(path: pathlib.Path, record: dict) -> None:
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
    os.replace(tmp, path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Registration:
    """A running job's file; end() marks it ended."""

    def __init__(self, record: dict):
        self.record = record
        self.path: pathlib.Path | None = None
        try:
            base = folder()
            _sweep(base)
            self.path = base / f"{record['id']}.json"
            _write(self.path, record)
        except OSError:
            self.path = None  # status is a convenience: the job runs without it

    def end(self, code: int) -> None:
        if self.path is None:
            return
        self.record.update(state="ended", ended=time.time(), code=code)
        try:
            _write(self.path, self.record)
        except OSError:
            pass


def register(np: int, command: list[str], addr: str, port: int, token: str,
             elastic: bool = False) -> Registration:
    """ELASTIC: ADDR:PORT is the elastic driver's store, which names each generation's."""
    return Registration({"id": str(os.getpid()), "pid": os.getpid(), "command": command,
                         "np": np, "started": time.time(), "addr": addr, "port": port,
                         "token": token, "state": "running", "elastic": elastic})


def load() -> list[dict]:
    """Every job's record, newest first; a running job whose ddprun is gone counts as ended."""
    records = []
    for path in folder().glob("*.json"):
        try:
            record = json.loads(path.read_text())
            if record.get("state") == "running" and not _alive(int(record.get("pid", 0))):
                record.update(state="ended", ended=path.stat().st_mtime, code=None)
        except (OSError, ValueError):  # gone meanwhile (another ddprun's sweep), or unreadable
            continue
        records.append(record)
    return sorted(records, key=lambda r: -r.get("started", 0))


def _sweep(base: pathlib.Path) -> None:
    for path in base.glob("*.json"):
        try:
            record = json.loads(path.read_text())
            if record.get("state") == "ended" and \
                    time.time() - record.get("ended", 0) > KEEP_ENDED_SECONDS:
                path.unlink()
        except (OSError, ValueError):
            continue
