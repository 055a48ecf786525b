# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Seeing a running job: `ddprun status` (a rank stopped with SIGSTOP in the middle of an
allreduce is named), `ddprun dump` and the flight recorder (libddp's format; torch's analyzer
reads the converted dumps), ddprun --flight-recorder at a failure, and --metrics-port (checked
with Prometheus' own parser)."""
import json
import pickle
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

READY_SECONDS = 60

STOPPED = textwrap.dedent("""
    import os, signal, sys, time
    import numpy as np
    import ddp
    ddp.init()
    x = np.ones(1 << 14, np.float32)
    for i in range(50):
        ddp.allreduce(x, name=f"grad{i % 4}")
    time.sleep(1.5)  # every rank's monitor has spoken since: its last word shows the 50
    print("READY", os.getpid(), flush=True)
    if ddp.rank() == int(os.environ.get("STOP_RANK", "1")):
        os.kill(os.getpid(), signal.SIGSTOP)  # as a debugger, or a frozen host, would
    ddp.allreduce(x, name="stuck")
""")

# An elastic job: 3 workers, one fails at step 3, the other two go on in generation 1 and then
# hang as STOPPED's ranks do.
ELASTIC_STUCK = textwrap.dedent("""
    import os, signal, time
    import numpy as np
    import ddp
    from ddp import elastic
    ddp.init()
    state = elastic.NumpyState(step=0)
    x = np.ones(1 << 12, np.float32)

    @elastic.run
    def train(state):
        while ddp.size() == 3 or state.step < 6:
            ddp.allreduce(x, name=f"grad{state.step % 2}")
            state.step += 1
            state.commit()
            if ddp.size() == 3 and ddp.rank() == 2 and state.step == 3:
                os._exit(1)
        time.sleep(1.5)
        print("READY", os.getpid(), flush=True)
        if ddp.rank() == 1:
            os.kill(os.getpid(), signal.SIGSTOP)
        ddp.allreduce(x, name="stuck")

    train(state)
""")

LAGGING = textwrap.dedent("""
    import sys, time
    import numpy as np
    import ddp
    ddp.init()
    out = sys.argv[1]
    x = np.ones(4, np.float32)
    for i in range(5):
        ddp.allreduce(x, name=f"step{i}")
    if ddp.rank() != 2:
        h = ddp.allreduce_async(x, name="step5")
        time.sleep(1.0)
        ddp.dump_flight_recorder(out)
        ddp.synchronize(h)
    else:  # rank 2 dumps before it submits step5
        time.sleep(0.5)
        ddp.dump_flight_recorder(out)
        time.sleep(1.0)
        ddp.allreduce(x, name="step5")
""")

DIES = textwrap.dedent("""
    import os, signal
    import numpy as np
    import ddp
    ddp.init()
    x = np.ones(4, np.float32)
    for i in range(3):
        ddp.allreduce(x, name=f"step{i}")
    if ddp.rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    ddp.allreduce(x, name="step3")
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ddp_env(ddp_env, tmp_path):
    """The tests' jobs kept in a job folder of their own (not the user's: `ddprun status`
    without --job must find the test's job alone)."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    return {**ddp_env, "XDG_RUNTIME_DIR": str(runtime)}


def _ddprun(env, *args, **kw):
    return subprocess.run([sys.executable, "-m", "ddp.run", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=120, **kw)


class Job:
    """A ddprun job in the background, with its ranks' lines."""

    def __init__(self, env, tmp_path, script, *flags):
        path = tmp_path / "job.py"
        path.write_text(script)
        self.proc = subprocess.Popen([sys.executable, "-m", "ddp.run", *flags, "-np", "3",
                                      sys.executable, str(path)], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.lines = []
        self.rank_pids: list[int] = []

    def wait_ready(self, ranks=3):
        deadline = time.monotonic() + READY_SECONDS
        while sum("READY" in line for line in self.lines) < ranks:
            assert time.monotonic() < deadline, "".join(self.lines)
            line = self.proc.stdout.readline()
            assert line, "".join(self.lines)
            self.lines.append(line)
            if "READY " in line:
                self.rank_pids.append(int(line.split("READY ", 1)[1].split()[0]))

    def end(self):
        """Every process of the job gone, the stopped one too: ddprun, told to stop, stops its
        ranks (a stopped one gets SIGCONT after the SIGTERM); the ranks' pids, read from their
        published status, are killed after it in case it did not."""
        pids = re.findall(r'"pid":(\d+)', "".join(self.lines))
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        finally:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc.stdout.close()
            for pid in self.rank_pids + [int(p) for p in pids]:
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass


@pytest.fixture
def stopped_job(ddp_env, tmp_path):
    job = Job(ddp_env, tmp_path, STOPPED)
    try:
        job.wait_ready()
        time.sleep(0.5)  # rank 1 is stopped; the others wait in 'stuck'
        yield job
    finally:
        job.end()


def test_status_names_the_rank_stopped_in_the_middle_of_an_allreduce(ddp_env, stopped_job):
    done = _ddprun(ddp_env, "status", "--job", stopped_job.proc.pid)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"job {stopped_job.proc.pid}: "), lines
    assert "(3 ranks, started" in lines[0], lines
    rows = {int(line.split()[0]): line for line in lines[2:5]}
    for rank in (0, 2):
        assert "waiting for the others to submit allreduce 'stuck' (#51)" in rows[rank], lines
    assert "NOT ANSWERING for" in rows[1], lines
    assert "ranks 0, 2 wait for rank 1, which does not answer" in done.stdout, lines
    assert lines[-1] == "last error: none", lines
    # Without --job: the one running is found.
    alone = _ddprun(ddp_env, "status")
    assert alone.returncode == 0 and "NOT ANSWERING" in alone.stdout, alone.stderr


def test_dump_gives_the_live_ranks_records_and_names_the_silent_one(ddp_env, stopped_job,
                                                                    tmp_path):
    out = tmp_path / "dump"
    done = _ddprun(ddp_env, "dump", "--job", stopped_job.proc.pid, "--torch", out)
    assert done.returncode == 3, done.stdout + done.stderr  # not every rank answered
    assert "2 of 3 ranks' flight records in" in done.stdout, done.stdout
    assert "no flight record from rank 1: no answer within 5 s" in done.stderr, done.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "ddp_flight_recorder_rank_0.json", "ddp_flight_recorder_rank_2.json",
        "ddp_trace_rank_0", "ddp_trace_rank_2"]
    record = json.loads((out / "ddp_flight_recorder_rank_0.json").read_text())
    assert record["format"] == "libddp-flight-recorder" and record["rank"] == 0, record.keys()
    assert record["reason"] == "requested by ddprun dump"
    assert record["process_sets"] == {"0": [0, 1, 2]}
    entries = record["entries"]
    assert [e["seq"] for e in entries] == list(range(1, 52))
    assert all(e["state"] == "completed" for e in entries[:50])
    assert entries[-1]["name"] == "stuck" and entries[-1]["state"] == "scheduled", entries[-1]
    assert record["totals"]["allreduce"]["operations"] == 50
    assert record["totals"]["allreduce"]["bytes"] == 50 * 4 * (1 << 14)


def test_status_dump_and_metrics_of_an_elastic_job_follow_its_generations(ddp_env, tmp_path):
    port = _free_port()
    records = tmp_path / "fr"
    job = Job(ddp_env, tmp_path, ELASTIC_STUCK, "--min-np", "2", "--max-np", "3",
              "--metrics-port", str(port), "--flight-recorder", records)
    try:
        job.wait_ready(ranks=2)
        time.sleep(0.5)  # rank 1 is stopped; rank 0 waits in 'stuck'
        done = _ddprun(ddp_env, "status", "--job", job.proc.pid)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert "(elastic, generation 1: 2 ranks, started" in lines[0], lines
        rows = {int(line.split()[0]): line for line in lines[2:4]}
        assert "waiting for the others to submit allreduce 'stuck'" in rows[0], lines
        assert "NOT ANSWERING for" in rows[1], lines
        assert "rank 0 waits for rank 1, which does not answer" in done.stdout, lines
        dump = _ddprun(ddp_env, "dump", "--job", job.proc.pid, tmp_path / "dump")
        assert dump.returncode == 3, dump.stdout + dump.stderr
        assert "1 of 2 ranks' flight records in" in dump.stdout, dump.stdout
        assert "(generation 1 of the elastic job)" in dump.stdout, dump.stdout
        record = json.loads((tmp_path / "dump" / "ddp_flight_recorder_rank_0.json").read_text())
        assert record["size"] == 2 and record["entries"][-1]["name"] == "stuck", record
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        assert "ddp_elastic_generation 1" in text, text
        assert 'ddp_rank_up{rank="0"} 1' in text and 'rank="2"' not in text, text
    finally:
        job.end()
    assert "generation 1: 2 workers" in "".join(job.lines), job.lines
    # Generation 0 broke when a worker died: its survivors' records, in a folder of its own
    # (generation 1's rank 0 is not generation 0's).
    broke = sorted(p.name for p in (records / "generation-0").iterdir())
    assert broke == ["ddp_flight_recorder_rank_0.json", "ddp_flight_recorder_rank_1.json"], broke
    first = json.loads((records / "generation-0" / broke[0]).read_text())
    assert first["size"] == 3 and first["reason"].startswith("the job broke: "), first["reason"]


def test_status_and_dump_of_a_job_that_has_ended_or_never_was(ddp_env, tmp_path):
    job = Job(ddp_env, tmp_path, "import ddp\nddp.init()\nprint('READY', flush=True)\n")
    job.wait_ready()
    assert job.proc.wait(timeout=60) == 0
    job.proc.stdout.close()
    done = _ddprun(ddp_env, "status", "--job", job.proc.pid)
    assert done.returncode == 1
    assert f"job {job.proc.pid} has ended (" in done.stderr and "exit status 0" in done.stderr
    never = _ddprun(ddp_env, "dump", "--job", "999999999", tmp_path / "d")
    assert never.returncode == 1
    assert "no job 999999999 started by this user on this machine" in never.stderr


def test_a_failure_dump_has_every_live_rank_and_names_the_dead_one(ddp_env, tmp_path):
    script = tmp_path / "dies.py"
    script.write_text(DIES)
    folder = tmp_path / "fr"
    done = _ddprun(ddp_env, "-np", "3", "--flight-recorder", folder, sys.executable, script)
    assert done.returncode == 137, done.stderr
    assert f"ddprun: flight records in {folder}: ranks 0, 2; none from rank 1" in done.stderr, \
        done.stderr
    for rank in (0, 2):
        record = json.loads((folder / f"ddp_flight_recorder_rank_{rank}.json").read_text())
        names = [(e["name"], e["state"]) for e in record["entries"]]
        assert names[:3] == [(f"step{i}", "completed") for i in range(3)], names
        assert names[3][0] == "step3" and names[3][1] != "completed", names


def test_metrics_parse_with_prometheus_and_a_port_in_use_is_named(ddp_env, tmp_path):
    parser = pytest.importorskip("prometheus_client.parser",
                                 reason="prometheus_client: make venv installs it")
    port = _free_port()
    job = Job(ddp_env, tmp_path, STOPPED, "--metrics-port", str(port))
    try:
        job.wait_ready()
        import urllib.request

        def scrape():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                return r.read().decode()
        # Until rank 1, stopped, has been silent long enough to count as down.
        deadline = time.monotonic() + 30
        while 'ddp_rank_up{rank="1"} 0' not in (text := scrape()):
            assert time.monotonic() < deadline, text
            time.sleep(0.5)
        with pytest.raises(OSError):  # only /metrics is served
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
        families = {f.name: f for f in parser.text_string_to_metric_families(text)}
        ops = {(s.labels["rank"], s.labels["op"]): s.value
               for s in families["ddp_operations"].samples if s.name == "ddp_operations_total"}
        assert ops == {(str(r), "allreduce"): 50.0 for r in range(3)}, ops
        sent = {s.labels["rank"]: s.value for s in families["ddp_bytes"].samples
                if s.name == "ddp_bytes_total"}
        assert sent == {str(r): 50.0 * 4 * (1 << 14) for r in range(3)}, sent
        assert all(s.value > 0 for s in families["ddp_busbw_bytes_per_second"].samples)
        up = {s.labels["rank"]: s.value for s in families["ddp_rank_up"].samples}
        assert up == {"0": 1.0, "1": 0.0, "2": 1.0}, up
        flight = {s.labels["rank"]: s.value for s in families["ddp_in_flight_operations"].samples}
        assert flight["0"] == 1.0 and flight["2"] == 1.0, flight
        assert {"ddp_wait_seconds", "ddp_operation_errors", "ddp_waited_for_seconds",
                "ddp_job_broken", "ddp_busy_seconds"} <= set(families), sorted(families)
        busy = _ddprun(ddp_env, "--metrics-port", port, "-np", "1", sys.executable, "-c", "1")
        assert busy.returncode == 2, busy.stderr
        assert f"ddprun: --metrics-port {port}: cannot serve metrics there: Address already in " \
               "use" in busy.stderr, busy.stderr
    finally:
        job.end()


@pytest.mark.torch
def test_torchs_flight_recorder_analyzer_names_the_rank_that_never_submitted(ddp_env, tmp_path):
    fr_trace = pytest.importorskip(
        "torch.distributed.flight_recorder.fr_trace",
        reason="torch's flight-recorder analyzer ships with PyTorch 2 (make test-torch2)")
    del fr_trace
    script = tmp_path / "lagging.py"
    script.write_text(LAGGING)
    records = tmp_path / "records"
    done = _ddprun(ddp_env, "-np", "4", sys.executable, script, records)
    assert done.returncode == 0, done.stderr
    converted = subprocess.run([sys.executable, "-m", "ddp.flight_recorder", "torch",
                                str(records), str(tmp_path / "torch")], env=ddp_env,
                               capture_output=True, text=True, timeout=60)
    assert converted.returncode == 0, converted.stderr
    assert converted.stdout.startswith("4 ranks' dumps for torch's analyzer in"), converted.stdout
    analyzed = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace",
                               str(tmp_path / "torch"), "--prefix", "ddp_trace_rank_"],
                              env=ddp_env, capture_output=True, text=True, timeout=120)
    said = analyzed.stdout + analyzed.stderr
    assert analyzed.returncode == 0, said
    assert "Not all ranks joining collective, sequence number: 6" in said, said
    assert "missing ranks: {2}" in said, said
    assert "collective: ddp:all_reduce" in said and "group info: 0:default_pg" in said, said


