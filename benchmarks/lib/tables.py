#!/usr/bin/python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Reads the nccl-tests-style tables of ddp-bench, ddp-mpi-bench and gloo_allreduce_bench.py and
builds the markdown comparison that benchmarks/collectives/compare_tcp prints.

Rows are `size count type redop time_us algbw busbw #wrong`; lines starting with '#' are comments.
"""

import argparse
import os
import statistics
import sys

PEERS = (("mpi", "MPI tcp busbw"), ("gloo", "Gloo busbw"))
LATENCY_BYTES = 4096


def parse_table(path):
    """{size: (time_us, busbw)} from one benchmark output; rows with #wrong != 0 are refused."""
    rows = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if not fields or fields[0].startswith("#") or len(fields) != 8:
                continue
            try:
                size, time_us, busbw = int(fields[0]), float(fields[4]), float(fields[6])
            except ValueError:
                continue
            if fields[7] not in ("0", "N/A"):
                raise SystemExit(f"{path}: {fields[7]} wrong elements at {size} bytes")
            rows[size] = (time_us, busbw)
    return rows


def merge_runs(paths):
    """Median, per size, of time and busbw over repeated runs of one benchmark."""
    runs = [parse_table(p) for p in paths if os.path.exists(p)]
    sizes = sorted(set().union(*runs)) if runs else []
    merged = {}
    for size in sizes:
        values = [r[size] for r in runs if size in r]
        merged[size] = (statistics.median(v[0] for v in values),
                        statistics.median(v[1] for v in values))
    return merged


