#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddp-efa-check: runs a job's command (mpirun ...), passes its output through, and then fails
unless the job's traffic between hosts went over EFA, as NCCL and libddp themselves report it:

  --nccl     every rank's NCCL said `Using network Libfabric` (aws-ofi-nccl loaded) and
             `NET/OFI Selected Provider is efa`; `Using network Socket`, or no such line at all,
             fails (needs NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS including INIT and NET).
  --ddp-ofi  every rank's libddp said `libfabric transport: ofi (efa, ...)` (needs
             DDP_LOG_LEVEL=info; libddp logs it when its ofi transport starts).

The ranks are counted from mpirun's -np and told apart by its --tag-output prefix ([1,R]).
Exit status: the command's when it failed; else 0 when EFA was used, 3 when not.

    ddp-efa-check --nccl -- mpirun ... python3 train.py
    ddp-efa-check --ddp-ofi --ranks 16 --log launcher.log     (a saved log, e.g. kubectl logs)
"""
from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys

RANK_TAG = re.compile(r"^\[\d+,(\d+)\]<std(?:out|err)>:")
NCCL_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$")
NCCL_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is ([\w;-]+)")
NCCL_PLUGIN_MISSING = re.compile(r"NET/Plugin.*(?:[Cc]ould not find|[Nn]o plugin found|"
                                 r"[Ff]ailed to (?:load|find))")
DDP_TRANSPORT = re.compile(r"\[ddp (\d+) I\] libfabric transport: ofi \(([^,)]+)")
# The lines worth keeping from a long log (everything else only passes through).
KEEP = re.compile(r"NCCL INFO Using network|NET/OFI|NET/Plugin|NET/Socket|\[ddp \d+ I\] libfabric")


def rank_of(line: str) -> int | None:
    found = RANK_TAG.match(line)
    return int(found.group(1)) if found else None


def _ranks_text(ranks) -> str:
    ranks = sorted(r for r in ranks if r is not None)
    return ("ranks " + ",".join(map(str, ranks))) if ranks else "untagged lines"


def _missing(seen: set, ranks: int | None, what: str) -> list[str]:
    if ranks is None or not all(r is not None for r in seen):
        return []
    missing = sorted(set(range(ranks)) - seen)
    return [f"{what}: no report from rank(s) {','.join(map(str, missing))} of {ranks}"] \
        if missing else []


def check_nccl(lines: list[str], ranks: int | None = None) -> list[str]:
    """NCCL's own report: the network it chose (Libfabric: aws-ofi-nccl) and the plugin's
    libfabric provider (efa), on every rank."""
    networks: dict[str, set] = {}
    providers: dict[str, set] = {}
    plugin_missing = False
    for line in lines:
        if (found := NCCL_NETWORK.search(line)):
            networks.setdefault(found.group(1), set()).add(rank_of(line))
        if (found := NCCL_PROVIDER.search(line)):
            providers.setdefault(found.group(1), set()).add(rank_of(line))
        plugin_missing = plugin_missing or bool(NCCL_PLUGIN_MISSING.search(line))
    if not networks:
        return ["NCCL: no 'Using network' line: NCCL did not run, or its log is off "
                "(NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET)"]
    problems = []
    for network, where in sorted(networks.items()):
        if "Libfabric" not in network:
            why = " (NCCL found no net plugin: is aws-ofi-nccl on LD_LIBRARY_PATH?)" \
                if plugin_missing else ""
            problems.append(f"NCCL: used network {network} on {_ranks_text(where)}, not "
                            f"Libfabric (EFA through aws-ofi-nccl){why}")
    for provider, where in sorted(providers.items()):
        if provider != "efa":
            problems.append(f"NCCL: aws-ofi-nccl selected provider {provider} on "
                            f"{_ranks_text(where)}, not efa")
    if networks and not providers and not problems:
        problems.append("NCCL: used Libfabric but no 'NET/OFI Selected Provider' line says which "
                        "provider")
    efa = set().union(*(w for n, w in networks.items() if "Libfabric" in n), set())
    return problems + _missing(efa, ranks, "NCCL over Libfabric")


def check_ddp_ofi(lines: list[str], ranks: int | None = None) -> list[str]:
    """libddp's own report: `[ddp R I] libfabric transport: ofi (PROVIDER, ...)` per rank."""
    providers: dict[str, set] = {}
    for line in lines:
        if (found := DDP_TRANSPORT.search(line)):
            providers.setdefault(found.group(2), set()).add(int(found.group(1)))
    if not providers:
        return ["libddp: no 'libfabric transport' line: its ofi transport did not start, or its "
                "log is below info (DDP_LOG_LEVEL=info)"]
    problems = [f"libddp: libfabric provider {p} on {_ranks_text(where)}, not efa"
                for p, where in sorted(providers.items()) if p != "efa"]
    return problems + _missing(providers.get("efa", set()), ranks, "libddp over efa")


def mpirun_ranks(command: list[str]) -> int | None:
    for i, word in enumerate(command[:-1]):
        if word in ("-np", "-n", "--np"):
            return int(command[i + 1])
    return None


def run(command: list[str]) -> tuple[int, list[str]]:
    """Runs the command with its output passed through; returns its status and the kept lines.
    SIGTERM and SIGINT go on to it (this may be PID 1 in the launcher's container)."""
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, errors="replace", bufsize=1)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, _frame: child.send_signal(number))
    kept = []
    for line in child.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if KEEP.search(line):
            kept.append(line.rstrip("\n"))
    return child.wait(), kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ddp-efa-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nccl", action="store_true", help="NCCL must have used EFA")
    parser.add_argument("--ddp-ofi", action="store_true", help="libddp's ofi transport, efa")
    parser.add_argument("--ranks", type=int, help="ranks that must report (default: -np)")
    parser.add_argument("--log", help="check this saved log instead of running a command")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if bool(args.log) == bool(command) or not (args.nccl or args.ddp_ofi):
        parser.error("give --nccl and/or --ddp-ofi, and either --log FILE or -- COMMAND...")
    if args.log:
        with open(args.log, errors="replace") as f:
            status, lines = 0, [line.rstrip("\n") for line in f if KEEP.search(line)]
    else:
        status, lines = run(command)
        if status != 0:
            print(f"ddp-efa-check: the command failed (exit {status}): EFA not checked",
                  file=sys.stderr, flush=True)
            return status
    ranks = args.ranks if args.ranks is not None else mpirun_ranks(command)
    problems = (check_nccl(lines, ranks) if args.nccl else []) + \
        (check_ddp_ofi(lines, ranks) if args.ddp_ofi else [])
    checked = " and ".join(w for w, on in (("NCCL", args.nccl), ("libddp", args.ddp_ofi)) if on)
    for problem in problems:
        print(f"ddp-efa-check: FAILED: {problem}", flush=True)
    if not problems:
        print(f"ddp-efa-check: OK: {checked} used EFA"
              f"{f' on all {ranks} ranks' if ranks else ''}", flush=True)
    return 3 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
