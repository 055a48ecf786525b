#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The conformance matrix over simulated network hosts (benchmarks/netsim): H hosts, L ranks in
each, the hierarchical allreduce's real shape (shared memory within a host, TCP across links
limited with tc), in chunks that pipeline its phases. Every rank must report OK and all must
compute identical allreduce bits.

    hier_conformance.py PATH/TO/ddp-conformance [--hosts 2] [--per-host 2] [--rate 5gbit]

Ranks are started straight in their hosts with DDP_* variables, not through ddprun, so that it
runs in sanitizer builds, which have no Python extension. Needs root and `ip netns`; exits 77
(skipped) otherwise. The cluster is always deleted.
"""
from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "netsim"))
import netsim  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("conformance", help="the ddp-conformance binary")
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--per-host", type=int, default=2)
    p.add_argument("--rate", default="5gbit", help="link rate, tc's syntax")
    p.add_argument("--limit", type=float, default=800, help="seconds before ranks are killed")
    args = p.parse_args(argv)
    why = netsim.available()
    if why:
        print(f"hier_conformance: {why}: skipped", file=sys.stderr)
        return 77
    n = args.hosts * args.per_host
    token = secrets.token_hex(16)
    port = 30000 + secrets.randbelow(20000)
    status = 0
    with netsim.Cluster(args.hosts, rate=args.rate) as cluster, \
            tempfile.TemporaryDirectory() as out:
        procs, logs = [], []
        for rank in range(n):
            host = rank // args.per_host
            env = {**os.environ, "DDP_RANK": str(rank), "DDP_SIZE": str(n),
                   "DDP_JOB_TOKEN": token, "DDP_RENDEZVOUS_ADDR": cluster.addresses[0],
                   "DDP_RENDEZVOUS_PORT": str(port), "DDP_HOSTNAME": cluster.hostnames[host],
                   "DDP_ALGO": "hier", "DDP_TIMEOUT_SECONDS": "120",
                   # Chunks of 16 KiB: from 4K elements on, the pipeline (two threads a rank)
                   # across the links; ctest's Hosts/Conformance runs the one-chunk path too.
                   "DDP_HIER_CHUNK_BYTES": "16K"}
            log = open(os.path.join(out, f"rank{rank}.txt"), "w+", encoding="utf-8")
            logs.append(log)
            procs.append(cluster.popen(host, [args.conformance, "--quick"], env=env, stdout=log,
                                       stderr=subprocess.STDOUT))
        deadline = time.monotonic() + args.limit
        for rank, proc in enumerate(procs):
            try:
                proc.wait(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"hier_conformance: rank {rank} still running after {args.limit:g} s",
                      file=sys.stderr)
                for q in procs:
                    q.kill()
                status = 1
                break
        digests = set()
        for rank, log in enumerate(logs):
            log.seek(0)
            text = log.read()
            log.close()
            if "status=OK" not in text:
                print(f"hier_conformance: rank {rank} failed:\n"
                      + "\n".join(text.splitlines()[-20:]), file=sys.stderr)
                status = 1
            digests.update(line for line in text.splitlines() if line.startswith("digest="))
        if len(digests) != 1:
            print(f"hier_conformance: ranks computed different allreduce bits "
                  f"({len(digests)} digests)", file=sys.stderr)
            status = 1
    if status == 0:
        print(f"hier_conformance: {n} ranks on {args.hosts} simulated hosts at {args.rate}: OK")
    return status


if __name__ == "__main__":
    sys.exit(main())
