# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""`ddp-model fit` and `ddp-model predict` (and `python -m ddp_model`), and the plot of
predicted against measured times."""
from __future__ import annotations

import argparse
import json
import math
import sys

from .fitting import aggregate, configuration, errors, fit, load_points
from .formulas import Params, bound, predict
from .units import ALGOS, DEFAULT_MTU, frame_share, parse_bytes, parse_rate

def plot(rows, path: str) -> None:
    import matplotlib  # lazy: plotting alone needs it
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: after the backend is chosen
    fig, ax = plt.subplots(figsize=(6.4, 5.6))
    colors = {1e9: "tab:blue", 4e9: "tab:orange", 10e9: "tab:red"}
    for impl, marker in (("ring", "o"), ("hier", "s")):
        for rate, color in colors.items():
            sel = [(pt["seconds"] * 1e3, t * 1e3) for pt, t, _ in rows
                   if pt["impl"] == impl and abs(pt["rate"] - rate) < 1]
            if sel:
                ax.scatter(*zip(*sel), marker=marker, color=color, s=22,
                           label=f"{impl} {rate / 1e9:g} Gbit/s")
    lo = min(min(pt["seconds"], t) for pt, t, _ in rows) * 1e3 * 0.8
    hi = max(max(pt["seconds"], t) for pt, t, _ in rows) * 1e3 * 1.25
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    ax.fill_between([lo, hi], [lo * 0.85, hi * 0.85], [lo * 1.15, hi * 1.15], color="0.9",
                    label="within 15%")
    ax.set(xscale="log", yscale="log", xlabel="measured (ms)", ylabel="predicted (ms)",
           title="libddp allreduce: cost model against the netsim harness")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ---- commands -----------------------------------------------------------------------------

def cmd_fit(args) -> int:
    runs, cores = load_points(args.results, min_bytes=args.min_bytes)
    if args.cores:
        cores = args.cores
    # Runs of one configuration (in several files) count once, as their median: the fit weighs
    # every configuration alike, and the check is against the figure a rerun would reproduce.
    points = aggregate(runs, cores)
    if len(points) < 3:
        print("ddp-model: fewer than 3 measured configurations of ring or hier", file=sys.stderr)
        return 1
    p = fit(points, cores)
    rows = errors(p, points, cores)
    print(f"# fitted on {len(points)} configurations ({len(runs)} runs; ring, hier; "
          f">= {args.min_bytes} bytes; {cores} cores shared by the simulated hosts)\n# {p}")
    print(f"# {'algo':5s} {'rate':>6s} {'mtu':>5s} {'H':>2s} {'L':>2s} {'bytes':>9s} "
          f"{'measured ms':>12s} {'runs':>4s} {'spread':>6s} {'predicted ms':>13s} {'error':>7s}")
    for pt, t, err in sorted(rows, key=lambda r: configuration(r[0], cores)):
        print(f"  {pt['impl']:5s} {pt['rate'] / 1e9:5g}G {pt.get('mtu', DEFAULT_MTU):5d} "
              f"{pt['hosts']:2d} {pt['per_host']:2d} "
              f"{pt['bytes']:9d} {pt['seconds'] * 1e3:12.2f} {pt['runs']:4d} "
              f"{pt['spread']:5.2f}x {t * 1e3:13.2f} {err:+7.1%}")
    worst = max(abs(e) for _, _, e in rows)
    within = sum(abs(e) <= 0.15 for _, _, e in rows)
    # Runs further apart than 1.15/0.85 cannot all lie within 15% of any one prediction.
    scattered = sum(pt["spread"] > 1.15 / 0.85 for pt, _, _ in rows)
    print(f"# largest error {worst:.1%}; {within} of {len(rows)} configurations within 15%"
          + (f"; the runs of {scattered} configurations differ by more than 1.35x"
             if scattered else ""))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({**p.as_dict(), "fitted_on": args.results, "cores": cores,
                       "configurations": len(points), "runs": len(runs),
                       "largest_error": worst}, f, indent=1)
    if args.plot:
        plot(rows, args.plot)
    return 0


def cmd_predict(args) -> int:
    if args.params:
        with open(args.params, encoding="utf-8") as f:
            p = Params.from_dict(json.load(f))
    else:
        p = Params(args.alpha * 1e-6, args.eta, args.gamma * 1e-9)
    for name, value in (("alpha", args.alpha), ("eta", args.eta), ("gamma", args.gamma)):
        if args.params and getattr(args, f"set_{name}"):
            setattr(p, name, value * {"alpha": 1e-6, "eta": 1, "gamma": 1e-9}[name])
    rate = parse_rate(args.link)
    intra = parse_rate(args.intra_link) if args.intra_link else None
    cores = None if args.gpu else args.cores_per_host
    ranks = [int(r) for r in args.ranks.split(",")]
    sizes = [parse_bytes(s) for s in args.bytes.split(",")]
    print(f"# {p}\n# links {rate / 1e9:g} Gbit/s of MTU {args.mtu} ({frame_share(args.mtu):.1%} "
          f"of it for TCP payload), {args.per_host} ranks per host, "
          + ("reduction on the GPU (no CPU roof)" if cores is None
             else f"{cores:g} cores per host")
          + (f", {intra / 1e9:g} Gbit/s within a host" if intra else ""))
    print(f"# {'ranks':>6s} {'bytes':>12s} " + " ".join(f"{a + ' ms':>11s}" for a in args.algos)
          + "   fastest (its busbw in GB/s; share of its own link bound)")
    for n in ranks:
        if n % args.per_host:
            print(f"ddp-model: {n} ranks is not a multiple of {args.per_host} per host",
                  file=sys.stderr)
            return 2
        hosts = n // args.per_host
        for size in sizes:
            times = {a: predict(p, a, size, hosts, args.per_host, rate, cores, intra,
                                chunk_bytes=args.hier_chunk_bytes, mtu=args.mtu)
                     for a in args.algos}
            best = min(times, key=lambda a: times[a])
            t = times[best]
            busbw = 2 * (n - 1) / n * size / t / 1e9 if t > 0 else math.inf
            share = bound(best, size, hosts, args.per_host, rate) / t if t > 0 else 1
            print(f"  {n:6d} {size:12d} " + " ".join(f"{times[a] * 1e3:11.3f}" for a in args.algos)
                  + f"   {best} ({busbw:.2f}, {share:.0%})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ddp-model", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fit", help="fit alpha, eta, gamma to harness results and check them")
    f.add_argument("results", nargs="+", help="scaling-*.json from benchmarks/netsim/scaling.py")
    f.add_argument("--min-bytes", type=parse_bytes, default=1 << 20,
                   help="ignore smaller allreduces (default 1M)")
    f.add_argument("--cores", type=int, help="cores of the machine that ran the harness")
    f.add_argument("--out", help="write the parameters here (JSON), for predict --params")
    f.add_argument("--plot", help="predicted against measured (PNG; needs matplotlib)")
    f.set_defaults(run=cmd_fit)
    p = sub.add_parser("predict", help="allreduce time for given ranks, sizes and links")
    p.add_argument("--params", help="parameters from fit --out (else --alpha, --eta, --gamma)")
    p.add_argument("--alpha", type=float, default=20.0, help="microseconds per step")
    p.add_argument("--eta", type=float, default=0.95, help="share of the link's rate after framing")
    p.add_argument("--gamma", type=float, default=0.3, help="ns of CPU per byte across hosts")
    p.add_argument("--ranks", default="8,64,128,512,1024", help="rank counts (comma-separated)")
    p.add_argument("--per-host", type=int, default=8, help="ranks per host (default 8)")
    p.add_argument("--link", default="400gbit", help="each host's link, each direction")
    p.add_argument("--mtu", type=int, default=DEFAULT_MTU,
                   help="the links' MTU (default 1500; 9001 in AWS's VPCs)")
    p.add_argument("--bytes", default="1M,64M,1G", help="allreduce sizes")
    p.add_argument("--algos", type=lambda s: s.split(","), default=list(ALGOS),
                   help="of ring,rd,hier")
    p.add_argument("--gpu", action="store_true", help="reduce on the GPU: no CPU roof")
    p.add_argument("--intra-link", help="rate between the ranks of a host (NVLink: 2400gbit)")
    p.add_argument("--cores-per-host", type=float, default=32.0)
    p.add_argument("--hier-chunk-bytes", type=parse_bytes, default=None,
                   help="DDP_HIER_CHUNK_BYTES for the hierarchical allreduce (0: one chunk; "
                        "default: libddp's choice)")
    p.set_defaults(run=cmd_predict)
    args = parser.parse_args(argv)
    if args.command == "predict":
        raw = argv if argv is not None else sys.argv[1:]
        for name in ("alpha", "eta", "gamma"):
            setattr(args, f"set_{name}", any(a.startswith(f"--{name}") for a in raw))
        bad = set(args.algos) - set(ALGOS)
        if bad:
            parser.error(f"unknown --algos {','.join(sorted(bad))}")
    return args.run(args)
