# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddprun's words for processes (exit statuses, counts) and the sweep of what dead ones left in
/dev/shm."""
from __future__ import annotations

import os
import signal

_OFI_REGION_PREFIX = "ddp-ofi-"


def describe(status: int) -> str:
    """An exit status as a sentence's end: "exited with status 3", "was killed by signal ..."."""
    if status >= 0:
        return f"exited with status {status}"
    try:
        name = signal.Signals(-status).name
    except ValueError:
        name = "an unknown signal"
    return f"was killed by signal {name} ({-status})"


def count_ranks(count: int) -> str:
    return f"{count} rank" if count == 1 else f"{count} ranks"


def alive(pid: int) -> bool:
    """Whether process PID still runs: not gone, not a zombie waiting to be reaped (what
    Popen.poll() cannot tell while another thread waits for the process)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _start_time(pid: int) -> int:
    """The kernel's start time of a process (field 22 of /proc/PID/stat), 0 if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return 0


def _owner(name: str, prefix: str) -> tuple[int, int] | None:
    """The pid and start time a segment's name records (start 0: not recorded), or None."""
    if name.startswith(_OFI_REGION_PREFIX):  # libfabric's shm provider, ofi_plugin.cc
        parts = name[len(_OFI_REGION_PREFIX):].split("-")
        if len(parts) != 2 or not parts[0].isdigit():
            return None
        return int(parts[0]), 0
    if name.startswith(prefix):
        parts = name[len(prefix):].split("-")
        if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
            return None
        return int(parts[0]), int(parts[1])
    return None


def _gone(pid: int, start: int) -> bool:
    try:
        os.kill(pid, 0)
        now_start = _start_time(pid)
        return start != 0 and now_start != 0 and now_start != start
    except ProcessLookupError:
        return True
    except PermissionError:
        return False


def sweep_shm(shm_dir: str = "/dev/shm") -> list[str]:
    """Removes the shared-memory segments of this user's libddp processes that are gone, as
    libddp does when it creates one (segment.cc, Sweep): a rank killed before its local peers
    attached (SIGKILL, or SIGTERM during start-up, which no library can catch) leaves its
    segment, named /dev/shm/ddp-UID-PIDNS-PID-START-NONCE; a rank on libfabric's shm provider
    leaves its region, ddp-ofi-PID-RANDOM (ofi_plugin.cc). The launcher and each agent sweep
    after every rank of theirs that exits, so a failed job leaves nothing for the next one to
    find. Returns the names removed."""
    try:
        prefix = f"ddp-{os.getuid()}-{os.stat('/proc/self/ns/pid').st_ino}-"
        names = os.listdir(shm_dir)
    except OSError:
        return []
    removed = []
    for name in names:
        owner = _owner(name, prefix)
        if owner is None or not _gone(*owner):
            continue
        try:
            os.unlink(os.path.join(shm_dir, name))
            removed.append(name)
        except OSError:
            pass
    return removed
