# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddprun's horovodrun and torchrun flags, each with a job of 2 ranks where it changes
what the ranks see or print, and the combinations it refuses.

Most jobs run ddprun in this process, loaded from bindings/python/ddp/run/ as a package of its
own, with the compiled store replaced by a listening socket: the ranks are real processes that
print or dump what they were given and never meet. Two need the real launcher (`--version` and a
job whose ranks call ddp.init()) and are skipped, saying why, where ddp does not import.
"""
import importlib
import importlib.util
import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import textwrap

import pytest

RUN_DIR = pathlib.Path(__file__).resolve().parents[2] / "bindings" / "python" / "ddp" / "run"
HANG = 60  # seconds a test would take if the launcher hung

# Each rank writes its environment to DIR/env.RANK.json (DIR: the last argument).
DUMP_ENV = textwrap.dedent("""
    import json, os, pathlib, sys
    rank = os.environ["DDP_RANK"]
    (pathlib.Path(sys.argv[1]) / f"env.{rank}.json").write_text(json.dumps(dict(os.environ)))
""")

TORCHRUN_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                  "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR",
                  "MASTER_PORT")
# What an outer launcher (torchrun, its agent) leaves in the environment ddprun starts in.
STALE = {"RANK": "5", "WORLD_SIZE": "9", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4",
         "GROUP_RANK": "2", "GROUP_WORLD_SIZE": "3", "ROLE_RANK": "5", "ROLE_WORLD_SIZE": "9",
         "ROLE_NAME": "trainer", "MASTER_ADDR": "10.9.9.9", "MASTER_PORT": "1",
         "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RUN_ID": "old",
         "SLURM_JOB_ID": "77"}


@pytest.fixture(scope="module")
def ddprun():
    """ddp/run/ loaded from its folder (no `ddp`, no extension); its modules as attributes."""
    name = "ddp_run_flags_under_test"
    spec = importlib.util.spec_from_file_location(name, RUN_DIR / "__init__.py",
                                                  submodule_search_locations=[str(RUN_DIR)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    for part in ("args", "env", "static_job", "output"):
        importlib.import_module(f"{name}.{part}")
    yield module
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]


@pytest.fixture
def fake_store(ddprun, monkeypatch):
    """The compiled store replaced by a listening socket; records where it was asked to be."""
    started = []

    def start(token, addr="127.0.0.1", port=0):
        sock = socket.create_server(("127.0.0.1", 0))
        started.append((addr, port))
        return sock.getsockname()[1], sock.close

    monkeypatch.setattr(ddprun.static_job, "start_store", start)
    return started


@pytest.fixture
def stale_env(monkeypatch):
    for key, value in STALE.items():
        monkeypatch.setenv(key, value)


def job(ddprun, capsysbinary, *argv):
    """Runs ddprun ARGV in this process; returns (exit status, stdout, stderr)."""
    code = ddprun.main([str(a) for a in argv])
    out, err = capsysbinary.readouterr()
    return code, out, err


def dumped(tmp_path, ranks):
    return [json.loads((tmp_path / f"env.{r}.json").read_text()) for r in ranks]


def torchrun_view(env):
    return {k: env.get(k) for k in TORCHRUN_NAMES}


# --- torchrun's variables -----------------------------------------------------------------------


def test_every_rank_gets_torchruns_variables_agreeing_with_ddps(
        ddprun, fake_store, stale_env, capsysbinary, tmp_path):
    code, _, err = job(ddprun, capsysbinary, "-np", 2, sys.executable, "-c", DUMP_ENV, tmp_path)
    assert code == 0, err
    envs = dumped(tmp_path, range(2))
    master_port = envs[0]["MASTER_PORT"]
    for r, env in enumerate(envs):
        assert torchrun_view(env) == {
            "RANK": env["DDP_RANK"], "WORLD_SIZE": env["DDP_SIZE"],
            "LOCAL_RANK": env["DDP_LOCAL_RANK"], "LOCAL_WORLD_SIZE": env["DDP_LOCAL_SIZE"],
            "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_RANK": str(r),
            "ROLE_WORLD_SIZE": "2", "ROLE_NAME": "default", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": master_port}
        assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == (str(r), "2", str(r))
        assert not [k for k in env if k.startswith("TORCHELASTIC_")]  # no agent store here
        assert env["SLURM_JOB_ID"] == "77"  # another launcher's allocation is left alone
    # torch.distributed's store gets a port of its own, not the rendezvous store's.
    assert 0 < int(master_port) < 65536
    assert master_port != envs[0]["DDP_RENDEZVOUS_PORT"]


def test_torchruns_standalone_form_gives_the_ranks_of_np(ddprun, fake_store, capsysbinary,
                                                         tmp_path):
    code, _, err = job(ddprun, capsysbinary, "--standalone", "--nproc_per_node", 2,
                       "--master-port", 29555, sys.executable, "-c", DUMP_ENV, tmp_path)
    assert code == 0, err
    assert fake_store == [("127.0.0.1", 0)]  # ddprun's own store: this machine, a free port
    for r, env in enumerate(dumped(tmp_path, range(2))):
        assert (env["DDP_RANK"], env["DDP_SIZE"], env["DDP_LOCAL_RANK"], env["DDP_LOCAL_SIZE"],
                env["DDP_CROSS_RANK"], env["DDP_CROSS_SIZE"]) == (str(r), "2", str(r), "2", "0",
                                                                  "1")
        assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"], env["MASTER_PORT"]) == (
            str(r), "2", "127.0.0.1", "29555")


def test_torchruns_multi_node_form_is_ddpruns_per_node_launch(ddprun, fake_store, monkeypatch,
                                                              capsysbinary, tmp_path):
    # Node 1 of 2: it hosts no store; its ranks meet node 0's, on the port after --master-port,
    # and MASTER_PORT is --master-port, for torch.distributed's store on rank 0.
    monkeypatch.setenv("DDP_JOB_TOKEN", "f" * 32)
    monkeypatch.setenv("DDP_HOSTNAME", "node1")
    code, out, err = job(ddprun, capsysbinary, "--nnodes", 2, "--node_rank", 1,
                         "--nproc-per-node", 2, "--master_addr", "127.0.0.1", "--master-port",
                         29600, sys.executable, "-c", DUMP_ENV + "print('up')", tmp_path)
    assert code == 0, err
    assert fake_store == []
    assert sorted(out.splitlines()) == [b"[node1:2] up", b"[node1:3] up"]
    for local, env in enumerate(dumped(tmp_path, (2, 3))):
        rank = str(2 + local)
        assert (env["DDP_RANK"], env["DDP_SIZE"], env["DDP_LOCAL_RANK"], env["DDP_CROSS_RANK"],
                env["DDP_RENDEZVOUS_ADDR"], env["DDP_RENDEZVOUS_PORT"]) == (
            rank, "4", str(local), "1", "127.0.0.1", "29601")
        assert torchrun_view(env) == {
            "RANK": rank, "WORLD_SIZE": "4", "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "ROLE_RANK": rank,
            "ROLE_WORLD_SIZE": "4", "ROLE_NAME": "default", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29600"}


def test_torchruns_flags_parse_to_ddpruns_own(ddprun):
    parse = ddprun.args.parse_args
    fields = ("np", "nnodes", "node_rank", "rendezvous_host", "rendezvous_port", "master_addr",
              "master_port")
    torchrun = parse(["--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "4",
                      "--master-addr", "n0", "prog"])
    own = parse(["--nnodes", "2", "--node-rank", "1", "--rendezvous", "n0:29501", "-np", "8",
                 "--master-port", "29500", "prog"])
    assert [getattr(torchrun, f) for f in fields] == [getattr(own, f) for f in fields] == [
        8, 2, 1, "n0", 29501, "n0", 29500]
    # One node: ddprun's launch from here, whatever the spelling.
    for argv in (["--nproc-per-node", "3"], ["--nnodes", "1", "--nproc-per-node", "3"],
                 ["--nnodes", "1:1", "--node-rank", "0", "-np", "3"], ["--standalone", "-np", "3"],
                 ["-np", "3", "--nproc-per-node", "3"]):
        args = parse([*argv, "prog"])
        assert (args.np, args.nnodes, args.places) == (3, None, None), argv
    assert parse(["--standalone", "prog"]).np == 1  # torchrun's default


def test_torchruns_group_rank_is_the_hosts_index(ddprun):
    # Hosts of unequal slots: Horovod's cross rank counts the hosts that have the local rank,
    # torchrun's group rank is the host's index.
    args = ddprun.args.parse_args(["-np", "3", "-H", "a:1,b:2", "prog"])
    env = ddprun.env.rank_env({}, 2, args, "10.0.0.1", 99, "t" * 32, args.places[2],
                              ("10.0.0.1", 29500))
    assert (env["DDP_CROSS_RANK"], env["DDP_CROSS_SIZE"]) == ("0", "1")
    assert (env["GROUP_RANK"], env["GROUP_WORLD_SIZE"], env["LOCAL_RANK"],
            env["LOCAL_WORLD_SIZE"]) == ("1", "2", "1", "2")


# --- horovodrun's flags -------------------------------------------------------------------------


def test_output_filename_writes_each_ranks_streams_in_horovodruns_layout(
        ddprun, fake_store, capsysbinary, tmp_path):
    out_dir = tmp_path / "logs"
    code, out, err = job(ddprun, capsysbinary, "-np", 2, "--output-filename", out_dir,
                         sys.executable, "-c", textwrap.dedent("""
                             import os, sys
                             rank = os.environ["DDP_RANK"]
                             print(f"out {rank} a"); print(f"out {rank} b")
                             print(f"err {rank}", file=sys.stderr)
                             sys.stdout.write("no newline")
                         """))
    assert code == 0, err
    assert sorted(p.name for p in out_dir.iterdir()) == ["rank.0", "rank.1"]
    for r in range(2):
        assert (out_dir / f"rank.{r}" / "stdout").read_bytes() == \
            f"out {r} a\nout {r} b\nno newline\n".encode()
        assert (out_dir / f"rank.{r}" / "stderr").read_bytes() == f"err {r}\n".encode()
    # The terminal still gets every line, prefixed.
    assert sorted(out.splitlines()) == sorted(
        f"[{r}] {line}".encode() for r in range(2) for line in
        (f"out {r} a", f"out {r} b", "no newline"))
    assert sorted(err.splitlines()) == [b"[0] err 0", b"[1] err 1"]


def test_output_filename_pads_ranks_to_sort(ddprun, tmp_path):
    files = ddprun.output.RankFiles(str(tmp_path), 11, {b"[0] ": 0, b"[10] ": 10})
    files.write(0, [b"[10] ten\n", b"[0] zero\n", b"[7] not mine\n"], b"")
    files.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank.00", "rank.10"]
    assert (tmp_path / "rank.10" / "stdout").read_bytes() == b"ten\n"
    assert (tmp_path / "rank.00" / "stdout").read_bytes() == b"zero\n"


def test_output_filename_that_cannot_be_made_is_said(ddprun, fake_store, capsysbinary,
                                                     tmp_path):
    (tmp_path / "file").write_text("")
    code, _, err = job(ddprun, capsysbinary, "-np", 2, "--output-filename",
                       tmp_path / "file" / "logs", "true")
    assert code == 2
    assert re.search(rb"ddprun: --output-filename \S+/file/logs: Not a directory", err), err


STAMP = rb"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) " \
        rb"[ \d]\d \d\d:\d\d:\d\d \d{4} "


def test_prefix_output_with_timestamp_stamps_every_line(ddprun, fake_store, capsysbinary,
                                                        tmp_path):
    code, out, err = job(ddprun, capsysbinary, "-np", 2, "-prefix-timestamp", "--verbose",
                         "--output-filename", tmp_path, sys.executable, "-c",
                         "import os, sys; rank = os.environ['DDP_RANK']; print('out', rank); "
                         "print('err', rank, file=sys.stderr)")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 2 and all(re.fullmatch(STAMP + rb"\[(\d)\] out \1", line)
                                   for line in lines), out
    # Every line ddprun prints: the ranks' stderr and its own words.
    lines = err.splitlines()
    assert all(re.match(STAMP + rb"(\[\d\] err \d|ddprun: )", line) for line in lines), err
    assert any(re.fullmatch(STAMP + rb"ddprun: rank 1 exited with status 0", line)
               for line in lines), err
    # The files get the time the terminal got.
    terminal = {m[1]: m[0] for m in re.findall(rb"^(" + STAMP[:-1] + rb") \[(\d)\] out",
                                               out, re.M)}
    for r in (b"0", b"1"):
        assert (tmp_path / f"rank.{r.decode()}" / "stdout").read_bytes() == \
            terminal[r] + b" out " + r + b"\n"


def test_log_level_and_network_interfaces_become_the_ranks_settings(
        ddprun, fake_store, capsysbinary, tmp_path):
    code, _, err = job(ddprun, capsysbinary, "-np", 2, "--log-level", "FATAL",
                       "--network-interfaces", "lo", sys.executable, "-c", DUMP_ENV, tmp_path)
    assert code == 0, err
    for env in dumped(tmp_path, range(2)):
        assert (env["DDP_LOG_LEVEL"], env["DDP_IFACE"], env["NCCL_SOCKET_IFNAME"]) == (
            "error", "lo", "lo")


def test_log_levels_map_horovodruns_names(ddprun):
    parse = ddprun.args.parse_args
    levels = {name: parse(["-np", "1", "--log-level", name, "p"]).log_level
              for name in ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL", "warning")}
    assert levels == {"TRACE": "trace", "DEBUG": "debug", "INFO": "info", "WARNING": "warning",
                      "ERROR": "error", "FATAL": "error", "warning": "warning"}


def test_single_dash_hostfile_is_a_hostfile(ddprun, fake_store, capsysbinary, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=2\n")
    code, out, err = job(ddprun, capsysbinary, "-np", 2, "-hostfile", hostfile, sys.executable,
                         "-c", "import os; print(os.environ['DDP_HOSTNAME'])")
    assert code == 0, err
    assert sorted(out.splitlines()) == [b"[localhost:0] localhost", b"[localhost:1] localhost"]


FAKE_SSH = """#!/bin/sh
# Records its arguments, then runs the remote command line here, as ssh would there.
printf '%s\\n' "$*" >> "$SSH_LOG"
for last; do :; done
exec sh -c "$last"
"""


def test_ssh_port_and_identity_reach_ssh_and_remote_ranks_output_is_filed(
        ddprun, fake_store, capsysbinary, monkeypatch, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(FAKE_SSH)
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SSH_LOG", str(tmp_path / "ssh.log"))
    # 192.0.2.1 (TEST-NET-1) is never this machine: its ranks start through "ssh", in one
    # agent; their output comes back through it, to the terminal and to --output-filename's files.
    code, out, err = job(ddprun, capsysbinary, "-np", 2, "-H", "192.0.2.1:2", "-p", 2222,
                         "-i", "/keys/id", "--rendezvous-addr", "127.0.0.1", "--output-filename",
                         tmp_path / "logs", sys.executable, "-c",
                         DUMP_ENV + "print('hello from', rank)", tmp_path)
    assert code == 0, err
    assert sorted(out.splitlines()) == [b"[192.0.2.1:0] hello from 0",
                                        b"[192.0.2.1:1] hello from 1"]
    for r in range(2):
        assert (tmp_path / "logs" / f"rank.{r}" / "stdout").read_text() == f"hello from {r}\n"
    calls = (tmp_path / "ssh.log").read_text().splitlines()
    assert len(calls) == 1, calls  # one agent for the host
    assert re.fullmatch(r"-o BatchMode=yes -o ConnectTimeout=10 -p 2222 -i /keys/id 192\.0\.2\.1 "
                        r"\S+ \S+/ddp/run/__main__\.py --_agent", calls[0]), calls
    for r, env in enumerate(dumped(tmp_path, range(2))):
        assert (env["DDP_HOSTNAME"], env["DDP_RANK"], env["MASTER_ADDR"]) == (
            "192.0.2.1", str(r), "192.0.2.1")


# --- refused ------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["-np", "4", "--nproc-per-node", "2", "--nnodes", "1"],
     "-np 4 and --nproc-per-node 2 disagree"),
    (["--nproc-per-node", "0"], "--nproc-per-node must be at least 1"),
    (["--nproc-per-node", "2", "-H", "a:2"], "with -H give -np N"),
    (["--nnodes", "4:1", "--nproc-per-node", "2"], "'4:1': MIN is above MAX"),
    (["--nnodes", "1:4", "--nproc-per-node", "2", "--node-rank", "0"],
     "--nnodes 1:4 is elastic mode, run from one ddprun for the whole job: it takes no "
     "--node-rank"),
    (["--nnodes", "1:4", "--min-np", "2"], "it takes no --min-np"),
    (["--nnodes", "two", "-np", "2"], "is not a number of nodes"),
    (["--nnodes", "2", "--nproc-per-node", "2", "--node-rank", "0"],
     "--nnodes 2 needs node 0's address: --master-addr"),
    (["--nnodes", "2", "--nproc-per-node", "2", "--master-addr", "h"], "needs --node-rank"),
    (["--nnodes", "2", "--node-rank", "2", "--nproc-per-node", "1", "--master-addr", "h"],
     "--node-rank 2 is not in 0..1"),
    (["--node-rank", "1", "-np", "2"], "--node-rank 1 is not in 0..0"),
    (["--standalone", "--nnodes", "2", "--nproc-per-node", "1"],
     "--standalone runs one node, this machine: it takes no --nnodes"),
    (["--standalone", "--master-addr", "h"], "it takes no --master-addr"),
    (["--standalone", "-H", "a:2", "-np", "2"], "it takes no -H"),
    (["--master-port", "70000", "-np", "2"], "is not a port"),
    (["--nnodes", "2", "--node-rank", "0", "--rendezvous", "h:29500", "--master-port", "29500",
      "-np", "2"], "--master-port 29500 is the rendezvous store's port"),
    (["--nnodes", "2", "--node-rank", "0", "--nproc-per-node", "1", "--master-addr", "h",
      "--master-port", "65535"], "leaves no port after it for ddprun's store"),
    (["--nnodes", "2", "--node-rank", "0", "--rendezvous", "h:65535", "-np", "2"],
     "give --master-port"),
    (["--min-np", "2", "--nproc-per-node", "2"], "it takes no --nproc-per-node"),
    (["--min-np", "2", "--output-filename", "d"], "it is for a static job"),
    (["--min-np", "2", "--job-timeline", "j.json"], "--stragglers and --job-timeline are for a "
     "static job (an elastic job's ranks change with each generation; ddp.stats() has"),
    (["--min-np", "2", "--stragglers", "always"], "--job-timeline are for a static job"),
    (["-np", "2", "--log-level", "LOUD"], "'LOUD' is not one of TRACE, DEBUG"),
    (["-np", "2", "--network-interfaces", "eth0,eth1"], "give one interface"),
    ([], "-np N is required (the number of ranks), or torchrun's --nproc-per-node L"),
])
def test_refused_combinations_name_the_flags(ddprun, capsys, argv, message):
    assert ddprun.main([*argv, "prog"]) == 2
    err = capsys.readouterr().err
    assert message in err and "usage: ddprun" in err, err


# --- the real launcher ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_ddprun(ddp_env):
    probe = subprocess.run([sys.executable, "-c", "from ddp import _ddp; _ddp.StoreServer"],
                           env=ddp_env, capture_output=True, text=True)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"ddp._ddp is not built, so ddp does not import: {last}")
    return lambda *args, env=None: subprocess.run(
        [sys.executable, "-m", "ddp.run", *map(str, args)], env={**ddp_env, **(env or {})},
        capture_output=True, text=True, timeout=HANG)


def test_version_is_the_version_files_everywhere(real_ddprun, ddp_env):
    # VERSION is the one place the version is written: the extension, the libddp.so it loads,
    # ddprun --version, pip's metadata (pyproject.toml reads the file) and the CMake package
    # all say what it says (tests/cpp/api_test.cc checks the C++ side).
    repo = RUN_DIR.parents[3]
    written = (repo / "VERSION").read_text().strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+", written)
    probe = subprocess.run(
        [sys.executable, "-c", "import ddp; print(ddp.__version__, ddp._ddp.library_version())"],
        env=ddp_env, capture_output=True, text=True, check=True).stdout.split()
    assert probe == [written, written]
    done = real_ddprun("--version")
    assert (done.returncode, done.stdout, done.stderr) == (0, written + "\n", "")

    try:
        import tomllib
    except ImportError:  # Python < 3.11
        pytest.skip("tomllib (Python >= 3.11) reads pyproject.toml")
    project = tomllib.loads((repo / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    meta = project["tool"]["scikit-build"]["metadata"]["version"]
    assert meta["input"] == "VERSION"
    assert re.search(meta["regex"], (repo / "VERSION").read_text()).group("value") == written

    build = pathlib.Path(os.environ.get("DDP_BUILD_DIR", repo / "build")) / "libddp"
    if not (build / "ddpConfigVersion.cmake").exists():
        pytest.skip(f"no CMake build at {build} (make build) to read the CMake package from")
    cmake = re.search(r'set\(PACKAGE_VERSION "([^"]+)"\)',
                      (build / "ddpConfigVersion.cmake").read_text())
    assert cmake and cmake.group(1) == written
    assert f"Version: {written}\n" in (build / "ddp.pc").read_text()


def test_libddp_agrees_with_torchruns_variables_under_ddprun(real_ddprun):
    # The ranks see ddprun's DDP_* and torchrun's variables from an outer torchrun too: libddp
    # takes the job ddprun made, and torchrun's variables agree with it.
    done = real_ddprun("--standalone", "--nproc-per-node", 2, sys.executable, "-c",
                       textwrap.dedent("""
                           import os
                           import ddp
                           ddp.init()
                           assert (ddp.rank(), ddp.size(), ddp.local_rank()) == (
                               int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
                               int(os.environ["LOCAL_RANK"])), os.environ
                           print("rank", ddp.rank(), "of", ddp.size())
                       """), env=STALE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(done.stdout.splitlines()) == ["[0] rank 0 of 2", "[1] rank 1 of 2"]
