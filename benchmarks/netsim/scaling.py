#!/usr/bin/python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Allreduce across simulated hosts: libddp (ring, hierarchical), Open MPI and Gloo against the
bandwidth bound, for H hosts x L ranks per host and several link rates (benchmarks/netsim).

    sudo .venv/bin/python benchmarks/netsim/scaling.py                 # the full matrix
    sudo .venv/bin/python benchmarks/netsim/scaling.py --hosts 2 --per-host 1 --rates 1gbit

For each link rate and host count one cluster is made (netsim.Cluster: a namespace per host,
tc tbf on both ends of every link) and, for each L, every implementation runs f32 sum
allreduces of --sizes in it: libddp through `ddprun -H ... --rsh` (ddp-bench --algo ring|hier),
Open MPI's `mpirun` (TCP between hosts, its remote shell entering the namespaces; ddp-mpi-bench)
and Gloo (torch.distributed, one process per rank started in its host). At 10 Gbit/s, where the
CPU and not the links is the limit, `ddp-tcp-ceiling` in ring mode measures what this machine
can move in the ring's cross-host pattern at all (one stream per host, no arithmetic, no
framing, no shared-memory hops).

Bounds (B = the link rate, each direction; K = bytes reduced): the ring moves 2(N-1)/N x K over
every host's link, N = H x L ranks, so T >= 2(N-1)/N x K / B; the hierarchical allreduce reduces
within a host first and moves 2(H-1)/H x K, so T >= 2(H-1)/H x K / B. Figures are medians of
--repeats (each the mean of -n calls, max over ranks), reported as the fraction of the bound.

The hierarchical allreduce runs as libddp chooses (one chunk here, where the simulated hosts'
ranks outnumber the machine's cores); `--hier-chunk-bytes pipelined` gives it the chunks libddp
chooses where hosts have cores of their own, or a size (DDP_HIER_CHUNK_BYTES).

Writes benchmarks/results/scaling-<date>.json (every figure, with the machine and the command),
and with --report the markdown table and the plot (scaling_report.py). Needs root.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import secrets
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import netsim  # noqa: E402

try:
    import ddp_model as model  # the cost model, installed with libddp's package (make build)
except ImportError as e:
    raise SystemExit(f"{e}: run this with the Python that `make build` installs libddp into "
                     f"(.venv/bin/python)") from None

UNITS = {"": 0, "K": 10, "M": 20, "G": 30}
IMPLS = ("ring", "hier", "mpi", "gloo", "c10d")


def parse_bytes(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)", text.upper())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r}")
    return int(m.group(1)) << UNITS[m.group(2)]


def rate_bits(text: str) -> float:
    try:
        return netsim.rate_bits(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))


def parse_table(text: str) -> dict[int, float]:
    """{bytes: seconds} from an nccl-tests-style table (ddp-bench, ddp-mpi-bench, gloo bench)."""
    rows = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) != 8 or f[0].startswith("#"):
            continue
        try:
            size, time_us = int(f[0]), float(f[4])
        except ValueError:
            continue
        if f[7] not in ("0", "N/A"):
            raise RuntimeError(f"{f[7]} wrong elements at {size} bytes")
        rows[size] = time_us * 1e-6
    return rows


