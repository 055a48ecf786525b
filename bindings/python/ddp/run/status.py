# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""`ddprun status` and `ddprun dump`: a running job, asked from another terminal.

    ddprun status [--job ID]        every rank's current operation, who waits for whom, the
                                    last error (within 5 s, while the job runs or hangs)
    ddprun dump [--job ID] DIR      every live rank's flight record in DIR (and, with --torch,
                                    the dumps torch's flight-recorder analyzer reads)

The job is one this user's ddprun started on this machine (run/jobs.py); with one running,
--job is not needed."""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

from . import jobs, monitor

DUMP_TIMEOUT_SECONDS = 5.0


def _parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"ddprun {command}", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--job", metavar="ID", help="the job (ddprun's pid, as `ddprun status` "
                        "lists them); default: the one running")
    if command == "dump":
        parser.add_argument("--torch", action="store_true", help="also write torch's "
                            "flight-recorder dumps (ddp_trace_rank_N) beside them")
        parser.add_argument("folder", metavar="DIR")
    return parser


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def pick(job_id: str | None, err) -> dict | None:
    """The job asked for, or the one running; says why there is none."""
    records = jobs.load()
    if job_id is not None:
        found = [r for r in records if r["id"] == job_id]
        if not found:
            err(f"no job {job_id} started by this user on this machine (ddprun status lists "
                "the running ones)")
            return None
        job = found[0]
        if job["state"] != "running":
            code = job.get("code")
            err(f"job {job_id} has ended ({_when(job['ended'])}"
                + (f", exit status {code}" if code is not None else "") + ")")
            return None
        return job
    running = [r for r in records if r["state"] == "running"]
    if len(running) == 1:
        return running[0]
    if not running:
        last = next(iter(records), None)
        err("no job of this user is running on this machine"
            + (f" (the last, {last['id']}, ended {_when(last['ended'])})" if last else ""))
        return None
    err("several jobs are running; pick one with --job ID:")
    for r in running:
        err(f"  {r['id']}: {' '.join(r['command'])} ({r['np']} ranks, started "
            f"{_when(r['started'])})")
    return None


def _status(args, out, err) -> int:
    job = pick(args.job, err)
    if job is None:
        return 1
    try:
        first, second, generation = monitor.read_twice(monitor.source(job))
    except monitor.NoRanks as e:  # an elastic job between generations
        out(f"job {job['id']}: {' '.join(job['command'])} (elastic): {e}")
        return 0
    except Exception as e:  # noqa: BLE001 - the job ended between the look-up and now
        err(f"job {job['id']}: its store does not answer ({e}); it may just have ended")
        return 1
    for line in monitor.render(job, first, second, generation):
        out(line)
    return 0


def write_records(folder: pathlib.Path, records: dict[int, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for rank, text in records.items():
        (folder / f"ddp_flight_recorder_rank_{rank}.json").write_text(text)


def _dump(args, out, err) -> int:
    job = pick(args.job, err)
    if job is None:
        return 1
    folder = pathlib.Path(args.folder)
    try:
        client, ranks, generation = monitor.source(job).current()
        records, missing = monitor.request_dump(client, ranks, DUMP_TIMEOUT_SECONDS)
        write_records(folder, records)
    except monitor.NoRanks as e:
        err(f"job {job['id']} (elastic): no ranks to ask: {e}")
        return 1
    except OSError as e:
        err(f"{folder}: {e.strerror or e}")
        return 1
    except Exception as e:  # noqa: BLE001 - the job ended between the look-up and now
        err(f"job {job['id']}: its store does not answer ({e}); it may just have ended")
        return 1
    out(f"{len(records)} of {ranks} ranks' flight records in {folder}"
        + (f" (generation {generation} of the elastic job)" if generation >= 0 else ""))
    if missing:
        err(f"no flight record from {monitor.rank_list(missing)}: "
            f"no answer within {DUMP_TIMEOUT_SECONDS:.0f} s (stopped, hung outside libddp, "
            "or gone)")
    if args.torch and records:
        from .. import flight_recorder  # lazy: the launcher's side only

        try:
            flight_recorder.convert(folder, folder)
        except (OSError, ValueError, KeyError) as e:
            err(f"--torch: {folder}'s records were not converted: {e}")
            return 1
        out(f"torch's dumps: python -m torch.distributed.flight_recorder.fr_trace {folder} "
            f"--prefix {flight_recorder.PREFIX}")
    return 0 if not missing else 3


def main(command: str, argv: list[str]) -> int:
    try:
        args = _parser(command).parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2

    def out(line: str) -> None:
        print(line, flush=True)

    def err(line: str) -> None:
        print(f"ddprun {command}: {line}", file=sys.stderr, flush=True)
    try:
        return (_status if command == "status" else _dump)(args, out, err)
    except OSError as e:  # the jobs' folder: not this user's, or unreadable
        err(str(e))
        return 1
