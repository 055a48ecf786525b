# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The cost model (ddp_model, `ddp-model`): its formulas against the bounds they must meet, a
fit that recovers known parameters, and the command line. Pure Python: no ranks."""
import json
import math
import pathlib
import subprocess
import sys

import pytest

import ddp_model as model  # bindings/python/ddp_model.py, without libddp

ROOT = pathlib.Path(__file__).resolve().parents[2]

MIB = 1 << 20
FRAMED = model.frame_share()  # TCP payload's share of a link of MTU 1500: 95.6%


def test_with_free_steps_perfect_links_and_no_cpu_each_algorithm_meets_its_bound():
    # The bound is of the whole rate; TCP payload has the share that framing leaves at the MTU.
    assert FRAMED == pytest.approx(1448 / 1514)
    assert model.frame_share(9001) == pytest.approx(8949 / 9015)
    p = model.Params(alpha=0.0, eta=1.0, gamma=0.0)
    for mtu in (None, 1500, 9001):
        share = model.frame_share(mtu)
        for hosts, per_host in ((2, 1), (4, 2), (8, 2), (128, 8)):
            n = hosts * per_host
            ring = model.predict(p, "ring", 64 * MIB, hosts, per_host, 1e9, None, mtu=mtu)
            assert ring == pytest.approx(2 * (n - 1) / n * 64 * MIB / (125e6 * share))
            assert ring * share == pytest.approx(model.bound("ring", 64 * MIB, hosts, per_host,
                                                             1e9))
            hier = model.predict(p, "hier", 64 * MIB, hosts, per_host, 1e9, None, mtu=mtu)
            assert hier * share == pytest.approx(model.bound("hier", 64 * MIB, hosts, per_host,
                                                             1e9))
            assert hier <= ring  # it moves 2(H-1)/H, not 2(N-1)/N, of the buffer over a link
            rd = model.predict(p, "rd", 64 * MIB, hosts, per_host, 1e9, None, mtu=mtu)
            assert rd == pytest.approx(math.log2(hosts) * per_host * 64 * MIB / (125e6 * share))
    # Jumbo frames: a link-bound allreduce 3.8% faster than at 1500, a CPU-bound one no faster.
    q = model.Params(alpha=20e-6, eta=0.97, gamma=1e-9)
    at = {mtu: model.predict(q, "ring", 64 * MIB, 4, 1, 1e9, 8, mtu=mtu) for mtu in (1500, 9001)}
    assert at[1500] / at[9001] == pytest.approx(model.frame_share(9001) / FRAMED, rel=1e-3)
    cpu = {mtu: model.predict(q, "ring", 64 * MIB, 4, 1, 100e9, 0.25, mtu=mtu)
           for mtu in (1500, 9001)}
    assert cpu[1500] == cpu[9001]


def test_saved_parameters_keep_their_meaning():
    p = model.Params(alpha=50e-6, eta=0.97, gamma=1e-9, gamma_local=2e-10, crowding=1.5)
    again = model.Params.from_dict(json.loads(json.dumps(p.as_dict())))
    assert again.as_dict() == p.as_dict()
    assert again.link(1e9, 9001) == pytest.approx(0.97 * 8949 / 9015 * 125e6)
    # Saved before the framing term, from links of MTU 1500: eta was of the whole rate, so a link
    # at MTU 1500 predicts what it did then.
    old = {k: v for k, v in p.as_dict().items() if k != "eta_after_framing"}
    old["eta"] = 0.9
    assert model.Params.from_dict(old).eta == pytest.approx(0.9 / FRAMED)
    assert model.Params.from_dict(old).link(1e9, 1500) == pytest.approx(0.9 * 125e6)
    old["eta"] = 0.99  # more than framing leaves: the whole of what it leaves
    assert model.Params.from_dict(old).eta == 1.0


def test_parameter_server_bound_against_the_ring():
    m, rate = 64 * MIB, 1e9
    for n in (2, 4, 8, 64):
        ring = model.bound("ring", m, n, 1, rate)
        # k = n servers on hosts of their own: each link carries M each way, 2(n-1)/n faster.
        assert model.ps_bound(m, n, n, rate) == pytest.approx(m / 125e6)
        assert ring / model.ps_bound(m, n, n, rate) == pytest.approx(2 * (n - 1) / n)
        # Fewer servers: theirs are the busiest links, nM/k each way.
        assert model.ps_bound(m, n, 1, rate) == pytest.approx(n * m / 125e6)
        # Colocated: the ring's bound, never better.
        assert model.ps_bound(m, n, 0, rate) == pytest.approx(ring)
    assert model.bound("ring", m, 4, 1, rate) / model.ps_bound(m, 4, 4, rate) == pytest.approx(1.5)
    assert model.bound("ring", m, 8, 1, rate) / model.ps_bound(m, 8, 8, rate) == pytest.approx(1.75)


def test_latency_and_cpu_terms():
    p = model.Params(alpha=10e-6, eta=1.0, gamma=1e-9)
    # A tiny buffer costs the steps: 2(N-1) for the ring, log2 N for recursive doubling.
    assert model.predict(p, "ring", 8, 64, 1, 100e9, None) == pytest.approx(126 * 10e-6, rel=1e-3)
    assert model.predict(p, "rd", 8, 64, 1, 100e9, None) == pytest.approx(6 * 10e-6, rel=1e-3)
    # Hierarchical: 2(H-1) steps across hosts and 2(L-1) within.
    assert model.predict(p, "hier", 8, 16, 4, 100e9, None) == pytest.approx(36 * 10e-6, rel=1e-3)
    # Fast links and few cores: the CPU roof decides, and more cores lower it.
    slow = model.predict(p, "ring", 64 * MIB, 2, 2, 100e9, 0.5)
    fast = model.predict(p, "ring", 64 * MIB, 2, 2, 100e9, 4)
    assert slow > fast > model.bound("ring", 64 * MIB, 2, 2, 100e9)
    # 4 ranks per core: every step waits 4 times as long; each rank's 2(N-1)/N K crosses one
    # shared-memory edge and, for one rank in L, one TCP edge.
    assert slow == pytest.approx(6 * 10e-6 * 4 + 1.5 * 64 * MIB * (1e-9 + 1e-9) / 0.5)
    # NVLink within the host adds the hierarchical allreduce's two local phases.
    gpu = model.predict(p, "hier", 64 * MIB, 128, 8, 400e9, None, intra_rate=2400e9)
    assert gpu == pytest.approx(268 * 10e-6 + 2 * 127 / 128 * 64 * MIB / (50e9 * FRAMED)
                                + 2 * 7 / 8 * 64 * MIB / 300e9)


def test_the_hierarchical_pipeline_hides_the_phases_within_the_host_behind_the_links():
    # libddp's chunks: at least 4 MiB and 512 KiB per rank, 1 to 64 of them.
    assert model.hier_chunks(64 * MIB, 4) == 16
    assert model.hier_chunks(64 * MIB, 16) == 8
    assert model.hier_chunks(3 * MIB, 4) == 1
    assert model.hier_chunks(64 * MIB, 4, chunk_bytes=0) == 1
    assert model.hier_chunks(1 << 30, 4, chunk_bytes=4096) == 64
    # By default at most 256 steps across hosts in all: 8 chunks of 30 steps with 16 hosts, one
    # of 254 with 128; a size set by hand is taken as it is.
    assert model.hier_chunks(1 << 30, 128, hosts=16) == 8
    assert model.hier_chunks(1 << 30, 1024, hosts=128) == 1
    assert model.hier_chunks(1 << 30, 1024, chunk_bytes=64 * MIB, hosts=128) == 16
    assert model.hier_chunk_bytes(4) == 4 * MIB and model.hier_chunk_bytes(16) == 8 * MIB
    p = model.Params(alpha=0.0, eta=1.0, gamma=0.0, gamma_local=1e-9)
    size, cores = 64 * MIB, 2.0
    local = 2 * 64 * MIB * 1e-9 / cores  # 2(L-1) K gamma_l / P with L = 2
    links = model.bound("hier", size, 2, 2, 1e9) / FRAMED
    one = model.predict(p, "hier", size, 2, 2, 1e9, cores, chunk_bytes=0)
    assert one == pytest.approx(links + local)  # one chunk: the phases add
    piped = model.predict(p, "hier", size, 2, 2, 1e9, cores)
    assert piped == pytest.approx(links + local / 16)  # 16 chunks: only 1/16 shows
    # Where the CPU is the limit, the overlapped work still takes the cores' time.
    q = model.Params(alpha=0.0, eta=1.0, gamma=1e-8, gamma_local=1e-9)
    cpu = model.predict(q, "hier", size, 2, 2, 100e9, cores)
    assert cpu == pytest.approx(local / 16 + size * 1e-8 / cores + 15 / 16 * local)
    # More ranks than cores: libddp runs one chunk unless told otherwise.
    crowded = model.predict(p, "hier", size, 2, 2, 1e9, 1.0)
    assert crowded == pytest.approx(links + 2 * local)
    assert model.predict(p, "hier", size, 2, 2, 1e9, 1.0, chunk_bytes=4 * MIB) == \
        pytest.approx(links + 2 * local / 16)


def synthetic(params, cores=2, mtu=None):
    points = []
    for rate in (1e9, 4e9, 10e9):
        for hosts in (2, 4, 8):
            for per_host in (1, 2):
                for impl in ("ring", "hier") if per_host > 1 else ("ring",):
                    for size in (MIB, 16 * MIB, 64 * MIB):
                        t = model.predict(params, impl, size, hosts, per_host, rate,
                                          cores / hosts, mtu=mtu)
                        points.append({"rate": rate, "hosts": hosts, "per_host": per_host,
                                       "impl": impl, "bytes": size, "seconds": t})
                        if impl == "hier":  # as scaling.py records libddp's default chunks
                            points[-1]["hier_chunk_bytes"] = -1
    return points


def test_the_fit_recovers_the_parameters_that_made_the_points():
    truth = model.Params(alpha=80e-6, eta=0.95, gamma=2e-9, gamma_local=0.5e-9, crowding=1.8)
    got = model.fit(synthetic(truth), 2)
    assert got.crowding == pytest.approx(truth.crowding, rel=0.02)
    assert got.alpha == pytest.approx(truth.alpha, rel=0.02)
    assert got.eta == pytest.approx(truth.eta, rel=0.01)
    assert got.gamma == pytest.approx(truth.gamma, rel=0.01)
    assert got.gamma_local == pytest.approx(truth.gamma_local, rel=0.02)
    assert max(abs(e) for _, _, e in model.errors(got, synthetic(truth), 2)) < 0.01


def test_repeated_runs_count_once_as_their_median():
    runs = [{"impl": "hier", "rate": 1e9, "hosts": 2, "per_host": 2, "bytes": 64 * MIB,
             "seconds": s} for s in (1.0, 3.0, 2.0)]
    runs.append({**runs[0], "hier_chunk_bytes": 4 * MIB, "seconds": 5.0})  # pipelined: another
    out = sorted(model.aggregate(runs, 4), key=lambda pt: pt["seconds"])
    assert [(pt["seconds"], pt["runs"], pt["spread"]) for pt in out] == [(2.0, 3, 3.0),
                                                                         (5.0, 1, 1.0)]


def test_files_measured_at_other_mtus_are_other_configurations(tmp_path):
    truth = model.Params(alpha=40e-6, eta=0.98, gamma=1e-9, gamma_local=0.4e-9, crowding=1.3)
    paths = []
    for mtu in (None, 9001):  # a file from before scaling.py recorded the MTU: 1500
        path = tmp_path / f"scaling-{mtu}.json"
        head = {"machine": {"cores": 2}, **({"mtu": mtu} if mtu else {})}
        path.write_text(json.dumps({**head, "points": synthetic(truth, mtu=mtu)}))
        paths.append(str(path))
    runs, cores = model.load_points(paths)
    assert sorted({pt["mtu"] for pt in runs}) == [1500, 9001]
    points = model.aggregate(runs, cores)
    assert len(points) == len(runs) == 162 and all(pt["runs"] == 1 for pt in points)
    got = model.fit(points, cores)
    assert got.eta == pytest.approx(truth.eta, rel=0.01)
    assert max(abs(e) for _, _, e in model.errors(got, points, cores)) < 0.01
    fit = subprocess.run([sys.executable, "-m", "ddp_model", "fit", *paths], capture_output=True,
                         text=True, check=True).stdout
    assert "fitted on 162 configurations (162 runs" in fit, fit
    assert " 9001 " in fit and " 1500 " in fit
    pred = {mtu: subprocess.run([sys.executable, "-m", "ddp_model", "predict", "--ranks", "2",
                                 "--per-host", "1", "--link", "1gbit", "--bytes", "64M",
                                 "--algos", "ring", "--alpha", "0", "--gamma", "0",
                                 "--mtu", str(mtu)],
                                capture_output=True, text=True, check=True).stdout
            for mtu in (1500, 9001)}
    assert "of MTU 9001 (99.3% of it for TCP payload)" in pred[9001], pred[9001]
    ms = {mtu: float(next(line for line in out.splitlines()
                          if not line.startswith("#")).split()[2]) for mtu, out in pred.items()}
    assert ms[1500] / ms[9001] == pytest.approx(model.frame_share(9001) / FRAMED, rel=1e-3)


def test_command_line_fit_then_predict(tmp_path):
    truth = model.Params(alpha=50e-6, eta=0.9, gamma=1.5e-9)
    results = tmp_path / "scaling.json"
    results.write_text(json.dumps({"machine": {"cores": 2}, "points": synthetic(truth)}))
    params = tmp_path / "params.json"
    fit = subprocess.run([sys.executable, "-m", "ddp_model", "fit", str(results), "--out",
                          str(params)],
                         capture_output=True, text=True, check=True)
    assert "largest error 0.0%" in fit.stdout, fit.stdout
    assert json.loads(params.read_text())["eta"] == pytest.approx(0.9, rel=0.01)
    # A second file measuring the same configurations: each counts once, as its median, and
    # runs further apart than 1.35x are named.
    slower = [{**pt, "seconds": pt["seconds"] * (2.0 if pt["bytes"] == MIB else 1.0)}
              for pt in synthetic(truth)]
    again = tmp_path / "again.json"
    again.write_text(json.dumps({"machine": {"cores": 2}, "points": slower}))
    both = subprocess.run([sys.executable, "-m", "ddp_model", "fit", str(results), str(again)],
                          capture_output=True, text=True, check=True).stdout
    assert "fitted on 81 configurations (162 runs" in both, both
    assert "the runs of 27 configurations differ by more than 1.35x" in both, both
    pred = subprocess.run([sys.executable, "-m", "ddp_model", "predict", "--params", str(params),
                           "--ranks", "16,1024", "--per-host", "8", "--link", "400gbit",
                           "--bytes", "64M", "--gpu", "--intra-link", "2400gbit"],
                          capture_output=True, text=True, check=True)
    rows = [line.split() for line in pred.stdout.splitlines() if not line.startswith("#")]
    assert [r[0] for r in rows] == ["16", "1024"]
    assert rows[1][5] == "hier", pred.stdout  # 2046 ring steps cost more than 254 across hosts
    bad = subprocess.run([sys.executable, "-m", "ddp_model", "predict", "--ranks", "12",
                          "--per-host",
                          "8"], capture_output=True, text=True)
    assert bad.returncode == 2 and "not a multiple of 8" in bad.stderr


def test_scaling_report_fits_only_enough_configurations(tmp_path):
    """benchmarks/netsim/scaling_report.py: the model's fit below its tables only where the file
    has enough configurations for 5 parameters; else the limit column from a saved fit."""
    report = ROOT / "benchmarks" / "netsim" / "scaling_report.py"
    truth = model.Params(alpha=50e-6, eta=0.9, gamma=1.5e-9, crowding=1.5)
    points = synthetic(truth)
    for pt in points:
        pt["of_bound"] = model.bound(pt["impl"], pt["bytes"], pt["hosts"], pt["per_host"],
                                     pt["rate"]) / pt["seconds"]
    full = tmp_path / "scaling-full.json"
    head = {"date": "2026-01-01", "command": "scaling.py",
            "machine": {"cores": 2, "host": "vm", "cpu": "test", "kernel": "6"}}
    full.write_text(json.dumps({**head, "points": points}))
    out = subprocess.run([sys.executable, str(report), str(full)], capture_output=True,
                         text=True, check=True).stdout
    assert "Cost model fitted to the 81 libddp configurations" in out, out
    assert "largest error 0.0%, 81 of 81 within 15%" in out, out
    few = tmp_path / "scaling-few.json"
    few.write_text(json.dumps({**head, "points": points[:3]}))
    bad = subprocess.run([sys.executable, str(report), str(few)], capture_output=True, text=True)
    assert bad.returncode == 1 and "no model-params" in bad.stderr, bad.stderr
    (tmp_path / "model-params-2026-01-01.json").write_text(json.dumps(truth.as_dict()))
    out = subprocess.run([sys.executable, str(report), str(few)], capture_output=True,
                         text=True, check=True).stdout
    assert "Too few libddp configurations (3)" in out and "model-params-2026-01-01.json" in out
    assert (tmp_path / "scaling-few.md").read_text() in out + "\n"