TORCH_GROUPS = textwrap.dedent("""
    import sys, time
    import torch
    import torch.distributed as dist
    import ddp, ddp.torch
    dist.init_process_group("ddp", init_method="ddp://")
    rank, out = dist.get_rank(), sys.argv[1]
    x = torch.ones(4)
    for _ in range(2):
        dist.all_reduce(x)
    pair = dist.new_group([0, 2])
    if rank in (0, 2):
        for _ in range(3):
            dist.all_reduce(x, group=pair)
        if rank == 0:  # its 4th in the pair, which rank 2 submits only after the dumps
            work = dist.all_reduce(x, group=pair, async_op=True)
            time.sleep(1.0)
            ddp.dump_flight_recorder(out)
            work.wait()
        else:
            time.sleep(0.5)
            ddp.dump_flight_recorder(out)
            time.sleep(1.0)
            dist.all_reduce(x, group=pair)
    else:
        time.sleep(0.5)
        ddp.dump_flight_recorder(out)
    dist.barrier()
    dist.destroy_process_group()
""")


@pytest.mark.torch
def test_torchs_analyzer_reads_every_group_of_a_torch_job(ddp_env, tmp_path):
    """torch.distributed's new_group groups are libddp jobs of their own: a rank's dump holds
    them all, under torch's names and global ranks, and torch's analyzer names the member of
    group "1" (ranks 0 and 2) that has not submitted its 4th collective (torch 2; on torch 1.13
    the dumps are checked without it)."""
    script = tmp_path / "groups.py"
    script.write_text(TORCH_GROUPS)
    records = tmp_path / "records"
    done = _ddprun(ddp_env, "-np", "3", sys.executable, script, records)
    assert done.returncode == 0, done.stderr
    record = json.loads((records / "ddp_flight_recorder_rank_0.json").read_text())
    assert record["group"] == {"name": "0", "desc": "default_pg", "ranks": [0, 1, 2]}, record
    assert [g["group"] for g in record["groups"]] == [
        {"name": "1", "desc": "undefined", "ranks": [0, 2]}], record["groups"]
    assert [e["state"] for e in record["groups"][0]["entries"]][-4:] == \
        ["completed"] * 3 + ["scheduled"], record["groups"]  # rank 2 has not submitted it
    lone = json.loads((records / "ddp_flight_recorder_rank_1.json").read_text())
    assert lone["groups"] == [], lone["groups"]  # not a member: no job of the pair here
    converted = subprocess.run([sys.executable, "-m", "ddp.flight_recorder", "torch",
                                str(records), str(tmp_path / "torch")], env=ddp_env,
                               capture_output=True, text=True, timeout=60)
    assert converted.returncode == 0, converted.stderr
    with open(tmp_path / "torch" / "ddp_trace_rank_2", "rb") as f:
        dump = pickle.load(f)
    assert dump["pg_config"] == {
        "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"},
        "1": {"name": "1", "desc": "undefined", "ranks": "[0, 2]"}}, dump["pg_config"]
    assert [e["process_group"] for e in dump["entries"]][-3:] == [("1", "undefined")] * 3, dump
    fr_trace = pytest.importorskip(
        "torch.distributed.flight_recorder.fr_trace",
        reason="torch's flight-recorder analyzer ships with PyTorch 2 (make test-torch2)")
    del fr_trace
    analyzed = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace",
                               str(tmp_path / "torch"), "--prefix", "ddp_trace_rank_"],
                              env=ddp_env, capture_output=True, text=True, timeout=120)
    said = analyzed.stdout + analyzed.stderr
    assert analyzed.returncode == 0, said
    assert "missing ranks: {2}" in said and "expected ranks: {0, 2}" in said, said
    assert "group info: 1\n" in said and "Not all ranks joining collective, sequence number: 4" \
        in said, said


