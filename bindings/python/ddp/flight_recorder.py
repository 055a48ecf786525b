# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""libddp's flight records (ddp.dump_flight_recorder, DDP_FLIGHT_RECORDER_DUMP, ddprun dump) as
the dumps PyTorch's flight-recorder analyzer reads:

    python -m ddp.flight_recorder torch DIR [OUT]
    python -m torch.distributed.flight_recorder.fr_trace OUT --prefix ddp_trace_rank_

Each rank's DIR/ddp_flight_recorder_rank_<N>.json becomes OUT/ddp_trace_rank_<N> (OUT: DIR by
default), a pickle in torch's format (version 2.10): one process group per libddp process set
(the whole job is group "0", "default_pg", as torch.distributed's default group) and, in a
torch.distributed job, per group of torch's new_group with torch's name and global ranks (each
is a libddp job of its own, whose record the process's record holds), an entry per
collective with torch's names ("ddp:all_reduce", "Float") and states (scheduled, started,
completed; a failed operation stays at the state it reached), numbered in the order its process
set agreed to run it (libddp's ranks may submit in different orders; the agreed order is the
same everywhere). Needs no torch. Operations torch has no name for (add_process_set) are left
out."""
from __future__ import annotations

import json
import pathlib
import pickle
import re
import sys
from typing import Any

PREFIX = "ddp_trace_rank_"
VERSION = "2.10"
_SOURCE = re.compile(r"ddp_flight_recorder_rank_(\d+)\.json$")
_OPS = {"allreduce": "all_reduce", "allgather": "all_gather", "broadcast": "broadcast",
        "alltoall": "all_to_all", "reducescatter": "reduce_scatter"}
_DTYPES = {"f32": "Float", "f64": "Double", "f16": "Half", "bf16": "BFloat16", "i8": "Char",
           "u8": "Byte", "i32": "Int", "i64": "Long"}


def _output_sizes(entry: dict, members: int) -> list[list[int]]:
    """What the operation gives this rank (allgather: the ranks' first dimensions may differ;
    the equal split is what torch's own all_gather would show)."""
    shapes = [list(s) for s in entry["shapes"]]
    kind = entry["kind"]
    for shape in shapes:
        if shape and kind == "allgather":
            shape[0] *= members
        elif shape and kind == "reducescatter":
            shape[0] //= max(members, 1)
    return shapes


def _state(entry: dict) -> str:
    if entry["state"] != "failed":
        return entry["state"]
    return "started" if entry["started_ns"] else "scheduled"


def _entry(entry: dict, seq: int, record_id: int, group: str, desc: str,
           members: int) -> dict[str, Any]:
    state = _state(entry)
    return {
        "record_id": record_id, "pg_id": 0, "process_group": (group, desc),
        "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
        "profiling_name": f"ddp:{_OPS[entry['kind']]}",
        "time_created_ns": entry["submitted_ns"],
        "input_sizes": [list(s) for s in entry["shapes"]],
        "input_dtypes": [_DTYPES.get(entry["dtype"], entry["dtype"])] * len(entry["shapes"]),
        "output_sizes": _output_sizes(entry, members),
        "output_dtypes": [_DTYPES.get(entry["dtype"], entry["dtype"])] * len(entry["shapes"]),
        "state": state,
        "time_discovered_started_ns": entry["started_ns"] or None,
        "time_discovered_completed_ns": entry["finished_ns"] if state == "completed" else None,
        "retired": state == "completed", "timeout_ms": 0, "is_p2p": False, "frames": [],
    }


def _sequence(entries: list[dict]) -> list[tuple[dict, int]]:
    """Each entry with torch's collective_seq_id: the order its process set agreed to run it
    (the same on every rank, whatever order each rank submitted in); an operation not yet agreed
    comes after the set's last agreed one, in this rank's order of submission."""
    ordered = sorted((e for e in entries if e["kind"] in _OPS), key=lambda e: e["id"])
    agreed: dict[int, int] = {}
    for e in ordered:
        agreed[e["process_set"]] = max(agreed.get(e["process_set"], 0), e["agreed_seq"])
    out = []
    for e in ordered:
        if e["agreed_seq"]:
            out.append((e, e["agreed_seq"]))
        else:
            agreed[e["process_set"]] += 1
            out.append((e, agreed[e["process_set"]]))
    return out


def _groups(record: dict) -> list[tuple[dict, str, str, str, list[int]]]:
    """torch's process groups in a rank's record: (the libddp record holding it, its process set
    there, torch's name, description, the members' global ranks). The job's sets, then the
    process's other jobs that torch named (its new_group groups, under "groups")."""
    out = []
    label = record.get("group")
    named = bool(label) or bool(record.get("groups"))
    for k, members in sorted(record["process_sets"].items(), key=lambda kv: int(kv[0])):
        if str(k) == "0":
            out.append((record, "0", *((label["name"], label["desc"], label["ranks"]) if label
                                       else ("0", "default_pg", members))))
        else:  # the Horovod API's process sets, beside torch's groups when there are any
            out.append((record, str(k), f"process_set_{k}" if named else str(k),
                        f"process_set_{k}", members))
    for group in record.get("groups", []):
        g = group["group"]
        out.append((group, "0", g["name"], g["desc"], g["ranks"]))
    return out


def to_torch(record: dict) -> dict[str, Any]:
    """One rank's flight record (libddp's format) as torch's flight-recorder dump: every process
    group of the process, the job's and those of torch's new_group (named in the record)."""
    if record.get("format") != "libddp-flight-recorder":
        raise ValueError("not a libddp flight record (its \"format\" is "
                         f"{record.get('format')!r})")
    entries, status, config = [], {}, {}
    for pg_id, (source, k, name, desc, ranks) in enumerate(_groups(record)):
        config[name] = {"name": name, "desc": desc, "ranks": str(sorted(ranks))}
        s = {"last_enqueued_collective": -1, "last_started_collective": -1,
             "last_completed_collective": -1}
        for e, seq in _sequence(source["entries"]):
            if str(e["process_set"]) != k:
                continue
            entry = _entry(e, seq, len(entries), name, desc, len(ranks))
            entry["pg_id"] = pg_id
            entries.append(entry)
            s["last_enqueued_collective"] = max(s["last_enqueued_collective"], seq)
            if e["started_ns"]:
                s["last_started_collective"] = max(s["last_started_collective"], seq)
            if e["state"] == "completed":
                s["last_completed_collective"] = max(s["last_completed_collective"], seq)
        if s["last_enqueued_collective"] >= 0:
            status[name] = s
    entries.sort(key=lambda e: e["time_created_ns"])
    for i, entry in enumerate(entries):
        entry["record_id"] = i
    return {"version": VERSION, "comm_lib_version": "libddp", "pg_config": config,
            "pg_status": status, "entries": entries}


def convert(folder: pathlib.Path, out: pathlib.Path) -> list[pathlib.Path]:
    """Every rank's record in FOLDER as torch's dump in OUT; the files written."""
    sources = sorted((int(m.group(1)), p) for p in folder.iterdir()
                     if (m := _SOURCE.search(p.name)))
    if not sources:
        raise FileNotFoundError(f"{folder}: no ddp_flight_recorder_rank_<N>.json files")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for rank, path in sources:
        dump = to_torch(json.loads(path.read_text()))
        target = out / f"{PREFIX}{rank}"
        with open(target, "wb") as f:
            pickle.dump(dump, f)
        written.append(target)
    return written


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or argv[0] != "torch":
        print("usage: python -m ddp.flight_recorder torch DIR [OUT]", file=sys.stderr)
        return 2
    folder = pathlib.Path(argv[1])
    try:
        written = convert(folder, pathlib.Path(argv[2]) if len(argv) == 3 else folder)
    except (OSError, ValueError, KeyError) as e:
        print(f"ddp.flight_recorder: {e}", file=sys.stderr)
        return 1
    print(f"{len(written)} ranks' dumps for torch's analyzer in {written[0].parent}: "
          f"python -m torch.distributed.flight_recorder.fr_trace {written[0].parent} "
          f"--prefix {PREFIX}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
