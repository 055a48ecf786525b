# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""What ddprun does to let a static job be seen while it runs: the job's file for `ddprun
status` and `ddprun dump` (run/jobs.py), the metrics server (--metrics-port), and, with
--flight-recorder DIR, the live ranks' flight records asked for when a rank fails, before the
others are stopped."""
from __future__ import annotations

import argparse
import pathlib

from . import jobs, monitor

FAILURE_DUMP_SECONDS = 3.0
RECORD = "ddp_flight_recorder_rank_{rank}.json"


class Observers:
    def __init__(self, args: argparse.Namespace, say):
        self._args, self._say = args, say
        self._registration: jobs.Registration | None = None
        self._metrics = None
        if args.metrics_port is not None:  # first: a port in use stops ddprun before any rank
            from .metrics import MetricsServer  # lazy: only with --metrics-port

            try:
                self._metrics = MetricsServer(args.metrics_port)
            except OSError as e:
                raise OSError(f"--metrics-port {args.metrics_port}: cannot serve metrics there: "
                              f"{e.strerror or e}") from e

    def start(self, job, addr: str, port: int, token: str) -> None:
        """The job's store is up at ADDR:PORT; JOB is about to start."""
        self._registration = jobs.register(self._args.np, self._args.command, addr, port, token)
        self._store = (addr, port, token)
        if self._metrics is not None:
            self._metrics.serve(monitor.connect(addr, port, token), self._args.np)
        if self._args.flight_recorder is not None:
            job.before_stop = self._dump_at_failure

    def _dump_at_failure(self, failed: int) -> None:
        folder = pathlib.Path(self._args.flight_recorder)
        try:
            client = monitor.connect(*self._store)
            records, _ = monitor.request_dump(client, self._args.np, FAILURE_DUMP_SECONDS)
            from .status import write_records  # lazy: the launcher's side

            # A rank whose job broke wrote its own record at that moment: it is kept.
            write_records(folder, {r: text for r, text in records.items()
                                   if not (folder / RECORD.format(rank=r)).exists()})
        except Exception as e:  # noqa: BLE001 - the failure is said already; this is extra
            self._say(f"--flight-recorder: no flight records: {e}")
            return
        have = [r for r in range(self._args.np) if (folder / RECORD.format(rank=r)).exists()]
        lacking = [r for r in range(self._args.np) if r not in have]
        self._say(f"flight records in {folder}: "
                  + (monitor.rank_list(have) if have else "none")
                  + (f"; none from {monitor.rank_list(lacking)}" if lacking else ""))

    def end(self, code: int) -> None:
        if self._metrics is not None:
            self._metrics.close()
        if self._registration is not None:
            self._registration.end(code)
