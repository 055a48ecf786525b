# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Tests of the ddprun launcher (the ddp/run/ package) with real processes.

Subprocess tests run `python -m ddp.run` and need the compiled store (ddp._ddp.StoreServer); they
are skipped, with that reason, where it is not built. The in-process tests load ddp/run/ from its
folder, as a package of its own, and replace only the store, so they run everywhere.
"""
import importlib.util
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

RUN_DIR = pathlib.Path(__file__).resolve().parents[2] / "bindings" / "python" / "ddp" / "run"
HANG = 60  # seconds a test would take if the launcher hung; every job must end well before
QUICK = 20  # ...and within this

# Children: python snippets. `ready()` tells the test (and peers) this rank is up and its pid;
# `wait_for_peers()` lets a rank fail only once the others are running, so nothing races.
PRELUDE = textwrap.dedent("""
    import json, os, pathlib, signal, socket, sys, time
    rank, size = int(os.environ["DDP_RANK"]), int(os.environ["DDP_SIZE"])
    here = pathlib.Path(sys.argv[1])
    def ready():
        print("pid", os.getpid(), flush=True)
        (here / f"ready.{rank}").touch()
    def wait_for_peers():
        end = time.monotonic() + 30
        while not all((here / f"ready.{r}").exists() for r in range(size) if r != rank):
            if time.monotonic() > end:
                sys.exit("peers never became ready")
            time.sleep(0.01)
""")


def child(body):
    return [sys.executable, "-c", PRELUDE + textwrap.dedent(body)]


def pids_in(stdout):
    return [int(p) for p in re.findall(rb"^\[\d+\] pid (\d+)$", stdout, re.M)]


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="session")
def ddprun(ddp_env):
    """Runs `python -m ddp.run ARGS...` to the end; returns (CompletedProcess, seconds)."""
    probe = subprocess.run([sys.executable, "-c", "from ddp import _ddp; _ddp.StoreServer"],
                           env=ddp_env, capture_output=True, text=True)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"ddp._ddp.StoreServer is not built, so ddprun cannot host its store: {last}")

    def run(*args, env=None):
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "ddp.run", *map(str, args)],
                              env={**ddp_env, **(env or {})}, capture_output=True, timeout=HANG)
        return done, time.monotonic() - start

    run.env = ddp_env
    return run


@pytest.fixture(scope="session")
def ddp_cli_env(ddp_env):
    """The environment in which `python -m ddp.run` starts (argument errors need no store)."""
    probe = subprocess.run([sys.executable, "-c", "import ddp.run"], env=ddp_env,
                           capture_output=True, text=True)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"the ddp package does not import: {last}")
    return ddp_env


@pytest.fixture(scope="module")
def run_mod():
    """ddp/run/ itself, loaded from its folder as a package of its own (as the agent on another
    host loads it): no `ddp`, no extension needed. Its modules are attributes (run_mod.job)."""
    name = "ddp_run_under_test"
    spec = importlib.util.spec_from_file_location(name, RUN_DIR / "__init__.py",
                                                  submodule_search_locations=[str(RUN_DIR)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    for part in ("agent", "args", "env", "job", "static_job", "output"):
        importlib.import_module(f"{name}.{part}")
    yield module
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]


# --- output -----------------------------------------------------------------------------------


def test_every_line_has_its_rank_and_streams_stay_apart(ddprun, tmp_path):
    done, _ = ddprun("-np", 3, *child("""
        for i in range(3):
            print(f"out {rank} {i}")
            print(f"err {rank} {i}", file=sys.stderr)
    """), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(b"ddprun") == 0  # silent on success
    for stream, word in ((done.stdout, "out"), (done.stderr, "err")):
        lines = stream.decode().splitlines()
        assert sorted(lines) == sorted(f"[{r}] {word} {r} {i}" for r in range(3) for i in range(3))


def test_carriage_returns_end_lines_and_partial_lines_are_flushed(ddprun, tmp_path):
    done, _ = ddprun("-np", 1, *child("""
        for piece in (b"10%\\r", b"50%\\r", b"done\\n", b"crlf\\r", b"\\nnext\\r\\n", b"tail"):
            os.write(1, piece)
        os.write(2, b"e1\\ne2")
    """), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"[0] 10%\r[0] 50%\r[0] done\n[0] crlf\r\n[0] next\r\n[0] tail\n"
    assert done.stderr == b"[0] e1\n[0] e2\n"


def test_lines_from_different_ranks_never_interleave(ddprun, tmp_path):
    done, _ = ddprun("-np", 4, *child("""
        for i in range(300):  # each line in three writes, so the pipes see broken lines
            os.write(1, f"{rank}-{i} ".encode())
            os.write(1, str(rank).encode() * 2000)
            os.write(1, b"\\n")
    """), tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert len(lines) == 4 * 300
    for line in lines:
        assert re.fullmatch(r"\[(\d)\] \1-\d+ \1{2000}", line), line[:80]


# --- environment ------------------------------------------------------------------------------

ENV_DUMP = """
    with socket.create_connection((os.environ["DDP_RENDEZVOUS_ADDR"],
                                   int(os.environ["DDP_RENDEZVOUS_PORT"])), timeout=10):
        pass  # the launcher's store is listening there
    (here / f"env.{rank}.json").write_text(json.dumps(dict(os.environ)))
