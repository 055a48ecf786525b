# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The elastic driver's blacklist: the hosts where a worker failed, which get no new workers,
for the rest of the job or, with a cooldown range (horovodrun's --blacklist-cooldown-range,
Horovod's RayExecutor cooldown_range), for a while that doubles with each failure of the host."""
from __future__ import annotations

import random
import time
from typing import Callable


class Blacklist:
    """`host in blacklist` while it is left out. COOLDOWN: (lowest, highest) seconds, or None (for
    good). A host's n-th failure leaves it out for lowest * 2**(n-1) plus up to `lowest` more at
    random (hosts that failed together do not all return at once), held within the range."""

    def __init__(self, cooldown: tuple[float, float] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 rand: Callable[[], float] = random.random):
        self.cooldown, self._clock, self._rand = cooldown, clock, rand
        self._until: dict[str, float] = {}  # host -> when it may have workers again
        self._failures: dict[str, int] = {}

    def add(self, host: str) -> float | None:
        """Leaves HOST out; returns for how many seconds (None: for good)."""
        failures = self._failures[host] = self._failures.get(host, 0) + 1
        if self.cooldown is None:
            self._until[host] = float("inf")
            return None
        lowest, highest = self.cooldown
        wait = min(highest, max(lowest, lowest * 2 ** (failures - 1) + self._rand() * lowest))
        self._until[host] = self._clock() + wait
        return wait

    def __contains__(self, host: object) -> bool:
        until = self._until.get(host)  # type: ignore[call-overload]
        return until is not None and self._clock() < until

    def returned(self) -> list[str]:
        """The hosts whose cooldown has ended since the last call (no longer left out)."""
        now = self._clock()
        back = [h for h, until in self._until.items() if until <= now]
        for host in back:
            del self._until[host]
        return back
