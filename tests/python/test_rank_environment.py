# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The Python side of the rank-environment contract (libddp/src/rank_environment.tsv): every
writer in the package writes exactly the variables the table gives it, ddprun clears and keeps
what the table says, the torch.distributed backend's groups unset and set what it says, and
docs/launching.md shows the table as it is. tests/cpp/rank_environment_test.cc checks libddp's
readers against the same table. The writers and readers outside this repository (torchrun,
mpirun, srun, the user; torch, NCCL, scripts) are the table's to describe, not these tests'."""
from datetime import timedelta

import pytest

import rank_environment as table

ROWS = table.read()
BY_NAME = {r.variable: r for r in ROWS}


def written_by(writer):
    return {r.variable for r in ROWS if writer in r.written_by}


def test_the_table_is_well_formed():
    assert len(BY_NAME) == len(ROWS), "a variable is listed twice"
    for r in ROWS:
        assert r.written_by and r.written_by <= table.WRITERS, r
        assert r.read_by and r.read_by <= table.READERS, r
        assert r.launcher in table.LAUNCHERS, r
        assert r.ddprun in ("clears", "keeps") and r.torch_group in ("unsets", "sets", "keeps"), r
        assert r.meaning, r
    # One precedence per launcher, and each launcher with an identity has its own.
    orders = {}
    for r in ROWS:
        if r.precedence is not None:
            assert orders.setdefault(r.launcher, r.precedence) == r.precedence, r
    assert sorted(orders.values()) == list(range(1, len(orders) + 1)), orders
    assert sorted(orders, key=orders.get) == ["ddp", "torchrun", "mpi", "slurm"]


def test_docs_launching_shows_the_table_as_it_is():
    assert table.documented(table.DOC.read_text()) == table.markdown(ROWS), (
        "docs/launching.md's rank-environment table differs from libddp/src/rank_environment.tsv:"
        " python3 tests/python/rank_environment.py --write")


@pytest.fixture
def run_env():
    return pytest.importorskip("ddp.run.env")


def _args(argv):
    from ddp.run.args import parse_args
    return parse_args(argv)


def test_ddprun_clears_exactly_the_rows_it_clears(run_env):
    inherited = {r.variable: r.example or "x" for r in ROWS}
    kept = set(run_env.scrubbed(inherited))
    assert kept == {r.variable for r in ROWS if r.ddprun == "keeps"}


def test_ddprun_writes_exactly_its_rows(run_env):
    # Every flag that sets a variable, on one machine and across hosts, with torchrun's names.
    flags = ["--servers", "1", "--restart-servers", "--fusion-threshold-mb", "32",
             "--cycle-time-ms", "2", "--autotune", "--start-timeout", "30", "--log-level", "info",
             "--network-interface", "lo", "--timeline-filename", "/tmp/t-{rank}.json",
             "--flight-recorder", "/tmp/fr"]
    written = set()
    for argv in (["-np", "2", "prog"], ["-np", "3", "-H", "a:2,b:2", *flags, "prog"],
                 ["-np", "2", "--job-timeline", "/tmp/job.json", "prog"]):
        args = _args(argv)
        for rank in range(args.np):
            where = args.places[rank] if args.places else None
            written |= set(run_env.rank_env({}, rank, args, "10.0.0.1", 99, "t" * 32, where,
                                            ("10.0.0.1", 29500)))
    assert written == written_by("ddprun")


def test_the_elastic_driver_adds_exactly_its_rows():
    driver = pytest.importorskip("ddp.run.elastic_driver")
    args = _args(["--min-np", "1", "--max-np", "2", "--host-discovery-script", "/bin/true",
                  "--timeline-filename", "/tmp/t-{rank}.json", "prog"])
    env = driver.elastic_worker_env({}, args, "10.0.0.1", "t" * 32, 29400, "a:0", "a")
    assert set(env) - written_by("ddprun") == written_by("ddprun-elastic") - written_by("ddprun")
    assert written_by("ddprun-elastic") <= set(env)
    # A worker is told no place: each generation gives it one.
    assert not set(env) & written_by("elastic-init") - {"DDP_RENDEZVOUS_ADDR"}


def test_the_supervisor_adds_exactly_its_rows():
    job = pytest.importorskip("ddp.run.job")
    assert set(job.SUPERVISOR_VARIABLES) == written_by("ddprun-supervisor")


def test_an_elastic_worker_is_told_exactly_its_rows():
    generations = pytest.importorskip("ddp._generations")
    env = generations.place_variables(2, ["a", "b", "b"], 29401)
    assert set(env) == written_by("elastic-init")
    assert (env["DDP_RANK"], env["RANK"], env["DDP_LOCAL_RANK"], env["GROUP_RANK"],
            env["HOROVOD_CROSS_SIZE"]) == ("2", "2", "1", "1", "2")


def test_init_under_torchruns_agent_store_sets_exactly_its_rows(monkeypatch):
    rendezvous = pytest.importorskip("ddp._rendezvous")
    for r in ROWS:
        monkeypatch.delenv(r.variable, raising=False)
    for name, value in (("RANK", "1"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "127.0.0.1"),
                        ("MASTER_PORT", "29500"), ("TORCHELASTIC_USE_AGENT_STORE", "True"),
                        ("TORCHELASTIC_RUN_ID", "job7")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(rendezvous, "_through_torch_store",
                        lambda env, token, host: {"token": "t" * 32, "addr": "127.0.0.1",
                                                  "port": 29501})
    assert set(rendezvous.overrides()) == written_by("torchrun-init")


@pytest.mark.torch
def test_the_torch_backend_sets_and_unsets_exactly_its_rows(monkeypatch):
    pytest.importorskip("torch")
    from torch.distributed import HashStore

    from ddp import _rendezvous
    from ddp.torch.c10d import groups
    for r in ROWS:
        monkeypatch.delenv(r.variable, raising=False)
    servers = []
    try:
        overrides = _rendezvous.through_store(HashStore(), 0, 1, timedelta(seconds=30),
                                              keep=servers)
    finally:
        for server in servers:
            server.close()
    assert set(overrides) == written_by("torch-backend")
    assert set(overrides) == {r.variable for r in ROWS if r.torch_group == "sets"}
    for r in ROWS:
        monkeypatch.setenv(r.variable, r.example or "x")
    assert set(groups.launcher_unset()) == {r.variable for r in ROWS if r.torch_group == "unsets"}


def test_the_rows_torch_reads_are_the_ones_it_names():
    # torch.distributed's env:// reads these four (torch/distributed/rendezvous.py).
    assert {r.variable for r in ROWS if "torch" in r.read_by} == {
        "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
