# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""A parameter-server process: `python -m ddp.ps.server` (what `ddprun --servers K` starts).

Joins the job as a server rank (DDP_PS_SERVERS must make this rank one), serves until every worker
has finished or died, writes the last checkpoint (DDP_PS_CHECKPOINT_DIR) and exits.
"""

import sys

from .client import init, is_worker, serve
from .._ddp import DDPError


def main():
    try:
        init(serve_and_exit=False)
        if is_worker():
            print("ddp.ps.server: this rank is a worker (DDP_PS_SERVERS makes the last ranks "
                  "servers)", file=sys.stderr)
            return 2
        serve()
    except DDPError as e:
        print(f"ddp.ps.server: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
