# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The cost model's formulas (the package's docstring has them in full): the fitted parameters,
the predicted time of each algorithm, libddp's chunking of the hierarchical allreduce, and the
bandwidth bounds of the allreduce and the parameter server."""
from __future__ import annotations

import math

from .units import DEFAULT_MTU, frame_share

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
    steps: float
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
