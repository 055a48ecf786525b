# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Elastic training (ddprun --min-np/--max-np/--host-discovery-script, ddp.torch.elastic): a job
that goes on when a worker fails, and grows and shrinks as the discovery script's hosts come and
go, with the training state carried across (tests/python/workers/elastic_torch.py)."""
import re

import pytest

pytest.importorskip("torch")

WORKER = "elastic_torch.py"
DONE = re.compile(r"^\[([^\]]+)\] done rank (\d+) size (\d+) generation (-?\d+) sizes ([\d,]+) "
                  r"resets \[([\d, ]*)\] checksum (\w+) seen (.*)$", re.M)


def finished(stdout):
    """{worker id: (rank, size, generation, sizes, resets, checksum, seen)} of the workers that
    finished training."""
    return {m[0]: (int(m[1]), int(m[2]), int(m[3]), m[4], m[5], m[6], m[7])
            for m in DONE.findall(stdout)}


@pytest.mark.torch
def test_a_failed_worker_is_left_out_and_the_others_go_on_from_the_last_commit(run_job):
    job = run_job(3, WORKER, "fail", "localhost:2",
                  launcher_args=("--min-np", "2", "--max-np", "3"))
    done = finished(job.stdout)
    assert set(done) == {"localhost:0", "localhost:1"}, job.stdout + job.stderr
    assert sorted(d[0] for d in done.values()) == [0, 1]
    for rank, size, generation, sizes, resets, _, seen in done.values():
        assert (size, generation, sizes, resets) == (2, 1, "3,2", "2"), job.stdout
        assert seen == "OK", job.stdout
    # Every worker ends with the same weights: synchronised after the reset, trained alike.
    assert len({d[5] for d in done.values()}) == 1, job.stdout
    # The survivors' int8 residuals (the weight's 8 floats and the bias's 1) carried over.
    assert job.stdout.count("residual floats after each reset [9]") == 2, job.stdout
    assert "worker localhost:2 (rank 2, host localhost) exited with status 1" in job.stderr
    assert "generation 1: 2 workers" in job.stderr, job.stderr


@pytest.mark.once
@pytest.mark.torch
def test_workers_join_when_a_host_comes_and_leave_when_it_goes(run_job, tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:2\n")
    job = run_job(2, WORKER, "grow-shrink", hosts, "127.0.0.1:1",
                  launcher_args=("--min-np", "2", "--max-np", "3",
                                 "--host-discovery-script", f"cat {hosts}"))
    done = finished(job.stdout)
    assert set(done) == {"localhost:0", "localhost:1"}, job.stdout + job.stderr
    for rank, size, generation, sizes, resets, _, seen in done.values():
        # 2 workers, then 3 with the new host's (at a commit: no work lost), then 2 again.
        assert (size, generation, sizes, resets) == (2, 2, "2,3,2", "3, 2"), job.stdout
        assert seen == "OK", job.stdout
    assert len({d[5] for d in done.values()}) == 1, job.stdout
    # The new host's worker took part in generation 1.
    assert "generation 1: 3 workers (1 new on 127.0.0.1)" in job.stderr, job.stderr
    assert "host 127.0.0.1 left: stopping worker 127.0.0.1:0" in job.stderr, job.stderr


@pytest.mark.once
@pytest.mark.torch
def test_below_min_np_the_driver_waits_for_hosts_then_stops_the_job(run_job):
    job = run_job(2, WORKER, "fail", "localhost:1", check=False, timeout=120,
                  launcher_args=("--min-np", "2", "--elastic-timeout", "3"))
    assert job.returncode == 1, job.stdout + job.stderr
    assert "1 worker left, fewer than --min-np 2: waiting up to 3 s" in job.stderr, job.stderr
    assert "stopping the job: 1 worker for 3 s (--elastic-timeout), fewer than --min-np 2, " \
        "since worker localhost:1 (rank 1, host localhost) exited with status 1" in job.stderr, \
        job.stderr
    assert not finished(job.stdout), job.stdout


@pytest.mark.once
@pytest.mark.torch
def test_outside_elastic_mode_the_same_script_trains_once(run_job):
    # A plain launch: no driver, so commit() asks nothing and a DDPError would be raised as is.
    job = run_job(2, WORKER, "plain")
    done = finished(job.stdout)
    assert set(done) == {"0", "1"}, job.stdout + job.stderr
    for rank, size, generation, sizes, resets, _, seen in done.values():
        assert (size, generation, sizes, resets, seen) == (2, -1, "2", "", "OK"), job.stdout
    assert len({d[5] for d in done.values()}) == 1, job.stdout


@pytest.mark.parametrize("argv, message", [
    (["--min-np", "3", "-np", "2", "true"], "-np 2 is below --min-np 3"),
    (["--max-np", "1", "-np", "2", "true"], "--max-np 1 is below -np 2"),
    (["--min-np", "2", "--nnodes", "2", "--node-rank", "0", "--rendezvous", "h:1", "true"],
     "it takes no --nnodes"),
    (["-np", "2", "--slots-per-host", "2", "true"],
     "--slots-per-host, --elastic-timeout, --reset-limit and --blacklist-cooldown-range are for "
     "elastic"),
    (["-np", "2", "--blacklist-cooldown-range", "1", "2", "true"], "are for elastic mode"),
    (["--min-np", "2", "--blacklist-cooldown-range", "5", "1", "true"],
     "--blacklist-cooldown-range needs 0 < LOW <= HIGH (got 5 1)"),
    (["--min-np", "2", "--timeline-filename", "t.json", "true"], "with {rank}"),
    (["true"], "-np N is required"),
    (["--min-np", "2", "--max-restarts", "-1", "true"], "--max-restarts must be >= 0 (got -1)"),
])
def test_elastic_arguments_are_checked(argv, message, capsys):
    from ddp import run

    assert run.main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv, expected", [
    # torchrun's elastic form, from one ddprun: MIN x L to MAX x L workers.
    (["--nnodes", "2:4", "--nproc-per-node", "2"], (True, 4, 4, 8, 0)),
    (["--nnodes", "1:3", "--max-restarts", "2"], (True, 1, 1, 3, 2)),
    (["--nnodes", "1:1", "--nproc-per-node", "2"], (False, 2, None, None, 3)),
    # --max-restarts alone makes a job of -np elastic, its size fixed; with servers, it counts
    # a server's restarts (a static job).
    (["-np", "3", "--max-restarts", "1"], (True, 3, 3, None, 1)),
    (["-np", "2", "--servers", "1", "--restart-servers", "--max-restarts", "1"],
     (False, 3, None, None, 1)),
    (["--min-np", "2", "--max-np", "4"], (True, 2, 2, 4, 0)),
])
def test_torchrun_elastic_flags_map_onto_the_elastic_job(argv, expected):
    from ddp.run.args import parse_args

    args = parse_args([*argv, "true"])
    assert (args.elastic, args.np, args.min_np, args.max_np, args.max_restarts) == expected


def test_the_discovery_script_output_is_parsed():
    from ddp.run.discovery import parse_discovery

    text = "# hosts\nnode-a:4\nnode-b\n\n[fe80::1]:2  # six\n"
    assert parse_discovery(text, 3) == {"node-a": 4, "node-b": 3, "fe80::1": 2}
    with pytest.raises(ValueError):
        parse_discovery("node-a:0\n", 1)


def test_the_blacklist_leaves_a_host_out_for_good_or_for_a_growing_cooldown():
    from ddp.run.blacklist import Blacklist
    forever = Blacklist()
    assert forever.add("a") is None and "a" in forever and "b" not in forever
    assert forever.returned() == []
    now = [100.0]
    cooling = Blacklist((2.0, 5.0), clock=lambda: now[0], rand=lambda: 0.5)
    assert cooling.add("a") == 3.0  # 2 * 2**0 + 0.5 * 2
    assert "a" in cooling
    now[0] = 102.9
    assert "a" in cooling and cooling.returned() == []
    now[0] = 103.0
    assert "a" not in cooling and cooling.returned() == ["a"] and cooling.returned() == []
    assert cooling.add("a") == 5.0  # 2 * 2**1 + 1 = 5: within the range
    assert cooling.add("a") == 5.0  # 2 * 2**2 + 1 = 9, held to the highest


def test_run_recovers_from_the_job_s_failures_and_raises_the_program_s(monkeypatch):
    """ddp.elastic.run_fn's decisions, without a job: a DDPError (or any error while the job is
    unsound) is the job's failure: restore, reset, sync, call again; a DDPValueError, or another
    error while the job is sound, is raised; a reset that fails in a generation that broke is
    tried again; outside elastic mode nothing is retried."""
    from ddp import elastic
    from ddp._ddp import DDPError, DDPValueError

    class Recorded(elastic.ObjectState):
        def __init__(self):
            super().__init__(bcast_object=lambda o: o, get_rank=lambda: 0, step=0)
            self.calls = []

        def restore(self):
            self.calls.append("restore")
            super().restore()

        def sync(self):
            self.calls.append("sync")

    def scripted(*outcomes):
        outcomes = list(outcomes)

        def func(state):
            state.calls.append("call")
            outcome = outcomes.pop(0)
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome
        return func

    unsound = [False]
    monkeypatch.setattr(elastic, "_job_unsound", lambda: unsound[0])
    monkeypatch.setenv("DDP_ELASTIC", "1")
    resets = []
    state = Recorded()
    done = elastic.run_fn(scripted(DDPError("rank 2 lost"), "done"), lambda: resets.append(1))
    assert done(state) == "done"
    assert state.calls == ["sync", "call", "restore", "sync", "call"] and resets == [1]

    # torch's backend error while the job is unsound: the job's; while it is sound: the program's.
    unsound[0] = True
    state = Recorded()
    assert elastic.run_fn(scripted(RuntimeError("DistBackendError"), 7), lambda: None)(state) == 7
    unsound[0] = False
    with pytest.raises(KeyError):
        elastic.run_fn(scripted(KeyError("bug")), lambda: None)(Recorded())
    with pytest.raises(DDPValueError):
        elastic.run_fn(scripted(DDPValueError("bad shape")), lambda: None)(Recorded())

    # A reset that fails in a generation that broke as it formed is tried again; one that fails
    # before joining any (the job ended) is raised.
    tries = []

    def flaky_reset():
        tries.append(1)
        if len(tries) == 1:
            unsound[0] = True
            raise RuntimeError("init_process_group: rank 1 lost")
        unsound[0] = False
    state = Recorded()
    assert elastic.run_fn(scripted(DDPError("lost"), "ok"), flaky_reset)(state) == "ok"
    assert len(tries) == 2

    def ended():
        raise DDPError("ddp elastic: the job ended: too few workers")
    with pytest.raises(DDPError, match="the job ended"):
        elastic.run_fn(scripted(DDPError("lost")), ended)(Recorded())

    monkeypatch.delenv("DDP_ELASTIC")
    with pytest.raises(DDPError, match="lost"):
        elastic.run_fn(scripted(DDPError("lost")), lambda: None)(Recorded())


def test_a_zombie_or_gone_process_is_not_alive():
    """The driver's check that a blamed worker still runs (Popen.poll() says None while the
    driver's waiting thread holds the process)."""
    import os
    import subprocess
    import time

    from ddp.run.procs import alive

    assert alive(os.getpid())
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.01)  # it exits, and stays a zombie until waited for
    assert not alive(child.pid)
    child.wait()
    assert not alive(child.pid)


