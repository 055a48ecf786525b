# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The allreduce cost model: alpha-beta-gamma, with the CPU as a second roof.

    ddp-model fit benchmarks/results/scaling-DATE.json --plot fit.png --out params.json
    ddp-model predict --params params.json --ranks 1024 --per-host 8 --link 400gbit \\
        --bytes 64M,1G --gpu
    python -m ddp_model ...        (the same; pure Python: no part of libddp is loaded)

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

The rooms: units (bytes, rates, framing), formulas (the costs and the bounds), fitting (the
measurements read and the parameters fitted), cli (`ddp-model fit|predict`, the plot).
"""
from .cli import main, plot
from .fitting import aggregate, configuration, errors, fit, load_points
from .formulas import Params, bound, hier_chunk_bytes, hier_chunks, predict, ps_bound
from .units import ALGOS, DEFAULT_MTU, UNITS, frame_share, parse_bytes, parse_rate

__all__ = ["main", "plot", "aggregate", "configuration", "errors", "fit", "load_points", "Params",
           "bound", "hier_chunk_bytes", "hier_chunks", "predict", "ps_bound", "ALGOS",
           "DEFAULT_MTU", "UNITS", "frame_share", "parse_bytes", "parse_rate"]
