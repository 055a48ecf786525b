# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The rank-environment table (libddp/src/rank_environment.tsv) read for the tests, and rendered
as docs/launching.md's table: `python3 tests/python/rank_environment.py --markdown` prints it,
`--write` puts it into docs/launching.md between its markers."""
from __future__ import annotations

import argparse
import dataclasses
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TABLE = ROOT / "libddp" / "src" / "rank_environment.tsv"
DOC = ROOT / "docs" / "launching.md"
BEGIN = "<!-- rank-environment table: rendered from libddp/src/rank_environment.tsv -->"
END = "<!-- end of the rank-environment table -->"

WRITERS = {"ddprun", "ddprun-elastic", "ddprun-supervisor", "elastic-init", "torchrun-init",
           "torch-backend", "torchrun", "mpirun", "srun", "user"}
READERS = {"libddp-launch", "libddp-options", "libddp-ps", "libddp-report", "elastic-init",
           "torch-backend", "torch", "nccl", "python", "scripts"}
LAUNCHERS = {"ddp", "torchrun", "mpi", "slurm", "pmix", "-"}


@dataclasses.dataclass(frozen=True)
class Row:
    variable: str
    launcher: str  # "-" for none
    precedence: int | None  # on a launcher's identity rows
    written_by: frozenset[str]
    read_by: frozenset[str]
    ddprun: str  # clears | keeps
    torch_group: str  # unsets | sets | keeps
    example: str
    meaning: str


def read(path: pathlib.Path = TABLE) -> list[Row]:
    rows = []
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    header, body = lines[0].split("\t"), lines[1:]
    assert header == ["variable", "launcher", "written by", "read by", "ddprun", "torch group",
                      "example", "meaning"], header
    for line in body:
        cells = line.split("\t")
        if len(cells) != len(header):
            raise ValueError(f"{path}: {len(cells)} cells, not {len(header)}: {line!r}")
        variable, launcher, written, read_by, ddprun, group, example, meaning = cells
        name, _, order = launcher.partition(" ")
        rows.append(Row(variable, name, int(order) if order else None,
                        frozenset(written.split()), frozenset(read_by.split()), ddprun, group,
                        example, meaning))
    return rows


def markdown(rows: list[Row]) -> str:
    """The table as docs/launching.md shows it."""
    out = ["| variable | launcher | written by | read by | ddprun | torch group | what it says |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        launcher = "" if r.launcher == "-" else r.launcher
        if r.precedence is not None:
            launcher += f" ({r.precedence})"
        out.append(f"| `{r.variable}` | {launcher} | {', '.join(sorted(r.written_by))} | "
                   f"{', '.join(sorted(r.read_by))} | {r.ddprun} | {r.torch_group} | "
                   f"{r.meaning} |")
    return "\n".join(out) + "\n"


def documented(text: str) -> str:
    """The part of docs/launching.md between the markers."""
    found = re.search(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), text, re.S)
    if not found:
        raise ValueError(f"{DOC}: no rank-environment table between {BEGIN!r} and {END!r}")
    return found.group(1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print the table")
    parser.add_argument("--write", action="store_true", help="write it into docs/launching.md")
    args = parser.parse_args()
    table = markdown(read())
    if args.write:
        text = DOC.read_text()
        documented(text)  # the markers are there
        before, rest = text.split(BEGIN + "\n", 1)
        DOC.write_text(before + BEGIN + "\n" + table + END + rest.split(END, 1)[1])
    else:
        sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
