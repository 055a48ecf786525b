"""The allreduce cost model: alpha-beta-gamma, with the CPU as a second roof.

    ddp-model fit benchmarks/results/scaling-DATE.json --plot fit.png --out params.json
    ddp-model predict --params params.json --ranks 1024 --per-host 8 --link 400gbit \\
        --bytes 64M,1G --gpu
    python -m ddp_model ...        (the same; also runs as a plain script, without libddp built)

An allreduce of K bytes over N = H x L ranks (H hosts, L ranks per host, links of B bit/s in each
direction) costs the steps it takes times alpha (one message's latency and software overhead),
plus the larger of two times: the bytes on the busiest link at eta x f x B (f: the share of the
link's rate that TCP payload can have at the link's MTU, (MTU - 52) / (MTU + 14): 95.6% at 1500,
99.3% at 9001, AWS's; eta: the share of that the transfer reaches, after acknowledgements, the
congestion window and the gaps between messages), and the work of
the host's processes spread over its P cores: gamma seconds per byte a rank sends across hosts
(copies, the kernel's TCP, the reduction), gamma_l per byte it moves within the host (shared
memory). With more ranks on a host than cores, a step also waits for its sender to be scheduled,
and the more ranks contend for each core the longer: alpha counts (L/P)^k times, k fitted
(the crowding exponent). On GPUs (--gpu) the reduction and the copies run on the device and the CPU
roof is left out; --intra-link gives the rate between the GPUs of a host (NVLink).

    ring          2(N-1) alpha + max(2(N-1)/N K / (eta f B),
                                     2(N-1)/N K (gamma + (L-1) gamma_l) / P)
                    (the ranks of a host adjacent in the ring: one of its L edges crosses)
    recursive     log2(N) alpha + max(log2(H) L K / (eta f B),
      doubling                      L K (log2(H) gamma + log2(L) gamma_l) / P)
                    (every step exchanges the whole buffer; L ranks of a host share its link)
    hierarchical  (C 2(H-1) + 2(L-1)) alpha + W / C
                    + max(2(H-1)/H K / (eta f B), (2(H-1)/H K gamma + (C-1)/C W_cpu) / P)
                    (reduce-scatter within the host, L rings across hosts on K/L each, then
                    all-gather within the host, in C chunks as a pipeline: the phases within
                    the host of every chunk but the first's reduce-scatter and the last's
                    all-gather overlap the phase across hosts, on the same cores. By default
                    C = 1 where ranks outnumber cores (L > P), and C 2(H-1) <= 256, as
                    libddp chooses.
                    W = 2(L-1) K gamma_l / P, the phases within the host (on NVLink, the larger
                    of that and 2(L-1)/L K over its rate); W_cpu its CPU part; C as libddp
                    chooses it, hier_chunks below)

In the network-namespace cluster (benchmarks/netsim) all hosts share one machine's cores, so the
fit uses P = cores / H. `fit` finds alpha, eta, gamma and gamma_l from the harness's measurements
(benchmarks/netsim/scaling.py, each file's links at the MTU it records) by least squares on the
log of the time, prints the prediction
error at every measured configuration (the median of its runs where several files measured it,
with their spread) and can plot predicted against measured. The parameter server is not
modelled yet: it does not exist yet.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys

ALGOS = ("ring", "rd", "hier")
DEFAULT_MTU = 1500
UNITS = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}


def parse_bytes(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMGT]?)(I?B)?", text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (say 64M, 1G)")
    return int(m.group(1)) << UNITS[m.group(2)]


def parse_rate(text: str) -> float:
    """Bits per second from 400gbit, 25gbit, 1e9."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]?)bit", text.strip().lower())
    if m:
        return float(m.group(1)) * 1000 ** "_kmgt".index(m.group(2) or "_")
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad rate {text!r} (say 400gbit)") from None


def frame_share(mtu: int | None = None) -> float:
    """The most of a link's rate that TCP payload can have at this MTU (None: 1500): a frame
    carries MTU - 52 bytes of it (IPv4 and TCP headers, the timestamps option) and takes MTU + 14
    of the link (its Ethernet header). 1500: 95.6%; 9001: 99.3%."""
    mtu = mtu or DEFAULT_MTU
    return (mtu - 52) / (mtu + 14)


