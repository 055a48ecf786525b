# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""What ddprun does to let a job be seen while it runs: the job's file for `ddprun status` and
`ddprun dump` (run/jobs.py) and the metrics server (--metrics-port), for an elastic job too
(following its newest generation); for a static job, with
--flight-recorder DIR the live ranks' flight records asked for when a rank fails, before the
others are stopped, and with --job-timeline FILE the ranks' timelines merged at the end."""
from __future__ import annotations

import argparse
import pathlib

from . import jobs, monitor
from .env import job_timeline_folder

FAILURE_DUMP_SECONDS = 3.0


def _prepare_timeline(args: argparse.Namespace) -> pathlib.Path:
    """--job-timeline FILE: FILE can be written, and its ranks' folder is empty and ready."""
    target = pathlib.Path(args.job_timeline)
    try:
        existed = target.exists()
        with open(target, "a"):
            pass
        if not existed:
            target.unlink()
        folder = job_timeline_folder(args)
        folder.mkdir(exist_ok=True)
        for old in folder.glob("rank.*.json"):
            old.unlink()
    except OSError as e:
        raise OSError(f"--job-timeline {args.job_timeline}: cannot be written: "
                      f"{e.strerror or e}") from e
    return folder
RECORD = "ddp_flight_recorder_rank_{rank}.json"


class Observers:
    def __init__(self, args: argparse.Namespace, say):
        self._args, self._say = args, say
        self._registration: jobs.Registration | None = None
        self._hosts: dict[int, str] = {}
        self._metrics = None
        if args.job_timeline is not None:  # a file that cannot be written stops ddprun now
            self._timeline = _prepare_timeline(args)
        if args.metrics_port is not None:  # first: a port in use stops ddprun before any rank
            from .metrics import MetricsServer  # lazy: only with --metrics-port

            try:
                self._metrics = MetricsServer(args.metrics_port)
            except OSError as e:
                raise OSError(f"--metrics-port {args.metrics_port}: cannot serve metrics there: "
                              f"{e.strerror or e}") from e

    def start(self, job, addr: str, port: int, token: str) -> None:
        """The job's store is up at ADDR:PORT; JOB is about to start."""
        self._hosts = job.hosts
        self._registration = jobs.register(self._args.np, self._args.command, addr, port, token)
        self._store = (addr, port, token)
        if self._metrics is not None:
            try:
                self._metrics.serve(monitor.Fixed(addr, port, token, self._args.np))
            except Exception as e:  # noqa: BLE001 - the job runs; its metrics do not
                self._say(f"--metrics-port {self._args.metrics_port}: no metrics: the job's "
                          f"store does not answer ({e})")
                self._metrics.close()
                self._metrics = None
        if self._args.flight_recorder is not None:
            job.before_stop = self._dump_at_failure

    def start_elastic(self, addr: str, port: int, token: str) -> None:
        """An elastic job's driver store is up at ADDR:PORT: `ddprun status`, `dump` and the
        metrics follow its newest generation (monitor.Generations)."""
        self._registration = jobs.register(self._args.np, self._args.command, addr, port, token,
                                           elastic=True)
        if self._metrics is not None:
            try:
                self._metrics.serve(monitor.Generations(addr, port, token))
            except Exception as e:  # noqa: BLE001 - the job runs; its metrics do not
                self._say(f"--metrics-port {self._args.metrics_port}: no metrics: the job's "
                          f"store does not answer ({e})")
                self._metrics.close()
                self._metrics = None

    def _merge_timeline(self) -> None:
        from .. import timeline  # lazy: the launcher's side, at the end

        folder = job_timeline_folder(self._args)
        files = {int(p.name.split(".")[1]): p for p in folder.glob("rank.*.json")}
        missing = [r for r in range(self._args.np) if r not in files]
        if not files:
            self._say(f"--job-timeline: no rank wrote its timeline in {folder}")
            return
        try:
            trace = timeline.merge([files[r] for r in sorted(files)], self._hosts)
            timeline.write(trace, pathlib.Path(self._args.job_timeline))
        except (OSError, ValueError, KeyError) as e:
            self._say(f"--job-timeline: the ranks' timelines in {folder} were not merged: {e}")
            return
        spreads = [c["spread_us"] for c in trace["otherData"]["clock_sync"].values() if c]
        self._say(f"job timeline: {self._args.job_timeline} ({len(files)} ranks on rank 0's "
                  f"clock; the start's measurements agreed within {max(spreads or [0])} us)"
                  + (f"; no timeline from {monitor.rank_list(missing)} (its host does not see "
                     f"{folder}? copy its file there and run ddp-timeline merge)"
                     if missing else ""))
        if not missing:
            for path in files.values():
                path.unlink()
            folder.rmdir()

    def _dump_at_failure(self, failed: int) -> None:
        folder = pathlib.Path(self._args.flight_recorder)
        try:
            client = monitor.connect(*self._store, timeout=1.0)
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
        if self._args.job_timeline is not None:
            self._merge_timeline()
        if self._registration is not None:
            self._registration.end(code)
