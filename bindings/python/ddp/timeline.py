# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""One timeline for the job: the ranks' timelines (DDP_TIMELINE, one Chrome-trace file per
rank) merged into one trace with a track group per rank, on one clock.

    ddp-timeline merge -o job.json rank.0.json rank.1.json ...
    (python -m ddp.timeline merge ...; ddprun --job-timeline job.json does it at the job's end)
    ddp-timeline render job.json -o job.png [--last-ms 50]   (a picture, with matplotlib)

Each rank's file says where its clock starts on its system clock (`process_name`'s
start_time_since_epoch_in_micros) and, when the job ran with DDP_TIMELINE_CLOCK_SYNC=1 (ddprun
--job-timeline sets it), how far its system clock is from rank 0's (`ddp_clock_sync`, measured at
the start over barriers: libddp/src/clock_sync.h). Every event is moved to rank 0's clock, with
the earliest rank's start at 0. Without the sync (a file of a plain DDP_TIMELINE run), the
hosts' system clocks are taken as they are, and the merge says so. Pure Python: runs anywhere
the files are."""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any


def read(path: pathlib.Path) -> list[dict[str, Any]]:
    """A rank's trace: a JSON array whose closing bracket may be missing (a killed process)."""
    text = path.read_text().rstrip().rstrip(",")
    if not text.endswith("]"):
        text += "]"
    events = json.loads(text)
    if not isinstance(events, list):
        raise ValueError(f"{path}: not a timeline (a JSON array of trace events)")
    return events


def _rank_of(events: list[dict], path: pathlib.Path) -> tuple[int, int, dict | None]:
    """(rank, start on its system clock in us, its clock sync or None)."""
    rank = start = None
    sync = None
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            rank, start = e["pid"], e["args"]["start_time_since_epoch_in_micros"]
        elif e.get("ph") == "M" and e.get("name") == "ddp_clock_sync":
            sync = e["args"]
    if rank is None or start is None:
        raise ValueError(f"{path}: no process_name event with the rank's start: not a libddp "
                         "timeline")
    return rank, start, sync


def merge(paths: list[pathlib.Path], hosts: dict[int, str] | None = None) -> dict[str, Any]:
    """The merged trace (Chrome's JSON object format)."""
    ranks = []
    for path in paths:
        events = read(path)
        rank, start, sync = _rank_of(events, path)
        ranks.append((rank, start - (sync["offset_us"] if sync else 0), sync, events))
    if len({r[0] for r in ranks}) != len(ranks):
        raise ValueError("two files of the same rank")
    base = min(r[1] for r in ranks)
    out: list[dict[str, Any]] = []
    clocks: dict[str, Any] = {}
    for rank, start, sync, events in sorted(ranks, key=lambda r: r[0]):
        shift = start - base
        for e in events:
            e = dict(e)
            if e.get("name") == "process_name" and e.get("ph") == "M":
                host = (hosts or {}).get(rank)
                e["args"] = {"name": f"rank {rank}" + (f" ({host})" if host else "")}
            if "ts" in e:
                e["ts"] = e["ts"] + shift
            out.append(e)
        out.append({"name": "process_sort_index", "ph": "M", "pid": rank,
                    "args": {"sort_index": rank}})
        clocks[str(rank)] = ({"offset_us": sync["offset_us"], "spread_us": sync["spread_us"]}
                             if sync else None)
    synced = all(c is not None for c in clocks.values())
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"merged_by": "ddp-timeline", "ranks": len(ranks),
                          "clock": "rank 0's (measured at start)" if synced else
                          "each host's system clock (no DDP_TIMELINE_CLOCK_SYNC)",
                          "clock_sync": clocks}}


def write(trace: dict, out: pathlib.Path) -> None:
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(trace))
    tmp.replace(out)


def _rows(events: list[dict], slices: list[dict], start: float) -> dict[tuple[int, bool], list]:
    """The slices to draw from START on, by (rank, on its "collectives" row): that track gets a
    row of its own, where each run is drawn and then its TRANSFER and REDUCE over it (a run that
    is not split, MPI's, shows as itself)."""
    split = {(e["pid"], e["tid"]) for e in events if e.get("ph") == "M"
             and e.get("name") == "thread_name" and e["args"].get("name") == "collectives"}
    rows: dict[tuple[int, bool], list[dict]] = {}
    for e in slices:
        on_split = (e["pid"], e.get("tid")) in split
        if e["ts"] + e["dur"] >= start:
            rows.setdefault((e["pid"], on_split), []).append(e)
    return rows


def render(trace: dict, out: pathlib.Path, last_ms: float | None = None) -> None:
    """A picture of a merged trace (where no trace viewer is at hand): a row per rank (its
    tensors' slices, colored by phase) and one for its collectives' TRANSFER and REDUCE, time in
    ms; LAST_MS: only the trace's last milliseconds."""
    import matplotlib  # lazy: only to render, and matplotlib is not a dependency of ddp

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: as above

    events = trace["traceEvents"]
    slices = [e for e in events if e.get("ph") == "X"]
    if not slices:
        raise ValueError("no slices to draw")
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    end = max(e["ts"] + e["dur"] for e in slices)
    start = end - last_ms * 1000 if last_ms else min(e["ts"] for e in slices)
    rows = _rows(events, slices, start)
    phases = sorted({e["name"] for row in rows.values() for e in row})
    colors = {p: plt.get_cmap("tab10")(i % 10) for i, p in enumerate(phases)}
    order = sorted(rows)
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(order) + 1.6))
    for row, key in enumerate(order):
        for e in rows[key]:
            ax.broken_barh([((e["ts"] - start) / 1000, max(e["dur"], 1) / 1000)], (row - 0.35, 0.7),
                           color=colors[e["name"]])
    labels = [names.get(pid, f"rank {pid}") + (": collectives" if on_split else "")
              for pid, on_split in order]
    ax.set_yticks(range(len(order)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("ms (rank 0's clock)")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colors[p]) for p in phases],
              labels=phases, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=4,
              fontsize="small", frameon=False)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ddp-timeline", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    m = sub.add_parser("merge", help="merge the ranks' timelines into one")
    m.add_argument("-o", "--output", required=True, metavar="FILE")
    m.add_argument("files", nargs="+", metavar="RANK_FILE")
    r = sub.add_parser("render", help="draw a merged timeline as a PNG (needs matplotlib)")
    r.add_argument("trace", metavar="JOB_TIMELINE")
    r.add_argument("-o", "--output", required=True, metavar="PNG")
    r.add_argument("--last-ms", type=float, help="only the trace's last milliseconds")
    args = ap.parse_args(argv)
    try:
        if args.command == "render":
            render(json.loads(pathlib.Path(args.trace).read_text()), pathlib.Path(args.output),
                   args.last_ms)
            print(f"ddp-timeline: {args.output}")
            return 0
        trace = merge([pathlib.Path(f) for f in args.files])
        write(trace, pathlib.Path(args.output))
    except ImportError as e:
        print(f"ddp-timeline: render needs matplotlib ({e}): pip install matplotlib",
              file=sys.stderr)
        return 1
    except (OSError, ValueError, KeyError) as e:
        print(f"ddp-timeline: {e}", file=sys.stderr)
        return 1
    other = trace["otherData"]
    print(f"ddp-timeline: {other['ranks']} ranks in {args.output}, on {other['clock']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
