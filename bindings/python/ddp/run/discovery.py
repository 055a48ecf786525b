# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddprun's host discovery for elastic mode: the user's script run, and what it prints read."""
from __future__ import annotations

import subprocess

from .hosts import parse_host

DISCOVERY_SECONDS = 1.0  # between runs of the host discovery script (Horovod's)
_DISCOVERY_TIMEOUT = 30.0


def parse_discovery(text: str, default_slots: int) -> dict[str, int]:
    """The discovery script's output: one host a line, 'HOST:SLOTS' or 'HOST' (then
    --slots-per-host)."""
    hosts: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        host = parse_host(line, f"discovery line {number}")
        hosts[host.name] = host.slots if ":" in line else default_slots
    return hosts


def discover(script: str, default_slots: int, say) -> dict[str, int] | None:
    """The hosts SCRIPT gives now; None when it failed (said with SAY)."""
    try:
        done = subprocess.run(script, shell=True, text=True, capture_output=True,
                              timeout=_DISCOVERY_TIMEOUT)
    except subprocess.TimeoutExpired:
        say(f"the host discovery script took more than {_DISCOVERY_TIMEOUT:g} s; "
            "keeping the hosts it last gave")
        return None
    if done.returncode != 0:
        say(f"the host discovery script exited with status {done.returncode}: "
            f"{done.stderr.strip()[-300:]}; keeping the hosts it last gave")
        return None
    try:
        return parse_discovery(done.stdout, default_slots)
    except ValueError as e:
        say(f"the host discovery script printed {e}; keeping the hosts it last gave")
        return None
