# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddprun's agent: one host's part of a job started from another, run over ssh (or --rsh) as
`PYTHON .../ddp/run/__main__.py --_agent`, the job (token included) read from its standard
input so that no secret is ever on a command line; its ranks stop when that input closes."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys

from .env import scrubbed
from .job import Job, Unit
from .output import Sink, rank_prefix

# The file the agent runs: by its path, so that the other host needs this same file at the same
# path, and nothing on its sys.path (its login shell's environment is not the job's).
_ENTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__main__.py")


def remote_command(args: argparse.Namespace, host: str) -> list[str]:
    """How an agent is started on HOST: ssh (or --rsh) HOST 'python .../__main__.py --_agent'."""
    agent = shlex.join([sys.executable, _ENTRY, "--_agent"])
    if args.rsh:
        return [*shlex.split(args.rsh), host, agent]
    ssh = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
    if args.ssh_port is not None:
        ssh += ["-p", str(args.ssh_port)]
    if args.ssh_identity_file:
        ssh += ["-i", args.ssh_identity_file]
    return [*ssh, host, agent]


def _read_job() -> bytes:
    line = b""
    while not line.endswith(b"\n"):  # only this line: what follows is the launcher's EOF
        piece = os.read(0, 1)
        if not piece:
            break
        line += piece
    return line


def agent_main() -> int:
    """One host's part of a job started elsewhere: the job comes as one JSON line on stdin."""
    out, err = Sink(sys.stdout.buffer), Sink(sys.stderr.buffer)
    try:
        spec = json.loads(_read_job())
        host, command, ranks = spec["host"], spec["command"], spec["ranks"]
    except (ValueError, KeyError, TypeError) as e:
        err.write([f"ddprun agent: no job on standard input ({e})\n".encode()])
        return 2
    try:
        os.chdir(spec.get("cwd") or ".")
    except OSError:
        pass  # this host has no such directory: the ranks start in the login directory
    base = scrubbed(os.environ)
    first_server = int(spec.get("first_server", 1 << 30))
    units = [Unit([int(r)], spec["server_command"] if int(r) >= first_server else command,
                  {**base, **env}, rank_prefix(int(r), host), host)
             for r, env in sorted(ranks.items(), key=lambda item: int(item[0]))]
    return Job(units, out, err, agent=True, host=host,
               tolerated=frozenset(spec.get("tolerated", [])),
               restartable=frozenset(spec.get("restartable", [])),
               max_restarts=int(spec.get("max_restarts", 0))).run()
