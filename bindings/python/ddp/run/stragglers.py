# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The stragglers table ddprun prints at the end of a job. At its graceful shutdown each rank's
libddp writes the job's straggler scores on its report pipe (common/report.h):
`stragglers RANK:SECONDS:ROUNDS ...`, the ranks the others waited for, most first: how long the
other ranks waited for each (seconds summed over them) and in how many of the engine's rounds it
was the one they waited for. The figures are agreed, the same on every rank, so ddprun reads the
lowest rank's line."""
from __future__ import annotations

from dataclasses import dataclass

# Printed by default (ddprun --stragglers auto) when the rank waited for most held each other
# rank this share of the job's time and at least NOTABLE_SECONDS: a straggler worth a look, not
# the start's jitter of a short job.
NOTABLE_SHARE = 0.10
NOTABLE_SECONDS = 1.0
ROWS = 8


@dataclass(frozen=True)
class Straggler:
    rank: int
    seconds: float
    rounds: int


def parse(line: str) -> list[Straggler] | None:
    """The ranks of a `stragglers ...` line, most waited for first; None for another line."""
    words = line.split()
    if not words or words[0] != "stragglers":
        return None
    rows = []
    for word in words[1:]:
        parts = word.split(":")
        try:
            rows.append(Straggler(int(parts[0]), float(parts[1]), int(parts[2])))
        except (IndexError, ValueError):
            continue  # a malformed item: the others still count
    return sorted(rows, key=lambda s: -s.seconds)


def table(rows: list[Straggler], size: int, wall: float, hosts: dict[int, str],
          always: bool) -> list[str]:
    """The table's lines: ALWAYS, or only when one rank held each of the others NOTABLE_SHARE
    of the job's WALL seconds and NOTABLE_SECONDS or more."""
    if not rows or size < 2:
        return []
    per_waiter = rows[0].seconds / (size - 1)
    if not always and (per_waiter < NOTABLE_SHARE * wall or per_waiter < NOTABLE_SECONDS):
        return []
    total = sum(r.seconds for r in rows) or 1.0
    lines = [f"stragglers: how long the other ranks waited for each (summed over them) in "
             f"{wall:.1f} s; rank {rows[0].rank} held each of them {per_waiter:.2f} s "
             f"({100 * per_waiter / max(wall, 1e-9):.0f}% of the job)",
             f"{'rank':>6}  " + (f"{'host':<16} " if hosts else "") +
             f"{'waited for':>12} {'share':>6} {'rounds last':>12}"]
    for r in rows[:ROWS]:
        host = f"{hosts.get(r.rank, '-')[:16]:<16} " if hosts else ""
        lines.append(f"{r.rank:>6}  {host}{r.seconds:>10.3f} s {100 * r.seconds / total:>5.0f}% "
                     f"{r.rounds:>12}")
    if len(rows) > ROWS:
        lines.append(f"  ... {len(rows) - ROWS} more ranks, "
                     f"{sum(r.seconds for r in rows[ROWS:]):.3f} s in all")
    return lines