"""


def rank_envs(tmp_path, size):
    return [json.loads((tmp_path / f"env.{r}.json").read_text()) for r in range(size)]


def test_ranks_get_their_environment_and_the_token_stays_secret(ddprun, tmp_path):
    stale = {"OMPI_COMM_WORLD_RANK": "5", "PMI_RANK": "3", "PMIX_RANK": "2", "DDP_RANK": "9",
             "DDP_JOB_TOKEN": "stale-token", "DDP_LOCAL_RANK": "4", "DDP_RENDEZVOUS_PORT": "1",
             "HOROVOD_RANK": "7", "KEPT_BY_DDPRUN": "yes"}
    done, _ = ddprun("--verbose", "-np", 3, *child(ENV_DUMP), tmp_path, env=stale)
    assert done.returncode == 0, done.stderr
    envs = rank_envs(tmp_path, 3)
    port, token = envs[0]["DDP_RENDEZVOUS_PORT"], envs[0]["DDP_JOB_TOKEN"]
    for r, env in enumerate(envs):
        want = {"DDP_RANK": str(r), "DDP_SIZE": "3", "DDP_LOCAL_RANK": str(r),
                "DDP_LOCAL_SIZE": "3", "DDP_CROSS_RANK": "0", "DDP_CROSS_SIZE": "1",
                "DDP_RENDEZVOUS_ADDR": "127.0.0.1", "DDP_RENDEZVOUS_PORT": port,
                "DDP_RENDEZVOUS_EXTERNAL": "1", "DDP_JOB_TOKEN": token, "PYTHONUNBUFFERED": "1",
                "KEPT_BY_DDPRUN": "yes",
                # horovodrun's names, for scripts written for Horovod
                "HOROVOD_RANK": str(r), "HOROVOD_SIZE": "3", "HOROVOD_LOCAL_RANK": str(r),
                "HOROVOD_LOCAL_SIZE": "3", "HOROVOD_CROSS_RANK": "0", "HOROVOD_CROSS_SIZE": "1"}
        assert {k: env.get(k) for k in want} == want
        assert not [k for k in env if k.startswith(("OMPI_", "PMI_", "PMIX_"))]
    assert re.fullmatch(r"[0-9a-f]{32}", token)
    assert 0 < int(port) < 65536
    assert f"127.0.0.1:{port}".encode() in done.stderr  # --verbose tells the port...
    assert b"ranks keep the memory they free for reuse" in done.stderr  # ... and the allocator
    assert token.encode() not in done.stdout + done.stderr  # ...never the token
    for r in range(3):
        assert f"ddprun: rank {r} exited with status 0".encode() in done.stderr


def test_flags_become_environment_variables(ddprun, tmp_path):
    timeline = tmp_path / "timeline-{rank}.json"
    done, _ = ddprun("-np", 2, "--fusion-threshold-mb", "1.5", "--cycle-time-ms", "2.5",
                     "--autotune", "--start-timeout", "30", "--timeline-filename", timeline,
                     *child(ENV_DUMP), tmp_path)
    assert done.returncode == 0, done.stderr
    for r, env in enumerate(rank_envs(tmp_path, 2)):
        assert env["DDP_FUSION_THRESHOLD"] == str(3 * 1024 * 1024 // 2)
        assert env["DDP_CYCLE_TIME_MS"] == "2.5"
        assert env["DDP_AUTOTUNE"] == "1"
        assert env["DDP_START_TIMEOUT_SECONDS"] == "30"
        assert env["DDP_TIMELINE"] == str(tmp_path / f"timeline-{r}.json")


def test_one_timeline_is_written_by_rank_0_only(ddprun, tmp_path):
    preset = {k: v for k, v in ddprun.env.items()
             if k in ("DDP_FUSION_THRESHOLD", "DDP_AUTOTUNE", "DDP_TIMELINE")}
    assert not preset, "the test's own environment sets engine variables"
    done, _ = ddprun("-np", 2, "--fusion-threshold-mb", "0.25", "--timeline-filename",
                     tmp_path / "timeline.json", *child(ENV_DUMP), tmp_path)
    assert done.returncode == 0, done.stderr
    env0, env1 = rank_envs(tmp_path, 2)
    assert env0["DDP_TIMELINE"] == str(tmp_path / "timeline.json")
    assert "DDP_TIMELINE" not in env1
    assert env0["DDP_FUSION_THRESHOLD"] == env1["DDP_FUSION_THRESHOLD"] == str(262144)
    assert "DDP_AUTOTUNE" not in env0 and "DDP_CYCLE_TIME_MS" not in env0


# --- failures ---------------------------------------------------------------------------------


def test_a_failing_rank_stops_the_others(ddprun, tmp_path):
    done, seconds = ddprun("-np", 3, *child("""
        ready()
        if rank == 1:
            wait_for_peers()
            sys.exit("rank 1 gives up")
        time.sleep(60)
    """), tmp_path)
    assert seconds < QUICK
    assert done.returncode == 1
    err = done.stderr.decode()
    assert "[1] rank 1 gives up\n" in err
    assert "ddprun: rank 1 exited with status 1\nddprun: stopping the other 2 ranks\n" in err
    assert err.index("[1] rank 1 gives up") < err.index("ddprun: rank 1 exited")
    assert err.count("ddprun: rank") == 1  # the stopped ranks are not blamed
    pids = pids_in(done.stdout)
    assert len(pids) == 3 and not any(map(alive, pids))


def test_the_culprit_is_named_not_the_survivor_that_exits_first(ddprun, tmp_path):
    # Rank 1 stops; ranks 0 and 2 time out on it and exit 1 first. Their libddp reports whom it
    # blames on DDP_REPORT_FD, so ddprun names rank 1; the stopped rank is continued and ended.
    done, seconds = ddprun("-np", 3, *child("""
        import numpy as np
        import ddp
        ddp.init()
        ready()
        ddp.barrier()
        if rank == 1:
            os.kill(os.getpid(), signal.SIGSTOP)
        ddp.allreduce(np.ones(4, dtype=np.float32), name="after")
        sys.exit("an allreduce with a stopped rank succeeded")
    """), tmp_path, env={"DDP_TIMEOUT_SECONDS": "2"})
    assert seconds < QUICK
    assert done.returncode == 1
    said = [line for line in done.stderr.decode().splitlines() if line.startswith("ddprun")]
    assert re.match(r"ddprun: rank 1 broke the job, as rank [02] reports: \S", said[0]), said
    assert "rank 1 (" in said[0] and "DDP_TIMEOUT_SECONDS" in said[0], said
    assert re.fullmatch(r"ddprun: rank [02] exited with status 1", said[1]), said
    assert not any(map(alive, pids_in(done.stdout)))


def test_a_rank_killed_by_a_signal_is_named(ddprun, tmp_path):
    done, seconds = ddprun("-np", 2, *child("""
        ready()
        if rank == 0:
            wait_for_peers()
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
    """), tmp_path)
    assert seconds < QUICK
    assert done.returncode == 128 + 9
    assert b"ddprun: rank 0 was killed by signal SIGKILL (9)\n" in done.stderr
    assert b"ddprun: stopping the other 1 rank\n" in done.stderr
    assert not any(map(alive, pids_in(done.stdout)))


def test_a_killed_ranks_shared_memory_is_removed_and_a_live_ones_kept(ddprun, tmp_path):
    # Rank 0 makes a segment named as libddp names its own (segment.cc), and a libfabric shm
    # region named as ofi_plugin.cc names them, then is killed, as a
    # rank killed during start-up, before its local peers attached, would be. The launcher
    # removes it; a segment of a process still alive (this test's) stays.
    live = pathlib.Path(f"/dev/shm/ddp-{os.getuid()}-{os.stat('/proc/self/ns/pid').st_ino}-"
                        f"{os.getpid()}-0-feedfacecafebeef")
    live.write_bytes(b"")
    try:
        done, seconds = ddprun("-np", 2, *child("""
            ready()
            if rank == 0:
                ns = os.stat("/proc/self/ns/pid").st_ino
                start = open(f"/proc/{os.getpid()}/stat").read().rsplit(")", 1)[1].split()[19]
                name = f"/dev/shm/ddp-{os.getuid()}-{ns}-{os.getpid()}-{start}-0123456789abcdef"
                pathlib.Path(name).write_bytes(b"")
                print("segment", name, flush=True)
                region = f"/dev/shm/ddp-ofi-{os.getpid()}-00000000000000cc"
                pathlib.Path(region).write_bytes(b"")
                print("segment", region, flush=True)
                wait_for_peers()
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)
        """), tmp_path)
        assert done.returncode == 128 + 9, done.stderr
        made = re.findall(rb"^\[0\] segment (\S+)$", done.stdout, re.M)
        assert len(made) == 2, done.stdout
        for name in made:
            assert not os.path.exists(name.decode()), name
        assert live.exists()
    finally:
        live.unlink(missing_ok=True)


def test_a_rank_that_ignores_sigterm_is_killed_after_the_grace_period(ddprun, tmp_path):
    done, seconds = ddprun("-np", 2, *child("""
        if rank == 1:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        ready()
        if rank == 0:
            wait_for_peers()
            sys.exit(3)
        time.sleep(60)
    """), tmp_path)
    assert seconds < QUICK
    assert done.returncode == 3
    assert b"ddprun: rank 0 exited with status 3\n" in done.stderr
    assert done.stderr.count(b"ddprun: rank") == 1
    assert not any(map(alive, pids_in(done.stdout)))


def test_a_missing_command_is_reported(ddprun):
    done, _ = ddprun("-np", 2, "no-such-command-for-ddprun", "--flag")
    assert done.returncode == 127
    assert b"no-such-command-for-ddprun: command not found" in done.stderr
    assert done.stdout == b""


# --- signals to the launcher ------------------------------------------------------------------


@pytest.mark.parametrize("signum, verb", [(signal.SIGINT, "interrupted"),
                                          (signal.SIGTERM, "terminated")], ids=["int", "term"])
def test_a_signal_to_the_launcher_is_forwarded_to_every_rank(ddprun, tmp_path, signum, verb):
    launcher = subprocess.Popen(
        [sys.executable, "-m", "ddp.run", "-np", "2", *child("""
            def stop(signum, frame):
                print("got", signal.Signals(signum).name, flush=True)
                sys.exit(0)
            signal.signal(signal.SIGINT, stop)
            signal.signal(signal.SIGTERM, stop)
            ready()
            time.sleep(60)
        """), str(tmp_path)], env=ddprun.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        end = time.monotonic() + QUICK
        while not all((tmp_path / f"ready.{r}").exists() for r in range(2)):
            assert time.monotonic() < end and launcher.poll() is None, "ranks never started"
            time.sleep(0.01)
        start = time.monotonic()
        launcher.send_signal(signum)
        out, err = launcher.communicate(timeout=HANG)
    finally:
        launcher.kill()
    assert time.monotonic() - start < QUICK
    assert launcher.returncode == 128 + signum
    name = signal.Signals(signum).name.encode()
    assert sorted(re.findall(rb"^\[(\d)\] got (\w+)$", out, re.M)) == [(b"0", name), (b"1", name)]
    assert f"ddprun: {verb}, stopping 2 ranks\n".encode() in err
    assert b"exited with status" not in err
    pids = pids_in(out)
    assert len(pids) == 2 and not any(map(alive, pids))


# --- command line -----------------------------------------------------------------------------


@pytest.mark.parametrize("args, message", [
    ([], "-np"),
    (["-np", "2"], "missing COMMAND"),
    (["-np", "0", "true"], "-np must be at least 1"),
    (["-np", "two", "true"], "invalid int value"),
    (["-np", "2", "--fusion-threshold-mb", "-1", "true"], "must be >= 0"),
    (["-np", "2", "--start-timeout", "0", "true"], "must be > 0"),
])
def test_argument_errors(ddp_cli_env, args, message):
    done = subprocess.run([sys.executable, "-m", "ddp.run", *args], env=ddp_cli_env,
                          capture_output=True, text=True, timeout=HANG)
    assert done.returncode == 2
    assert message in done.stderr and "usage: ddprun" in done.stderr


def test_help_documents_the_timeline_rule(ddp_cli_env):
    done = subprocess.run([sys.executable, "-m", "ddp.run", "--help"], env=ddp_cli_env,
                          capture_output=True, text=True, timeout=HANG)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "COMMAND..." in text and "{rank}" in text and "only rank 0 writes F" in text


# --- in process: the pieces, and a whole job with a stand-in store ----------------------------


def test_prefixer_cuts_lines_at_newlines_and_carriage_returns(run_mod):
    p = run_mod.output.Prefixer(b"[7] ")
    assert p.feed(b"a\nb") == [b"[7] a\n"]
    assert p.feed(b"c") == []
    assert p.feed(b"d\r") == [b"[7] bcd\r"]
    assert p.feed(b"\ne\r\n\r") == [b"\n", b"[7] e\r\n", b"[7] \r"]  # "\r" + "\n" cut by a read
    assert p.feed(b"x\n") == [b"[7] x\n"]
    assert p.feed(b"") == []
    assert p.feed(b"no end") == []
    assert p.close() == [b"[7] no end\n"]
    assert p.close() == []


def test_rank_env_maps_flags(run_mod):
    args = run_mod.args.parse_args(["-np", "4", "--fusion-threshold-mb", "0.5", "--cycle-time-ms",
                                "5", "--timeline-filename", "t.json", "--", "prog", "-np", "9"])
    assert args.command == ["prog", "-np", "9"]
    base = {"DDP_TIMELINE": "inherited.json", "OMPI_COMM_WORLD_SIZE": "8", "PATH": "/bin"}
    env0 = run_mod.env.rank_env(base, 0, args, "127.0.0.1", 1234, "t" * 32)
    env3 = run_mod.env.rank_env(base, 3, args, "127.0.0.1", 1234, "t" * 32)
    assert env0["DDP_FUSION_THRESHOLD"] == "524288" and env0["DDP_CYCLE_TIME_MS"] == "5"
    assert env0["DDP_TIMELINE"] == "t.json" and "DDP_TIMELINE" not in env3
    assert env3["DDP_RANK"] == "3" and env3["DDP_LOCAL_SIZE"] == "4"
    assert "OMPI_COMM_WORLD_SIZE" not in env3 and env3["PATH"] == "/bin"
    assert "DDP_AUTOTUNE" not in env3 and "DDP_START_TIMEOUT_SECONDS" not in env3
    assert "DDP_HOSTNAME" not in env3  # one machine: libddp's own host name


# --- several hosts: parsing and placement (the jobs themselves: test_run_hosts.py) -----------


def test_hosts_and_hostfiles_parse_as_mpi_and_horovod_write_them(run_mod):
    H = run_mod.Host
    assert run_mod.parse_hosts("a:4, b:2,c") == [H("a", 4), H("b", 2), H("c", 1)]
    assert run_mod.parse_hosts("[fe80::1]:2") == [H("fe80::1", 2)]
    text = "# mpi-operator\nworker-0 slots=2\n\nworker-1 slots=2 max_slots=4 # comment\n" \
           "worker-2:3\nworker-3\n"
    assert run_mod.parse_hostfile(text) == [H("worker-0", 2), H("worker-1", 2), H("worker-2", 3),
                                            H("worker-3", 1)]
    for bad in ("a:0", "a:x", ":2", "a:-1"):
        with pytest.raises(ValueError, match="is not HOST or HOST:SLOTS"):
            run_mod.parse_hosts(bad)
    with pytest.raises(ValueError, match=r"hf:2: 'b cores=4' is not 'HOST slots=N'"):
        run_mod.parse_hostfile("a slots=1\nb cores=4\n", "hf")


def test_ranks_fill_hosts_in_order_with_horovods_local_and_cross_ranks(run_mod):
    H, P = run_mod.Host, run_mod.Place
    assert run_mod.place([H("a", 2), H("b", 2)], 4) == [
        P("a", 0, 2, 0, 2), P("a", 1, 2, 0, 2), P("b", 0, 2, 1, 2), P("b", 1, 2, 1, 2)]
    # Uneven: local rank 1 exists on a only, so its cross size is 1; unused hosts get nothing.
    assert run_mod.place([H("a", 2), H("b", 1), H("c", 5)], 3) == [
        P("a", 0, 2, 0, 2), P("a", 1, 2, 0, 1), P("b", 0, 1, 1, 2)]
    with pytest.raises(ValueError, match=r"-np 5 but the hosts have only 4 slots \(a:2, b:2\)"):
        run_mod.place([H("a", 2), H("b", 2)], 5)
    with pytest.raises(ValueError, match="host a is given twice"):
        run_mod.place([H("a", 2), H("a", 2)], 2)


def test_rank_env_on_several_hosts_names_the_host(run_mod):
    args = run_mod.args.parse_args(["-np", "3", "-H", "a:2,b:1", "prog"])
    env = run_mod.env.rank_env({}, 2, args, "10.0.0.1", 99, "t" * 32, args.places[2])
    assert (env["DDP_HOSTNAME"], env["DDP_LOCAL_RANK"], env["DDP_LOCAL_SIZE"],
            env["DDP_CROSS_RANK"], env["DDP_CROSS_SIZE"]) == ("b", "0", "1", "1", "2")
    assert (env["DDP_RENDEZVOUS_ADDR"], env["DDP_RENDEZVOUS_PORT"]) == ("10.0.0.1", "99")


def test_remote_shell_commands_carry_no_secret(run_mod):
    args = run_mod.args.parse_args(["-np", "2", "-H", "a,b", "--ssh-port", "2222",
                                "--ssh-identity-file", "/k/id", "prog"])
    argv = run_mod.agent.remote_command(args, "b")
    assert argv[:7] == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-p", "2222"]
    assert argv[7:10] == ["-i", "/k/id", "b"] and argv[10].endswith("/ddp/run/__main__.py --_agent")
    args = run_mod.args.parse_args(["-np", "2", "-H", "a,b", "--rsh", "my-rsh --flag", "prog"])
    assert run_mod.agent.remote_command(args, "b")[:3] == ["my-rsh", "--flag", "b"]


def test_several_host_arguments_are_checked(run_mod, capsys, tmp_path):
    cases = [
        (["-H", "a", "--hostfile", "f"], "give -H or --hostfile, not both"),
        (["-H", "a:1"], "-np 2 but the hosts have only 1 slot (a:1)"),
        (["--hostfile", str(tmp_path / "none")], "No such file or directory"),
        (["--nnodes", "2", "--node-rank", "0"], "--nnodes 2 needs node 0's address"),
        (["--nnodes", "2", "--rendezvous", "h:1"], "go together"),
        (["--nnodes", "2", "--node-rank", "2", "--rendezvous", "h:1"], "not in 0..1"),
        (["--nnodes", "3", "--node-rank", "0", "--rendezvous", "h:1"], "do not split evenly"),
        (["--nnodes", "2", "--node-rank", "0", "--rendezvous", "h"], "is not HOST:PORT"),
    ]
    for extra, message in cases:
        assert run_mod.main(["-np", "2", *extra, "prog"]) == 2, extra
        assert message in capsys.readouterr().err, extra


def test_this_machine_is_local_and_others_are_not(run_mod):
    assert run_mod.is_local("localhost") and run_mod.is_local("127.0.0.1")
    assert not run_mod.is_local("192.0.2.1")  # TEST-NET-1: never an address of a machine here
    assert not run_mod.is_local("no-such-host.invalid")


def test_main_returns_2_on_bad_arguments(run_mod, capsys):
    assert run_mod.main(["-np", "0", "true"]) == 2
    assert "-np must be at least 1" in capsys.readouterr().err


@pytest.fixture
def fake_store(run_mod, monkeypatch):
    """Replaces the compiled store with a listening socket; records that it was closed."""
    closed = []

    def start(token, addr="127.0.0.1", port=0):
        assert re.fullmatch(r"[0-9a-f]{32}", token) and (addr, port) == ("127.0.0.1", 0)
        sock = socket.create_server(("127.0.0.1", 0))
        return sock.getsockname()[1], lambda: closed.append(sock.close())

    monkeypatch.setattr(run_mod.static_job, "start_store", start)
    return closed


def test_in_process_job_runs_and_closes_the_store(run_mod, fake_store, capsysbinary, tmp_path):
    code = run_mod.main(["-np", "2", *child("""
        print("hello from", rank)
        print("to stderr", file=sys.stderr)
    """), str(tmp_path)])
    out, err = capsysbinary.readouterr()
    assert code == 0, err
    assert sorted(out.splitlines()) == [b"[0] hello from 0", b"[1] hello from 1"]
    assert sorted(err.splitlines()) == [b"[0] to stderr", b"[1] to stderr"]
    assert len(fake_store) == 1


def test_in_process_failure_kills_a_rank_that_ignores_sigterm(
        run_mod, fake_store, capsysbinary, tmp_path, monkeypatch):
    monkeypatch.setattr(run_mod.job, "GRACE_SECONDS", 0.5)
    start = time.monotonic()
    code = run_mod.main(["-np", "3", *child("""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        ready()
        if rank == 2:
            wait_for_peers()
            sys.exit(4)
        time.sleep(60)
    """), str(tmp_path)])
    out, err = capsysbinary.readouterr()
    assert time.monotonic() - start < QUICK
    assert code == 4
    assert b"ddprun: rank 2 exited with status 4\nddprun: stopping the other 2 ranks\n" in err
    assert err.count(b"ddprun: rank") == 1
    assert len(fake_store) == 1
    pids = pids_in(out)
    assert len(pids) == 3 and not any(map(alive, pids))


def test_in_process_missing_command(run_mod, fake_store, capsysbinary):
    assert run_mod.main(["-np", "3", "/nonexistent/ddprun-test-program"]) == 127
    assert b"/nonexistent/ddprun-test-program: command not found" in capsysbinary.readouterr().err
    assert len(fake_store) == 1


def test_in_process_second_interrupt_kills_at_once(run_mod, fake_store, capsysbinary, tmp_path,
                                                    monkeypatch):
    # Only the second Ctrl-C can end it soon.
    monkeypatch.setattr(run_mod.job, "GRACE_SECONDS", HANG)

    def press_ctrl_c_twice():
        marks = [tmp_path / f"sigint.{r}" for r in range(2)]
        for files in ([tmp_path / f"ready.{r}" for r in range(2)], marks):
            end = time.monotonic() + QUICK
            while not all(f.exists() for f in files) and time.monotonic() < end:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)  # the first is forwarded, the ranks ignore it

    presser = threading.Thread(target=press_ctrl_c_twice)
    start = time.monotonic()
    presser.start()
    code = run_mod.main(["-np", "2", "--verbose", *child("""
        signal.signal(signal.SIGINT, lambda *_: (here / f"sigint.{rank}").touch())
        ready()
        time.sleep(60)
    """), str(tmp_path)])
    presser.join()
    err = capsysbinary.readouterr().err
    assert time.monotonic() - start < QUICK
    assert code == 130
    assert b"ddprun: interrupted, stopping 2 ranks\n" in err
    assert err.count(b"was killed by signal SIGKILL (9)") == 2
