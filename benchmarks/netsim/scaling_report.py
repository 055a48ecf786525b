#!/usr/bin/python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Markdown tables and a plot from scaling.py's JSON, with the cost model's verdict on what
limits each configuration (the links or the CPU) and its fit.

    /usr/bin/python3 benchmarks/netsim/scaling_report.py benchmarks/results/scaling-DATE.json

Writes scaling-DATE.md, scaling-DATE.png (share of the bound against hosts) and
scaling-DATE-model.png (predicted against measured) beside the JSON; prints the markdown.
"""
from __future__ import annotations

import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import ddp_model as model  # the cost model, installed with libddp's package (make build)
except ImportError as e:
    raise SystemExit(f"{e}: run this with the Python that `make build` installs libddp into "
                     f"(.venv/bin/python)") from None

NAMES = {"ring": "libddp ring", "hier": "libddp hier", "mpi": "Open MPI", "gloo": "Gloo",
         "ceiling": "TCP ceiling"}
COLORS = {"ring": "tab:blue", "hier": "tab:cyan", "mpi": "tab:orange", "gloo": "tab:green",
          "ceiling": "tab:gray"}


def main(argv: list[str]) -> int:
    path = argv[0]
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    stem = os.path.splitext(path)[0]
    pts = [p for p in data["points"] if "seconds" in p]
    failed = [p for p in data["points"] if "error" in p]
    cores = data["machine"]["cores"]
    runs, _ = model.load_points([path])
    fitted = model.aggregate(runs, cores)  # a configuration measured twice counts once
    # The model has 5 parameters: fitted to fewer configurations it would match any data.
    rows_model, reference = [], None
    if len(fitted) > 2 * 5:
        params = model.fit(fitted, cores)
        rows_model = model.errors(params, fitted, cores)
    else:  # the verdict on what limits each configuration from the latest committed fit
        saved = sorted(glob.glob(os.path.join(os.path.dirname(path), "model-params-*.json")))
        if not saved:
            print("scaling_report: too few configurations to fit the cost model and no "
                  "model-params-*.json beside the results", file=sys.stderr)
            return 1
        reference = saved[-1]
        with open(reference, encoding="utf-8") as f:
            params = model.Params.from_dict(json.load(f))
    big = max(p["bytes"] for p in pts)
    configs = sorted({(p["rate"], p["hosts"], p["per_host"]) for p in pts})
    impls = [i for i in NAMES if any(p["impl"] == i for p in pts)]

    def get(impl, cfg, size):
        for p in pts:
            if (p["impl"], p["rate"], p["hosts"], p["per_host"], p["bytes"]) == (impl, *cfg, size):
                return p
        return None

    lines = [f"Measured {data['date']} on {data['machine']['host']} ({data['machine']['cpu']}, "
             f"{cores} cores, kernel {data['machine']['kernel']}) with `{data['command']}`.", "",
             f"Share of the bandwidth bound at {big >> 20} MiB (f32 sum; ring bound "
             "2(N-1)/N K/B, hier bound 2(H-1)/H K/B; the others against the ring's bound), "
             "and what limits the configuration by the cost model (the larger of its link and "
             "CPU terms for the ring).", "",
             f"Links of MTU {data.get('mtu', 1500)}: framing leaves TCP payload at most "
             f"{data.get('frame_efficiency', 1448 / 1514):.1%} of the link's rate (the bounds "
             "are of the whole rate).", "",
             "| link | H | L | " + " | ".join(NAMES[i] for i in impls)
             + " | libddp / MPI | libddp / Gloo | limit |",
             "|---|---|---|" + "---|" * (len(impls) + 3)]
    for cfg in configs:
        rate, hosts, per_host = cfg
        cells = []
        for impl in impls:
            p = get(impl, cfg, big)
            cells.append(f"{p['of_bound']:.0%} ({p['seconds'] * 1e3:.0f} ms)" if p else "-")
        ring, mpi, gloo = get("ring", cfg, big), get("mpi", cfg, big), get("gloo", cfg, big)
        best = min((p for p in (ring, get("hier", cfg, big)) if p), key=lambda p: p["seconds"],
                   default=None)

        def ratio(peer, best=best):
            return f"{peer['seconds'] / best['seconds']:.2f}x" if best and peer else "-"
        n = hosts * per_host
        net = 2 * (n - 1) / n * big / params.link(rate, data.get("mtu"))
        cpu = (2 * (n - 1) / n * big * (params.gamma + (per_host - 1) * params.gamma_local)
               / (cores / hosts))
        limit = "links" if net >= cpu else "CPU"
        lines.append(f"| {rate / 1e9:g} Gbit/s | {hosts} | {per_host} | " + " | ".join(cells)
                     + f" | {ratio(mpi)} | {ratio(gloo)} | {limit} |")
    lines += ["", "The ratio columns compare the faster of libddp's two algorithms with the peer "
              "(time of the peer / time of libddp).", ""]
    sizes = sorted({p["bytes"] for p in pts})
    lines += ["All sizes, share of the bound:", "",
              "| link | H | L | impl | " + " | ".join(f"{s >> 20} MiB" for s in sizes) + " |",
              "|---|---|---|---|" + "---|" * len(sizes)]
    for cfg in configs:
        for impl in impls:
            cells = [get(impl, cfg, s) for s in sizes]
            if not any(cells):
                continue
            lines.append(f"| {cfg[0] / 1e9:g} Gbit/s | {cfg[1]} | {cfg[2]} | {NAMES[impl]} | "
                         + " | ".join(f"{c['of_bound']:.0%}" if c else "-" for c in cells) + " |")
    if failed:
        lines += ["", "Runs that failed:", ""]
        lines += [f"- {p['impl']} H={p['hosts']} L={p['per_host']} "
                  f"{p['rate'] / 1e9:g} Gbit/s: {p['error'].splitlines()[0]}" for p in failed]
    if rows_model:
        worst = max(abs(e) for _, _, e in rows_model)
        within = sum(abs(e) <= 0.15 for _, _, e in rows_model)
        lines += ["", f"Cost model fitted to the {len(fitted)} libddp configurations of at least "
                  f"1 MiB: {params}; largest error {worst:.1%}, {within} of {len(rows_model)} "
                  f"within 15%."]
    else:
        lines += ["", f"Too few libddp configurations ({len(fitted)}) to fit the cost model's 5 "
                  f"parameters (`ddp-model fit` this file with others); the limit column uses "
                  f"{os.path.basename(reference)}."]
    text = "\n".join(lines) + "\n"
    with open(stem + ".md", "w", encoding="utf-8") as f:
        f.write(text)
    print(text)
    try:
        import matplotlib
    except ImportError:
        print("scaling_report: no matplotlib, no plots", file=sys.stderr)
        return 0
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rates = sorted({c[0] for c in configs})
    per_hosts = sorted({c[2] for c in configs})
    fig, axes = plt.subplots(len(per_hosts), len(rates), figsize=(4 * len(rates),
                                                                   3.2 * len(per_hosts)),
                             squeeze=False, sharey=True)
    for i, per_host in enumerate(per_hosts):
        for j, rate in enumerate(rates):
            ax = axes[i][j]
            for impl in impls:
                xs = [h for (r, h, ranks) in configs if r == rate and ranks == per_host
                      and get(impl, (r, h, ranks), big)]
                ys = [get(impl, (rate, h, per_host), big)["of_bound"] for h in xs]
                if xs:
                    ax.plot(xs, ys, marker="o", label=NAMES[impl], color=COLORS[impl])
            ax.axhline(0.95, color="0.6", lw=0.8, ls="--")
            ax.set(title=f"{rate / 1e9:g} Gbit/s, {per_host} rank(s) per host", xlabel="hosts",
                   xticks=sorted({c[1] for c in configs}), ylim=(0, 1.1))
            if j == 0:
                ax.set_ylabel(f"share of the bound, {big >> 20} MiB")
    handles = [plt.Line2D([], [], color=COLORS[i], marker="o", label=NAMES[i]) for i in impls]
    fig.legend(handles=handles, loc="lower center", ncol=len(impls), fontsize=8)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(stem + ".png", dpi=100)
    if rows_model:
        model.plot(rows_model, stem + "-model.png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