class Params:
    def __init__(self, alpha: float, eta: float, gamma: float, gamma_local: float | None = None,
                 crowding: float = 1.0):
        self.alpha, self.eta, self.gamma = alpha, eta, gamma
        self.gamma_local = gamma if gamma_local is None else gamma_local
        self.crowding = crowding  # k: a step costs alpha (ranks per core)^k where they crowd

    def as_dict(self) -> dict:
        return {"alpha_seconds": self.alpha, "eta": self.eta, "eta_after_framing": True,
                "gamma_seconds_per_byte": self.gamma,
                "gamma_local_seconds_per_byte": self.gamma_local,
                "crowding_exponent": self.crowding}

    @staticmethod
    def from_dict(d: dict) -> "Params":
        eta = d["eta"]
        if not d.get("eta_after_framing"):
            # Saved before the framing term (2026-11-27), from links of MTU 1500: eta was the
            # share of the whole rate, framing included.
            eta = min(1.0, eta / frame_share(DEFAULT_MTU))
        return Params(d["alpha_seconds"], eta, d["gamma_seconds_per_byte"],
                      d.get("gamma_local_seconds_per_byte"), d.get("crowding_exponent", 1.0))

    def link(self, rate: float, mtu: int | None = None) -> float:
        """Payload bytes per second on one link of RATE bit/s at MTU, each direction."""
        return self.eta * frame_share(mtu) * rate / 8

    def __str__(self) -> str:
        def rate(g):
            return f"{1 / g / 1e9:.2f} GB/s" if g > 0 else "free"
        return (f"alpha = {self.alpha * 1e6:.1f} us per step, eta = {self.eta:.3f} of the "
                f"link's rate after framing, "
                f"gamma = {self.gamma * 1e9:.3f} ns per byte across hosts ({rate(self.gamma)} "
                f"per core), {self.gamma_local * 1e9:.3f} ns per byte within a host "
                f"({rate(self.gamma_local)} per core), crowding exponent k = {self.crowding:.2f}")


def predict(p: Params, algo: str, size: float, hosts: int, per_host: int, rate: float,
            cores_per_host: float | None, intra_rate: float | None = None,
            chunk_bytes: float | None = None, mtu: int | None = None) -> float:
    """Seconds for one allreduce of SIZE bytes; cores_per_host None: no CPU roof (GPUs);
    intra_rate: bit/s between the ranks of a host (NVLink), None: only the CPU roof counts;
    chunk_bytes: DDP_HIER_CHUNK_BYTES (None: libddp's default); mtu: the links' (None: 1500)."""
    n = hosts * per_host
    if n <= 1:
        return 0.0
    link = p.link(rate, mtu)  # payload bytes per second on one link, each direction
    # More ranks than cores: a step waits for its sender to be scheduled, longer the more ranks
    # contend for each core.
    crowd = max(1.0, per_host / cores_per_host) if cores_per_host else 1.0
    alpha = p.alpha * crowd ** p.crowding
    g, gl = p.gamma, p.gamma_local
    local_phase = 0.0
    if algo == "ring":
        # Host-adjacent ranks: one of a host's L edges crosses to the next host.
        steps, net = 2 * (n - 1), 2 * (n - 1) / n * size
        work = 2 * (n - 1) / n * size * (g + (per_host - 1) * gl)
        if intra_rate and per_host > 1:  # the edges within a host carry as much
            net = max(net, 2 * (n - 1) / n * size * link / (intra_rate / 8))
    elif algo == "rd":
        steps = math.log2(n)
        net = math.log2(hosts) * per_host * size if hosts > 1 else 0.0
        work = per_host * size * (math.log2(hosts) * g + math.log2(per_host) * gl)
    elif algo == "hier":
        # Reduce-scatter within the host, L rings across hosts on K/L each, all-gather within,
        # in C chunks as a pipeline: only the first chunk's reduce-scatter and the last one's
        # all-gather are not overlapped by the phase across hosts; the rest share its cores.
        chunks = hier_chunks(size, n, chunk_bytes, hosts, crowded=crowd > 1)
        steps = chunks * 2 * (hosts - 1) + 2 * (per_host - 1)
        net = 2 * (hosts - 1) / hosts * size
        work = 2 * (hosts - 1) / hosts * size * g
        if per_host > 1:
            local_phase = (2 * (per_host - 1) / per_host * size / (intra_rate / 8) if intra_rate
                           else 0.0)
            if cores_per_host:
                local_cpu = 2 * (per_host - 1) * size * gl
                local_phase = max(local_phase, local_cpu / cores_per_host)
                work += (chunks - 1) / chunks * local_cpu
            local_phase /= chunks
    else:
        raise ValueError(f"unknown algorithm {algo!r}")
    cpu = work / cores_per_host if cores_per_host else 0.0
    return steps * alpha + max(net / link, cpu) + local_phase