def human_bytes(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def ratio(a, b):
    return f"{a / b:.2f}" if a is not None and b else "-"


def fmt(value, spec):
    return format(value, spec) if value is not None else "-"


def compare(raw_dir, ranks, runs):
    lines = ["| ranks | size | ddp busbw GB/s | ddp time us | MPI tcp busbw | Gloo busbw "
             "| ddp/MPI | ddp/Gloo |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    latency = []
    for n in ranks:
        tables = {lib: merge_runs([os.path.join(raw_dir, f"{lib}-{n}-{r}.txt")
                                   for r in range(1, runs + 1)])
                  for lib in ("ddp",) + tuple(p[0] for p in PEERS)}
        sizes = sorted(set().union(*tables.values()))
        for size in sizes:
            ddp_time, ddp_bw = tables["ddp"].get(size, (None, None))
            peer_bw = [tables[lib].get(size, (None, None))[1] for lib, _ in PEERS]
            lines.append(f"| {n} | {human_bytes(size)} | {fmt(ddp_bw, '.3f')} "
                         f"| {fmt(ddp_time, '.1f')} | {fmt(peer_bw[0], '.3f')} "
                         f"| {fmt(peer_bw[1], '.3f')} | {ratio(ddp_bw, peer_bw[0])} "
                         f"| {ratio(ddp_bw, peer_bw[1])} |")
        ddp_t = tables["ddp"].get(LATENCY_BYTES, (None, None))[0]
        mpi_t = tables["mpi"].get(LATENCY_BYTES, (None, None))[0]
        latency.append(f"- {n} ranks: ddp/MPI time at {human_bytes(LATENCY_BYTES)} = "
                       f"{ratio(ddp_t, mpi_t)} (ddp {fmt(ddp_t, '.1f')} us, "
                       f"MPI {fmt(mpi_t, '.1f')} us; lower is better for ddp)")
    return "\n".join(lines) + "\n\nLatency (ddp/MPI time ratio at 4 KiB):\n\n" + \
        "\n".join(latency) + "\n"


TRANSPORTS = (("tcp", "tcp"), ("ofi_rxm", "ofi tcp;ofi_rxm"), ("ofi_shm", "ofi shm"),
              ("mpi", "mpi"))


def transports(raw_dir, ranks, runs):
    """The compare_transports table: ddp's allreduce over each transport, ratios against tcp."""
    head = " | ".join(f"{label} busbw" for _, label in TRANSPORTS)
    ratios = " | ".join(f"{label}/tcp" for _, label in TRANSPORTS[1:])
    lines = [f"| ranks | size | {head} | {ratios} |",
             "|---:|---:|" + "---:|" * (2 * len(TRANSPORTS) - 1)]
    latency = []
    for n in ranks:
        tables = {name: merge_runs([os.path.join(raw_dir, f"{name}-{n}-{r}.txt")
                                    for r in range(1, runs + 1)])
                  for name, _ in TRANSPORTS}
        sizes = sorted(set().union(*tables.values()))
        for size in sizes:
            bw = [tables[name].get(size, (None, None))[1] for name, _ in TRANSPORTS]
            cells = " | ".join(fmt(b, ".3f") for b in bw)
            rel = " | ".join(ratio(b, bw[0]) for b in bw[1:])
            lines.append(f"| {n} | {human_bytes(size)} | {cells} | {rel} |")
        times = [tables[name].get(LATENCY_BYTES, (None, None))[0] for name, _ in TRANSPORTS]
        latency.append(f"- {n} ranks: " + ", ".join(
            f"{label} {fmt(t, '.1f')} us" for (_, label), t in zip(TRANSPORTS, times)))
    return "\n".join(lines) + f"\n\nTime at {human_bytes(LATENCY_BYTES)}:\n\n" + \
        "\n".join(latency) + "\n"


LOCAL = (("ddp", "ddp"), ("mpi", "Open MPI"), ("gloo", "Gloo"), ("ceiling", "ceiling"))


def local(raw_dir, ranks, runs, plot=None):
    """The benchmarks/collectives/compare table: ddp, Open MPI, Gloo and the memory ceiling on one
    machine."""
    lines = ["| ranks | size | ddp busbw GB/s | ddp time us | Open MPI busbw | Gloo busbw "
             "| ceiling busbw | ddp/MPI | ddp/Gloo | ddp/ceiling |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    latency = []
    curves = {}
    for n in ranks:
        tables = {name: merge_runs([os.path.join(raw_dir, f"{name}-{n}-{r}.txt")
                                    for r in range(1, runs + 1)])
                  for name, _ in LOCAL}
        curves[n] = tables
        sizes = sorted(set().union(*tables.values()))
        for size in sizes:
            t, bw = tables["ddp"].get(size, (None, None))
            mpi, gloo, ceil = (tables[name].get(size, (None, None))[1]
                               for name in ("mpi", "gloo", "ceiling"))
            lines.append(f"| {n} | {human_bytes(size)} | {fmt(bw, '.3f')} | {fmt(t, '.1f')} "
                         f"| {fmt(mpi, '.3f')} | {fmt(gloo, '.3f')} | {fmt(ceil, '.3f')} "
                         f"| {ratio(bw, mpi)} | {ratio(bw, gloo)} | {ratio(bw, ceil)} |")
        times = {name: tables[name].get(LATENCY_BYTES, (None, None))[0]
                 for name in ("ddp", "mpi", "gloo")}
        latency.append(f"- {n} ranks: ddp {fmt(times['ddp'], '.1f')} us, Open MPI "
                       f"{fmt(times['mpi'], '.1f')} us, Gloo {fmt(times['gloo'], '.1f')} us "
                       f"(ddp/MPI time {ratio(times['ddp'], times['mpi'])}; lower is better)")
    if plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, len(ranks), figsize=(6 * len(ranks), 4.5), squeeze=False)
        for ax, n in zip(axes[0], ranks):
            for name, label in LOCAL:
                pts = sorted(curves[n][name].items())
                if pts:
                    ax.plot([p[0] for p in pts], [p[1][1] for p in pts], marker="o",
                            linestyle="--" if name == "ceiling" else "-", label=label)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("allreduce size (bytes, f32)")
            ax.set_ylabel("busbw (GB/s)")
            ax.set_title(f"{n} ranks, one machine")
            ax.grid(True, alpha=0.3)
            ax.legend()
        fig.tight_layout()
        fig.savefig(plot, dpi=110)
    return "\n".join(lines) + f"\n\nTime at {human_bytes(LATENCY_BYTES)}:\n\n" + \
        "\n".join(latency) + "\n"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compare", help="the compare_tcp table from RAW/{ddp,mpi,gloo}-N-RUN.txt")
    c.add_argument("--raw", required=True, help="folder of raw outputs")
    c.add_argument("--ranks", type=int, nargs="+", required=True)
    c.add_argument("--runs", type=int, default=1)
    t = sub.add_parser("transports", help="the compare_transports table from "
                       "RAW/{tcp,ofi_rxm,ofi_shm,mpi}-N-RUN.txt")
    t.add_argument("--raw", required=True, help="folder of raw outputs")
    t.add_argument("--ranks", type=int, nargs="+", required=True)
    t.add_argument("--runs", type=int, default=1)
    lo = sub.add_parser("local", help="the benchmarks/collectives/compare table from "
                        "RAW/{ddp,mpi,gloo,ceiling}-N-RUN.txt")
    lo.add_argument("--raw", required=True, help="folder of raw outputs")
    lo.add_argument("--ranks", type=int, nargs="+", required=True)
    lo.add_argument("--runs", type=int, default=1)
    lo.add_argument("--plot", help="also write a PNG plot of busbw against size here")
    s = sub.add_parser("show", help="size, time and busbw of one output, for a quick look")
    s.add_argument("file")
    args = p.parse_args(argv)
    if args.command == "compare":
        sys.stdout.write(compare(args.raw, args.ranks, args.runs))
    elif args.command == "local":
        sys.stdout.write(local(args.raw, args.ranks, args.runs, args.plot))
    elif args.command == "transports":
        sys.stdout.write(transports(args.raw, args.ranks, args.runs))
    else:
        for size, (time_us, busbw) in sorted(parse_table(args.file).items()):
            print(f"{human_bytes(size):>10}  {time_us:12.2f} us  {busbw:8.3f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