class Runner:
    def __init__(self, args):
        self.args = args
        self.build = os.path.join(ROOT, args.build, "bin")
        self.ddprun = args.ddprun or os.path.join(ROOT, ".venv", "bin", "ddprun")
        self.gloo = os.path.join(ROOT, "benchmarks", "collectives", "gloo_allreduce_bench.py")

    def bench_args(self) -> list[str]:
        a = self.args
        return ["-b", str(min(a.sizes)), "-e", str(max(a.sizes)), "-f", "4", "-w", str(a.warmup),
                "-n", str(a.iters), "-r", str(a.repeats)]

    def _check(self, what: str, done: subprocess.CompletedProcess) -> str:
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            raise RuntimeError(f"{what} exited {done.returncode}:\n{tail}")
        return done.stdout

    def libddp(self, c: netsim.Cluster, hosts: int, per_host: int, algo: str) -> dict:
        cmd = [self.ddprun, "-np", str(hosts * per_host), "-H", c.hosts_arg(per_host, hosts),
               "--rsh", c.rsh, os.path.join(self.build, "ddp-bench"), "--algo", algo,
               *self.bench_args()]
        env = {**os.environ, "DDP_TIMEOUT_SECONDS": "300"}
        chunk = self.hier_chunk_bytes(hosts * per_host)
        if algo == "hier" and chunk is not None:
            env["DDP_HIER_CHUNK_BYTES"] = str(chunk)
        done = c.run(0, cmd, capture_output=True, text=True, timeout=self.args.limit, env=env)
        return parse_table(self._strip_prefix(self._check(f"ddprun ({algo})", done)))

    def hier_chunk_bytes(self, ranks: int) -> int | None:
        """DDP_HIER_CHUNK_BYTES for the hierarchical runs; None: libddp's default (one chunk
        here, where the simulated hosts' ranks outnumber the machine's cores)."""
        how = self.args.hier_chunk_bytes
        if how == "default":
            return None
        if how == "pipelined":  # the chunks libddp chooses where a host has cores of its own
            return model.hier_chunk_bytes(ranks)
        return parse_bytes(how)

    @staticmethod
    def _strip_prefix(text: str) -> str:
        return "\n".join(re.sub(r"^\[[^\]]*\]\s?", "", line) for line in text.splitlines())

    def mpi(self, c: netsim.Cluster, hosts: int, per_host: int) -> dict:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(hosts * per_host),
               "-H", c.hosts_arg(per_host, hosts), "--mca", "plm_rsh_agent", c.rsh,
               "--mca", "btl", "tcp,vader,self", "--mca", "btl_tcp_if_include", "eth0",
               "--mca", "oob_tcp_if_include", "eth0", "--bind-to", "none",
               os.path.join(self.build, "ddp-mpi-bench"), *self.bench_args()]
        done = c.run(0, cmd, capture_output=True, text=True, timeout=self.args.limit)
        return parse_table(self._check("mpirun", done))

    def gloo_run(self, c: netsim.Cluster, hosts: int, per_host: int, backend: str = "gloo"
                 ) -> dict:
        """Gloo, or with backend "ddp" libddp's torch.distributed backend (impl c10d): the same
        script and calls (gloo_allreduce_bench.py), one process per rank started in its host."""
        n = hosts * per_host
        port = 20000 + secrets.randbelow(20000)
        procs = []
        for rank in range(n):
            env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(n),
                   "MASTER_ADDR": c.addresses[0], "MASTER_PORT": str(port),
                   "GLOO_SOCKET_IFNAME": "eth0"}
            procs.append(c.popen(rank // per_host, [self.python(backend), self.gloo,
                                                    "--backend", backend, *self.bench_args()],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True))
        outs = []
        deadline = time.monotonic() + self.args.limit
        for p in procs:
            try:
                out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise RuntimeError(f"{backend}: timed out")
            outs.append((p.returncode, out, err))
        for code, out, err in outs:
            if code != 0:
                raise RuntimeError(f"{backend} rank exited {code}: {err[-1500:]}")
        return parse_table(outs[0][1])

    def python(self, backend: str) -> str:
        """ddp.torch lives in .venv (make build); Gloo needs torch alone."""
        venv = os.path.join(ROOT, ".venv", "bin", "python")
        return venv if backend == "ddp" and os.path.exists(venv) else sys.executable

    def ceiling(self, c: netsim.Cluster, hosts: int, per_host: int, size: int) -> float:
        """Seconds for the ring's cross-host traffic alone: with the ranks of a host adjacent
        in the ring, one stream per host to the next carries 2(N-1)/N x size; here one process
        per host streams that much to the next host while reading as much from the last."""
        n = hosts * per_host
        # Four allreduces' worth in one stream: one alone would mostly measure TCP's slow start.
        rounds = 4
        moved = int(2 * (n - 1) / n * size) * rounds
        base = 21000 + secrets.randbelow(20000)
        addr = [f"{c.addresses[h]}:{base + h}" for h in range(hosts)]
        procs = [c.popen(h, [os.path.join(self.build, "ddp-tcp-ceiling"), "--ring-listen",
                             addr[h], "--ring-next", addr[(h + 1) % hosts], "--bytes", str(moved)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for h in range(hosts)]
        worst = 0.0
        for p in procs:
            out, err = p.communicate(timeout=self.args.limit)
            m = re.search(r"ring_seconds=([0-9.]+)", out)
            if p.returncode != 0 or not m:
                raise RuntimeError(f"ddp-tcp-ceiling failed: {err[-500:]}")
            worst = max(worst, float(m.group(1)))
        return worst / rounds


def machine() -> dict:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"host": socket.gethostname(), "cpu": cpu, "cores": os.cpu_count(),
            "kernel": platform.release()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", default="2,4,8", help="host counts (default 2,4,8)")
    p.add_argument("--per-host", default="1,2", help="ranks per host (default 1,2)")
    p.add_argument("--rates", default="1gbit,4gbit,10gbit", help="link rates, tc's syntax")
    p.add_argument("--sizes", default="1M,16M,64M", help="allreduce sizes (f32 bytes)")
    p.add_argument("--mtu", type=int, help="every link's MTU (default: veth's 1500; AWS's VPC "
                   "networks use 9001)")
    p.add_argument("--impls", default=",".join(IMPLS),
                   help=f"of {','.join(IMPLS)}, and ceiling (ddp-tcp-ceiling: measured at 10 "
                        f"Gbit/s and more anyway)")
    p.add_argument("--hier-chunk-bytes", default="default",
                   help="the hierarchical allreduce's chunks: 'default' (libddp's choice: one "
                        "chunk here, where ranks outnumber cores), 'pipelined' (the chunks it "
                        "chooses where hosts have cores of their own) or a size (0: one chunk)")
    p.add_argument("-w", dest="warmup", type=int, default=1)
    p.add_argument("-n", dest="iters", type=int, default=3)
    p.add_argument("-r", dest="repeats", type=int, default=3)
    p.add_argument("--build", default="build", help="the CMake build folder (default build)")
    p.add_argument("--ddprun", help="ddprun to use (default .venv/bin/ddprun)")
    p.add_argument("--limit", type=float, default=600, help="seconds one run may take")
    p.add_argument("--out", help="JSON file (default benchmarks/results/scaling-<date>.json)")
    p.add_argument("--report", action="store_true",
                   help="then write the markdown table and the plot beside the JSON")
    args = p.parse_args(argv)
    args.sizes = sorted(parse_bytes(s) for s in args.sizes.split(","))
    impls = args.impls.split(",")
    unknown = set(impls) - set(IMPLS) - {"ceiling"}
    if unknown:
        p.error(f"unknown --impls {','.join(sorted(unknown))}")
    why = netsim.available()
    if why:
        print(f"scaling: {why}", file=sys.stderr)
        return 77
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S")
    out = args.out or os.path.join(ROOT, "benchmarks", "results", f"scaling-{stamp}.json")
    runner = Runner(args)
    result = {"date": stamp, "machine": machine(), "command": " ".join(sys.argv),
              "sizes": args.sizes, "mtu": args.mtu or 1500,
              "frame_efficiency": netsim.frame_efficiency(args.mtu), "points": []}

    def save():
        with open(out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)

    for rate_text in args.rates.split(","):
        rate = rate_bits(rate_text)
        for hosts in (int(h) for h in args.hosts.split(",")):
            with netsim.Cluster(hosts, rate=rate_text, mtu=args.mtu) as cluster:
                for per_host in (int(x) for x in args.per_host.split(",")):
                    todo = [i for i in impls if not (i == "hier" and per_host == 1)]
                    if rate >= 10e9 and "ceiling" not in todo:
                        todo.append("ceiling")
                    for impl in todo:
                        t0 = time.monotonic()
                        try:
                            if impl in ("ring", "hier"):
                                times = runner.libddp(cluster, hosts, per_host, impl)
                            elif impl == "mpi":
                                times = runner.mpi(cluster, hosts, per_host)
                            elif impl == "gloo":
                                times = runner.gloo_run(cluster, hosts, per_host)
                            elif impl == "c10d":
                                times = runner.gloo_run(cluster, hosts, per_host, "ddp")
                            else:
                                times = {s: runner.ceiling(cluster, hosts, per_host, s)
                                         for s in args.sizes if s >= 16 << 20}
                        except (RuntimeError, subprocess.TimeoutExpired) as e:
                            print(f"scaling: {impl} H={hosts} L={per_host} {rate_text}: {e}",
                                  file=sys.stderr, flush=True)
                            result["points"].append({"rate": rate, "hosts": hosts,
                                                     "per_host": per_host, "impl": impl,
                                                     "error": str(e)[-400:]})
                            save()
                            continue
                        for size, seconds in sorted(times.items()):
                            bound = model.bound("hier" if impl == "hier" else "ring", size,
                                                hosts, per_host, rate)
                            result["points"].append({
                                "rate": rate, "hosts": hosts, "per_host": per_host, "impl": impl,
                                "bytes": size, "seconds": seconds, "bound_seconds": bound,
                                "of_bound": bound / seconds if seconds > 0 else None})
                            if impl == "hier":  # for the model: -1, libddp's default
                                chunk = runner.hier_chunk_bytes(hosts * per_host)
                                result["points"][-1]["hier_chunk_bytes"] = (
                                    -1 if chunk is None else chunk)
                        big = max(times) if times else 0
                        frac = (result["points"][-1]["of_bound"] or 0) if times else 0
                        print(f"scaling: {rate_text} H={hosts} L={per_host} {impl:7s} "
                              f"{big >> 20} MiB: {times.get(big, 0) * 1e3:9.1f} ms "
                              f"({frac:.0%} of its bound) [{time.monotonic() - t0:.0f} s]",
                              file=sys.stderr, flush=True)
                        save()
    save()
    print(f"scaling: saved {out}", file=sys.stderr)
    if args.report:
        import scaling_report
        scaling_report.main([out])
    return 0


if __name__ == "__main__":
    sys.exit(main())
