# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The model fitted to measurements: the harness's result files read
(benchmarks/netsim/scaling.py), the points grouped by configuration, alpha, eta, gamma and
gamma_l found by least squares on the log of the time (Nelder-Mead), and the errors left."""
from __future__ import annotations

import json
import math

from .formulas import Params, hier_chunks, predict
from .units import DEFAULT_MTU

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