def test_a_worker_of_an_old_generation_is_refused_naming_it(monkeypatch):
    """A worker that comes back after the job re-formed without it (its host cut off, then
    back) finds a newer generation that does not have it: refused, named, not joined."""
    import json

    from ddp import _ddp, _generations

    token = "0123456789abcdef" * 2
    server = _ddp.StoreServer("127.0.0.1", 0, token)
    try:
        client = _ddp.StoreClient("127.0.0.1", server.port, token, 10.0)
        for generation, ranks in ((0, {"a:0": 0, "b:0": 1}), (1, {"b:0": 0})):
            plan = {"generation": generation, "port": 1, "ranks": ranks,
                    "hosts": ["h"] * len(ranks), "updates": 0}
            client.set(f"elastic/generation/{generation}", json.dumps(plan).encode())
        client.set("elastic/latest", b"1")
        monkeypatch.setenv("DDP_ELASTIC", "1")
        monkeypatch.setenv("DDP_ELASTIC_ID", "a:0")
        monkeypatch.setenv("DDP_ELASTIC_PORT", str(server.port))
        monkeypatch.setenv("DDP_JOB_TOKEN", token)
        monkeypatch.setenv("DDP_RENDEZVOUS_ADDR", "127.0.0.1")
        comeback = _generations._Membership()
        comeback.generation, comeback.member = 0, True  # it was rank 0 of generation 0
        with pytest.raises(_ddp.DDPError, match=r"worker a:0 is not in generation 1 of the job "
                                                r"\(the driver stopped it or its host\)"):
            comeback.join()
        assert comeback.generation == 0  # nothing of generation 1 taken
    finally:
        server.close()