def test_the_converter_refuses_what_is_not_a_flight_record(ddp_env, tmp_path):
    (tmp_path / "ddp_flight_recorder_rank_0.json").write_text('{"format": "other"}')
    bad = subprocess.run([sys.executable, "-m", "ddp.flight_recorder", "torch", str(tmp_path)],
                         env=ddp_env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "not a libddp flight record" in bad.stderr, bad.stderr
    empty = subprocess.run([sys.executable, "-m", "ddp.flight_recorder", "torch",
                            str(tmp_path / "none")], env=ddp_env, capture_output=True, text=True,
                           timeout=60)
    assert empty.returncode == 1, empty.stderr


TIMED = textwrap.dedent("""
    import numpy as np
    import ddp
    ddp.init()
    x = np.ones(1 << 18, np.float32)  # its reductions last microseconds: REDUCE slices
    for step in range(5):
        ddp.allreduce(x, name=f"grad{step % 2}")
        ddp.allgather(np.ones((2, 3), np.float32), name=f"gather{step}")
""")


def check_collectives_track(events, rank):
    """A rank's track "collectives": each collective run once, covered exactly by its TRANSFER
    and REDUCE slices in turn; allreduces reduce, allgathers only move data."""
    track = [e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"
             and e["pid"] == rank and e["args"]["name"] == "collectives"]
    assert len(track) == 1, track
    mine = sorted((e for e in events if e["ph"] == "X" and e["pid"] == rank
                   and e["tid"] == track[0]), key=lambda e: (e["ts"], -e["dur"]))
    runs = [e for e in mine if e["name"] not in ("TRANSFER", "REDUCE")]
    assert sorted(e["name"] for e in runs) == ["ALLGATHER"] * 5 + ["ALLREDUCE"] * 5, runs
    reduced = 0
    for run in runs:
        inside = [e for e in mine if e["name"] in ("TRANSFER", "REDUCE")
                  and run["ts"] <= e["ts"] and e["ts"] + e["dur"] <= run["ts"] + run["dur"]]
        at = run["ts"]
        for part in inside:  # in turn, no gap, no overlap
            assert part["ts"] == at and part["dur"] > 0, (run, inside)
            at = part["ts"] + part["dur"]
        assert at == run["ts"] + run["dur"], (run, inside)
        assert run["args"]["tensors"].startswith(("grad", "gather")), run
        if run["name"] == "ALLGATHER":
            assert [p["name"] for p in inside] == ["TRANSFER"], inside
        assert run["args"]["split"] == "transfer and reduce", run
        for part in inside:  # a REDUCE says how much of it was in the kernels
            if part["name"] == "REDUCE":
                assert 0 <= int(part["args"]["kernel_us"]) <= part["dur"], part
                reduced += int(part["args"]["kernel_us"])
    assert reduced > 0, runs


def check_job_timeline(path, ranks, hosts=None):
    """The merged trace as a trace viewer reads it: Chrome's JSON object format, a process per
    rank named after it, complete events with a start and a duration on one clock, the clocks
    measured; returns it."""
    trace = json.loads(path.read_text())
    assert trace["displayTimeUnit"] == "ms" and trace["otherData"]["ranks"] == ranks
    assert trace["otherData"]["clock"] == "rank 0's (measured at start)", trace["otherData"]
    events = trace["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    want = {r: f"rank {r}" + (f" ({hosts[r]})" if hosts else "") for r in range(ranks)}
    assert names == want, names
    sync = {e["pid"]: e["args"] for e in events if e["ph"] == "M" and e["name"] == "ddp_clock_sync"}
    assert sorted(sync) == list(range(ranks)) and sync[0]["offset_us"] == 0, sync
    assert all(s["rounds"] == 9 and s["spread_us"] >= 0 for s in sync.values()), sync
    slices = [e for e in events if e["ph"] == "X"]
    assert all(isinstance(e["ts"], int) and e["ts"] >= 0 and e["dur"] >= 0 for e in slices)
    for rank in range(ranks):
        mine = {e["name"] for e in slices if e["pid"] == rank}
        assert {"NEGOTIATE", "ALLREDUCE", "ALLGATHER"} <= mine, (rank, mine)
        for e in slices:  # the collective's split: its reduction kernels and the rest
            if e["pid"] == rank and e["name"] == "ALLREDUCE" and "tensors" not in e["args"]:
                reduction, rest = int(e["args"]["reduction_us"]), int(e["args"]["transfer_us"])
                assert reduction >= 0 and rest >= 0 and reduction + rest <= e["dur"] + 1, e
        check_collectives_track(events, rank)
        sent = [e for e in slices if e["pid"] == rank and e["name"] == "ALLGATHER"
                and "tensors" not in e["args"]]
        assert all(int(e["args"]["bytes"]) == 24 * ranks for e in sent), sent  # the result's
    # One clock: the same allreduce ends on every rank within the run's own span.
    ends = [max(e["ts"] + e["dur"] for e in slices if e["pid"] == r) for r in range(ranks)]
    span = max(e["ts"] + e["dur"] for e in slices) - min(e["ts"] for e in slices)
    assert max(ends) - min(ends) <= span, (ends, span)
    return trace


def test_job_timeline_merges_every_rank_on_one_clock(ddp_env, tmp_path):
    script = tmp_path / "timed.py"
    script.write_text(TIMED)
    out = tmp_path / "job.json"
    done = _ddprun(ddp_env, "-np", 3, "--job-timeline", out, sys.executable, script)
    assert done.returncode == 0, done.stderr
    assert f"ddprun: job timeline: {out} (3 ranks on rank 0's clock; " in done.stderr, done.stderr
    check_job_timeline(out, 3)
    assert not (tmp_path / "job.json.ranks").exists()  # the ranks' files, merged, are gone
    # ddp-timeline merge reads the ranks' files as they are, a killed rank's (no "]") too.
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    again = _ddprun({**ddp_env, "DDP_TIMELINE": str(ranks / "r{rank}.json"),
                     "DDP_TIMELINE_CLOCK_SYNC": "1"}, "-np", 2, sys.executable, script)
    assert again.returncode == 0, again.stderr
    cut = ranks / "r1.json"
    cut.write_text(cut.read_text().rstrip().rstrip("]"))
    merged = subprocess.run([sys.executable, "-m", "ddp.timeline", "merge", "-o",
                             str(tmp_path / "m.json"), str(ranks / "r0.json"), str(cut)],
                            env=ddp_env, capture_output=True, text=True, timeout=60)
    assert merged.returncode == 0, merged.stderr
    assert "2 ranks in" in merged.stdout and "rank 0's (measured at start)" in merged.stdout
    check_job_timeline(tmp_path / "m.json", 2)
    # ddp-timeline render draws it (matplotlib: Debian's, which make deps installs).
    pytest.importorskip("matplotlib", reason="ddp-timeline render needs matplotlib (make deps)")
    png = tmp_path / "m.png"
    drawn = subprocess.run([sys.executable, "-m", "ddp.timeline", "render",
                            str(tmp_path / "m.json"), "-o", str(png)], env=ddp_env,
                           capture_output=True, text=True, timeout=120)
    assert drawn.returncode == 0, drawn.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_job_timeline_that_cannot_be_written_stops_ddprun_before_any_rank(ddp_env, tmp_path):
    marker = tmp_path / "started"
    done = _ddprun(ddp_env, "-np", 2, "--job-timeline", tmp_path / "no" / "such" / "job.json",
                   sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert done.returncode == 2, done.stderr
    assert "ddprun: --job-timeline " in done.stderr and "cannot be written: No such file or " \
        "directory" in done.stderr, done.stderr
    assert not marker.exists()
    both = _ddprun(ddp_env, "-np", 2, "--job-timeline", tmp_path / "j.json",
                   "--timeline-filename", tmp_path / "t.json", sys.executable, "-c", "1")
    assert both.returncode == 2 and "not both" in both.stderr, both.stderr