def hier_chunk_bytes(ranks: int) -> int:
    """libddp's default chunk of the hierarchical allreduce: at least 4 MiB and 512 KiB per rank
    (collectives/allreduce.cc), where no machine has more ranks than cores."""
    return max(4 << 20, ranks * (512 << 10))


def hier_chunks(size: float, ranks: int, chunk_bytes: float | None = None,
                hosts: int = 2, crowded: bool = False) -> int:
    """The chunks of libddp's hierarchical allreduce: of DDP_HIER_CHUNK_BYTES (None: the
    default, hier_chunk_bytes, and at most 256 steps across the HOSTS in all; one chunk where
    ranks outnumber cores, CROWDED); 1 to 64."""
    limit = 64
    if chunk_bytes is None and crowded:
        return 1
    if chunk_bytes is None:
        chunk_bytes = hier_chunk_bytes(ranks)
        limit = min(limit, 256 // (2 * max(hosts - 1, 1)))
    if chunk_bytes <= 0:
        return 1
    return int(max(min(size // chunk_bytes, limit), 1))


def bound(algo: str, size: float, hosts: int, per_host: int, rate: float) -> float:
    """The bandwidth bound the harness reports against: links at full rate, nothing else."""
    n = hosts * per_host
    if algo == "hier":
        return 2 * (hosts - 1) / hosts * size / (rate / 8)
    return 2 * (n - 1) / n * size / (rate / 8)


def ps_bound(size: float, workers: int, servers: int, rate: float) -> float:
    """The parameter server's bandwidth bound for one push and pull of SIZE bytes per worker.

    With SERVERS hosts of their own (servers > 0), each worker's link carries SIZE each way and
    each server's workers x SIZE / servers: max(M/B, nM/(kB)). Colocated (servers == 0: every
    worker also serves a 1/n share), a host sends the (n-1)/n of its push that other hosts serve
    and answers the other n-1 workers' pulls of its share: 2(n-1)/n x M each way, the ring's
    bound, which is why colocated servers cannot beat the ring."""
    if servers <= 0:
        return 2 * (workers - 1) / workers * size / (rate / 8)
    return max(size, workers * size / servers) / (rate / 8)


# ---- fitting ------------------------------------------------------------------------------

def load_points(paths: list[str], impls=("ring", "hier"), min_bytes: int = 1 << 20):
    points, cores = [], None
    for path in paths:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        cores = cores or data.get("machine", {}).get("cores")
        for pt in data["points"]:
            if "seconds" in pt and pt["impl"] in impls and pt["bytes"] >= min_bytes:
                points.append({**pt, "mtu": pt.get("mtu", data.get("mtu") or DEFAULT_MTU)})
    return points, cores or 2


def _nelder_mead(f, x0: list[float], steps: list[float], iters: int = 4000) -> list[float]:
    simplex = [list(x0)] + [[x + (s if i == j else 0) for j, x in enumerate(x0)]
                            for i, s in enumerate(steps)]
    values = [f(x) for x in simplex]
    for _ in range(iters):
        order = sorted(range(len(simplex)), key=values.__getitem__)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if abs(values[-1] - values[0]) < 1e-12:
            break
        centroid = [sum(x[j] for x in simplex[:-1]) / (len(simplex) - 1) for j in range(len(x0))]
        worst = simplex[-1]
        reflect = [c + (c - w) for c, w in zip(centroid, worst)]
        fr = f(reflect)
        if fr < values[0]:
            expand = [c + 2 * (c - w) for c, w in zip(centroid, worst)]
            fe = f(expand)
            simplex[-1], values[-1] = (expand, fe) if fe < fr else (reflect, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflect, fr
        else:
            contract = [c + 0.5 * (w - c) for c, w in zip(centroid, worst)]
            fc = f(contract)
            if fc < values[-1]:
                simplex[-1], values[-1] = contract, fc
            else:
                best = simplex[0]
                simplex = [best] + [[b + 0.5 * (x - b) for b, x in zip(best, pt)]
                                    for pt in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    return simplex[min(range(len(simplex)), key=values.__getitem__)]


def _chunk_bytes(pt: dict) -> float | None:
    """DDP_HIER_CHUNK_BYTES of a measured point: -1 libddp's default; absent, a point from
    before the pipeline (2026-11-26), which ran in one chunk."""
    chunk = pt.get("hier_chunk_bytes", 0)
    return None if chunk == -1 else chunk


def _sim_cores(pt: dict, cores: int) -> float:
    return cores / pt["hosts"]


def configuration(pt: dict, cores: int) -> tuple:
    """What a point measured: algorithm, link (rate and MTU), hosts, ranks per host, size and,
    for the hierarchical allreduce, its chunks. Runs of one configuration are repeats."""
    chunks = 0
    if pt["impl"] == "hier":
        chunks = hier_chunks(pt["bytes"], pt["hosts"] * pt["per_host"], _chunk_bytes(pt),
                             pt["hosts"], crowded=pt["per_host"] > _sim_cores(pt, cores))
    return (pt["impl"], pt["rate"], pt.get("mtu", DEFAULT_MTU), pt["hosts"], pt["per_host"],
            pt["bytes"], chunks)


def aggregate(points: list[dict], cores: int) -> list[dict]:
    """One point per configuration: the median of its runs (each run itself a median of
    repeats, scaling.py), with `runs` and `spread` (slowest over fastest run)."""
    groups: dict[tuple, list[dict]] = {}
    for pt in points:
        groups.setdefault(configuration(pt, cores), []).append(pt)
    out = []
    for runs in groups.values():
        times = sorted(pt["seconds"] for pt in runs)
        mid = len(times) // 2
        median = times[mid] if len(times) % 2 else (times[mid - 1] + times[mid]) / 2
        out.append({**runs[0], "seconds": median, "runs": len(times),
                    "spread": times[-1] / times[0]})
    return out


def fit(points: list[dict], cores: int) -> Params:
    def unpack(x):  # log-space keeps every parameter positive; eta in (0, 1]
        return Params(math.exp(x[0]), 1 / (1 + math.exp(-x[1])), math.exp(x[2]), math.exp(x[3]),
                      math.exp(x[4]))

    def loss(x):
        p = unpack(x)
        total = 0.0
        for pt in points:
            t = predict(p, pt["impl"], pt["bytes"], pt["hosts"], pt["per_host"], pt["rate"],
                        _sim_cores(pt, cores), chunk_bytes=_chunk_bytes(pt), mtu=pt.get("mtu"))
            total += math.log(t / pt["seconds"]) ** 2
        return total

    best = None
    for a0 in (1e-5, 1e-4, 1e-3):
        for g0 in (1e-10, 1e-9):
            x = _nelder_mead(loss, [math.log(a0), 3.0, math.log(g0), math.log(g0), 0.0],
                             [1.0, 1.0, 1.0, 1.0, 0.5])
            x = _nelder_mead(loss, x, [0.3, 0.3, 0.3, 0.3, 0.2])  # restarted: NM stalls
            if best is None or loss(x) < loss(best):
                best = x
    return unpack(best)


def errors(p: Params, points: list[dict], cores: int) -> list[tuple[dict, float, float]]:
    out = []
    for pt in points:
        t = predict(p, pt["impl"], pt["bytes"], pt["hosts"], pt["per_host"], pt["rate"],
                    _sim_cores(pt, cores), chunk_bytes=_chunk_bytes(pt), mtu=pt.get("mtu"))
        out.append((pt, t, t / pt["seconds"] - 1))
    return out


def plot(rows, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
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
            best = min(times, key=times.get)
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


if __name__ == "__main__":
    sys.exit(main())
