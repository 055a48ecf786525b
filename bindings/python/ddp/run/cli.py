# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddprun's entry point: the command line parsed, then a static job run (static_job) or an
elastic one driven (elastic_driver); on another host, the agent. What it imports is imported when
it is needed: the agent (this package loaded alone, by path: __main__.py) needs neither the
launcher's rooms nor libddp's compiled extension, and an argument error none of them."""
from __future__ import annotations

import secrets
import sys


def main(argv: list[str] | None = None) -> int:
    """Runs ddprun with `argv` (default: sys.argv[1:]); returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--_agent"]:
        from .agent import agent_main  # lazy: the agent alone

        return agent_main()
    if argv[:1] in (["status"], ["dump"]):  # -np is required to run a job: never a command
        from . import status  # lazy: not in the agent

        return status.main(argv[0], argv[1:])
    from . import args as cli, static_job  # lazy: not in the agent
    from .output import Sink  # lazy: not in the agent

    try:
        args = cli.parse_args(argv)
    except SystemExit as e:  # argparse's --help and usage errors
        return e.code if isinstance(e.code, int) else 2
    stamp = args.prefix_timestamp  # horovodrun's: the time before every line printed
    out, err = Sink(sys.stdout.buffer, stamp), Sink(sys.stderr.buffer, stamp)
    if args.elastic:
        from . import elastic_driver  # lazy: elastic mode only

        return elastic_driver.main(args, out, err, secrets.token_hex(16))
    return static_job.run(args, out, err)
