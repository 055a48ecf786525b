# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddprun across hosts: -H/--hostfile with a remote shell, and --nnodes once per node, on a cluster
of network namespaces (benchmarks/netsim) that each test module makes and deletes. Every
simulated host has its own address and, through ddprun, its own host name, so that ranks on
different hosts really talk over the bridge. Skipped, saying why, where namespaces cannot be made
(not root)."""
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "python" / "workers" / "hosts.py"
HANG = 120  # a hung launcher fails the test after this

spec = importlib.util.spec_from_file_location("netsim",
                                              ROOT / "benchmarks" / "netsim" / "netsim.py")
netsim = importlib.util.module_from_spec(spec)
spec.loader.exec_module(netsim)


@pytest.fixture(scope="module")
def cluster():
    why = netsim.available()
    if why:
        pytest.skip(f"network namespaces: {why}")
    with netsim.Cluster(3) as c:
        yield c


def ddprun(cluster, host, *args, env, timeout=HANG):
    start = time.monotonic()
    done = cluster.run(host, [sys.executable, "-m", "ddp.run", *map(str, args)], env=env,
                       capture_output=True, text=True, timeout=timeout)
    return done, time.monotonic() - start


def gone(pids):
    for pid in pids:
        try:
            os.kill(pid, 0)
            return False
        except ProcessLookupError:
            pass
    return True


def test_a_job_across_two_hosts_started_from_one(cluster, ddp_env):
    a, b = cluster.addresses[:2]
    done, _ = ddprun(cluster, 0, "-np", 4, "-H", f"{a}:2,{b}:2", "--rsh", cluster.rsh,
                     sys.executable, WORKER, env=ddp_env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = sorted(done.stdout.splitlines())
    for rank, host in enumerate((a, a, b, b)):
        # Every line says where it comes from; libddp sees two hosts of two ranks each.
        want = (rf"\[{host}:{rank}\] rank {rank} of 4 on {host} local {rank % 2}/2 "
                rf"hosts {a},{a},{b},{b} pid \d+ ok")
        assert any(re.fullmatch(want, line) for line in lines), lines
    assert "ddprun" not in done.stderr  # silent on success


def test_a_hostfile_as_the_mpi_operator_writes_it(cluster, ddp_env, tmp_path):
    a, b, c = cluster.addresses
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(f"# written by the launcher\n{a} slots=1\n{b} slots=2\n\n{c} slots=4\n")
    done, _ = ddprun(cluster, 0, "-np", 4, "--hostfile", hostfile, "--rsh", cluster.rsh,
                     sys.executable, WORKER, env=ddp_env)
    assert done.returncode == 0, done.stdout + done.stderr
    places = dict(re.findall(r"^\[([\d.]+:\d)\] rank \d of 4 on ([\d.]+) ", done.stdout, re.M))
    assert places == {f"{a}:0": a, f"{b}:1": b, f"{b}:2": b, f"{c}:3": c}, done.stdout


def test_an_unreachable_host_is_named_and_the_job_stops(cluster, ddp_env):
    a = cluster.addresses[0]
    done, took = ddprun(cluster, 0, "-np", 3, "-H", f"{a}:2,10.216.0.99:1", "--rsh", cluster.rsh,
                        sys.executable, WORKER, env=ddp_env, timeout=60)
    assert done.returncode == 255, done.stdout + done.stderr
    assert "cannot start rank 2 on host 10.216.0.99" in done.stderr, done.stderr
    assert "exited with status 255" in done.stderr
    assert "stopping the other 2 ranks" in done.stderr
    assert took < 30  # not the start timeout: the ranks here were stopped


def test_a_rank_that_dies_on_another_host_stops_the_whole_job(cluster, ddp_env):
    a, b = cluster.addresses[:2]
    done, took = ddprun(cluster, 0, "-np", 4, "-H", f"{a}:2,{b}:2", "--rsh", cluster.rsh,
                        sys.executable, WORKER, "die", 3, env=ddp_env, timeout=90)
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"ddprun: rank 3 on host {b} exited with status 3" in done.stderr, done.stderr
    assert "stopping the other 3 ranks" in done.stderr
    pids = [int(p) for p in re.findall(r" pid (\d+) ok$", done.stdout, re.M)]
    assert len(pids) == 4 and gone(pids), done.stdout  # on both hosts, nothing left behind
    assert took < 50  # not the 60 s the survivors would sleep


def test_a_stopped_rank_on_another_host_is_named_as_the_culprit(cluster, ddp_env):
    # The survivors time out on it and exit first; their libddp tells the launcher whom they
    # blame (DDP_REPORT_FD, relayed by the agent), so ddprun names the stopped rank, not them.
    a, b = cluster.addresses[:2]
    done, took = ddprun(cluster, 0, "-np", 4, "-H", f"{a}:2,{b}:2", "--rsh", cluster.rsh,
                        sys.executable, WORKER, "stop", 3,
                        env={**ddp_env, "DDP_TIMEOUT_SECONDS": "3"}, timeout=90)
    assert done.returncode == 1, done.stdout + done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("ddprun")]
    assert re.fullmatch(rf"ddprun: rank 3 on host {b} broke the job, as rank \d reports: rank 3 "
                        rf"\({b}, .*\): silent for .*", said[0]), said
    assert re.fullmatch(r"ddprun: rank [0-2] on host [\d.]+ exited with status 1", said[1]), said
    pids = [int(p) for p in re.findall(r" pid (\d+) ok$", done.stdout, re.M)]
    assert len(pids) == 4 and gone(pids), done.stdout  # the stopped rank too (SIGCONT, SIGTERM)
    assert took < 60


@pytest.mark.once
@pytest.mark.torch  # its workers train through ddp.torch
def test_an_elastic_job_across_hosts_goes_on_without_a_failed_host(cluster, ddp_env):
    """Elastic mode with the other hosts' workers started through agents over the remote shell:
    the worker on the third host fails mid-epoch and the two others finish together."""
    a, b, c = cluster.addresses
    elastic = WORKER.parent / "elastic_torch.py"
    done, _ = ddprun(cluster, 0, "-np", 3, "--min-np", 2, "--host-discovery-script",
                     f"printf '{a}:1\\n{b}:1\\n{c}:1\\n'", "--rsh", cluster.rsh,
                     sys.executable, elastic, "fail", f"{c}:0", env=ddp_env, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    finished = dict(re.findall(r"^\[([\d.]+:0)\] done rank \d size 2 generation 1 sizes 3,2 "
                               r"resets \[2\] checksum (\w+) seen OK$", done.stdout, re.M))
    assert set(finished) == {f"{a}:0", f"{b}:0"}, done.stdout + done.stderr
    assert len(set(finished.values())) == 1, done.stdout  # the same weights on both hosts
    assert f"worker {c}:0 (rank 2, host {c}) exited with status 1" in done.stderr, done.stderr


@pytest.mark.parametrize("form", ["ddprun", "torchrun"])
def test_one_ddprun_per_node_as_torchrun(cluster, ddp_env, form):
    """The same job in ddprun's words and in torchrun's (the store then on --master-port + 1)."""
    a = cluster.addresses[0]
    token = os.urandom(16).hex()  # in the environment: a scheduler's secret
    where = (["--rendezvous", f"{a}:29517", "-np", "4"] if form == "ddprun" else
             ["--nproc-per-node", "2", "--master-addr", a, "--master-port", "29520"])
    nodes = [cluster.popen(i, [sys.executable, "-m", "ddp.run", "--nnodes", "2", "--node-rank",
                               str(i), *where, sys.executable, str(WORKER)],
                           env={**ddp_env, "DDP_JOB_TOKEN": token, "DDP_HOSTNAME": f"node{i}"},
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in (1, 0)]  # node 1 first: its ranks wait for node 0's store
    outputs = [node.communicate(timeout=HANG) for node in nodes]
    for node, (out, err) in zip(nodes, outputs):
        assert node.returncode == 0, out + err
    out = outputs[1][0] + outputs[0][0]
    for rank in range(4):
        host = f"node{rank // 2}"
        assert re.search(rf"^\[{host}:{rank}\] rank {rank} of 4 on {host} local {rank % 2}/2 "
                         r"hosts node0,node0,node1,node1 ", out, re.M), out


def test_one_ddprun_per_node_needs_the_token(cluster, ddp_env):
    env = {k: v for k, v in ddp_env.items() if k != "DDP_JOB_TOKEN"}
    done, _ = ddprun(cluster, 0, "--nnodes", 2, "--node-rank", 0, "--rendezvous",
                     f"{cluster.addresses[0]}:29518", "-np", 2, "true", env=env)
    assert done.returncode == 2
    assert "set DDP_JOB_TOKEN" in done.stderr, done.stderr


def test_ctrl_c_stops_the_ranks_on_every_host(cluster, ddp_env):
    a, b = cluster.addresses[:2]
    launcher = cluster.popen(0, [sys.executable, "-m", "ddp.run", "-np", "4", "-H", f"{a}:2,{b}:2",
                                 "--rsh", cluster.rsh, sys.executable, str(WORKER), "die", "99"],
                             env=ddp_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    pids = []
    while len(pids) < 4:  # every rank is up, on both hosts
        line = launcher.stdout.readline()
        assert line, launcher.stderr.read()
        pids += [int(p) for p in re.findall(r" pid (\d+) ok$", line)]
    launcher.send_signal(2)
    out, err = launcher.communicate(timeout=HANG)
    assert launcher.returncode == 130, err
    assert "ddprun: interrupted, stopping 4 ranks" in err, err
    assert gone(pids)


def test_open_mpi_starts_libddp_across_hosts(cluster, ddp_env):
    """mpirun with its remote shell entering the namespaces (what benchmarks/netsim/scaling.py
    measures Open MPI with): libddp joins through MPI, each host with its own host name."""
    if not shutil.which("mpirun"):
        pytest.skip("no mpirun")
    a, b = cluster.addresses[:2]
    env = {k: v for k, v in ddp_env.items() if not k.startswith("DDP_")}
    # Simulated host names resolve nowhere: name the interface (as NCCL_SOCKET_IFNAME would).
    env["DDP_IFACE"] = "eth0"
    done = cluster.run(0, ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4",
                           "-H", f"{a}:2,{b}:2", "--mca", "plm_rsh_agent", cluster.rsh,
                           "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include",
                           "eth0", sys.executable, str(WORKER)],
                       env=env, capture_output=True, text=True, timeout=HANG)
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in range(4):
        host = cluster.hostnames[rank // 2]
        assert re.search(rf"^rank {rank} of 4 on {host} local {rank % 2}/2 "
                         r"hosts host0,host0,host1,host1 ", done.stdout, re.M), done.stdout


def test_the_remote_shell_joins_words_as_ssh_does(cluster):
    """ddprun passes the remote command as one word, mpirun as several: both must work."""
    b = cluster.addresses[1]
    one = subprocess.run([cluster.rsh, b, "echo 'a  b' $(hostname)"], capture_output=True,
                         text=True, timeout=30)
    several = subprocess.run([cluster.rsh, b, "echo", "'a  b'", "$(hostname)"],
                             capture_output=True, text=True, timeout=30)
    assert one.stdout == several.stdout == "a  b host1\n", (one, several)
    nowhere = subprocess.run([cluster.rsh, "10.216.0.99", "true"], capture_output=True, text=True)
    assert nowhere.returncode == 255 and "Could not resolve hostname" in nowhere.stderr


def test_the_cluster_sets_every_hosts_congestion_control_and_refuses_one_not_allowed():
    why = netsim.available()
    if why:
        pytest.skip(f"network namespaces: {why}")
    allowed = netsim.allowed_congestion()
    # The one a namespace gets by default is allowed; choose another where there is one.
    default = netsim.congestion_in()
    choice = next((cc for cc in allowed if cc != default), default)
    with netsim.Cluster(2, congestion=choice) as c:
        assert [netsim.congestion_in(ns) for ns in c.namespaces] == [choice, choice]
    with pytest.raises(ValueError, match="tcp_allowed_congestion_control"):
        netsim.Cluster(2, congestion="no-such-control")


UDP_RECEIVE = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 9999))
s.settimeout(20)
print(len(s.recv(65536)))
"""
# Sends until the receiver is up (a few tries), with IP_PMTUDISC_DO: too large a datagram for
# the path fails here (EMSGSIZE) instead of being fragmented.
UDP_SEND_DONT_FRAGMENT = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, 10, 2)  # IP_MTU_DISCOVER, IP_PMTUDISC_DO (linux/in.h)
for _ in range(20):
    s.sendto(b"x" * 8000, (sys.argv[1], 9999))
    time.sleep(0.1)
"""


def test_the_cluster_sets_every_links_mtu_and_says_what_framing_leaves_of_the_rate():
    why = netsim.available()
    if why:
        pytest.skip(f"network namespaces: {why}")

    def mtu_of(namespace, dev):
        shown = subprocess.run(["ip", "-n", namespace, "-o", "link", "show", dev],
                               capture_output=True, text=True, check=True).stdout
        return int(shown.split(" mtu ")[1].split()[0])

    with netsim.Cluster(2, mtu=9001) as c:
        assert [mtu_of(ns, "eth0") for ns in c.namespaces] == [9001, 9001]
        assert [mtu_of(c.bridge, p) for p in ("p0", "p1")] == [9001, 9001]
        # An 8,000-byte datagram, not to be fragmented, crosses whole: the path is 9001.
        receive = c.popen(1, [sys.executable, "-c", UDP_RECEIVE, c.addresses[1]],
                          stdout=subprocess.PIPE, text=True)
        try:
            sent = c.run(0, [sys.executable, "-c", UDP_SEND_DONT_FRAGMENT, c.addresses[1]],
                         capture_output=True, text=True, timeout=30)
            assert sent.returncode == 0, sent.stderr
            assert receive.communicate(timeout=30)[0].strip() == "8000"
        finally:
            receive.kill()
            receive.wait()
    with netsim.Cluster(1) as c:
        assert mtu_of(c.namespaces[0], "eth0") == 1500
    with pytest.raises(ValueError, match="mtu"):
        netsim.Cluster(2, mtu=100)
    assert abs(netsim.frame_efficiency() - 1448 / 1514) < 1e-12
    assert abs(netsim.frame_efficiency(9001) - 8949 / 9015) < 1e-12


def test_a_job_timeline_across_hosts_is_on_rank_0s_clock(cluster, ddp_env, tmp_path):
    from test_observability import TIMED, check_job_timeline

    script = tmp_path / "timed.py"
    script.write_text(TIMED)
    out = tmp_path / "job.json"
    hosts = cluster.addresses[:3]
    done, _ = ddprun(cluster, 0, "-np", 3, "-H", ",".join(f"{h}:1" for h in hosts), "--rsh",
                     cluster.rsh, "--job-timeline", out, sys.executable, script, env=ddp_env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ddprun: job timeline: {out} (3 ranks on rank 0's clock" in done.stderr, done.stderr
    trace = check_job_timeline(out, 3, hosts=dict(enumerate(hosts)))
    # The namespaces share one kernel clock: the offsets measured are the method's error.
    print("clock sync across namespaces:", trace["otherData"]["clock_sync"])


def test_status_names_a_stopped_rank_on_another_host(cluster, ddp_env, tmp_path):
    """ddprun status from the launcher's host: the ranks of every host publish to the
    launcher's store, so the stopped one on the second host is named, with its host."""
    from test_observability import STOPPED

    script = tmp_path / "stopped.py"
    script.write_text(STOPPED)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {**ddp_env, "XDG_RUNTIME_DIR": str(runtime), "STOP_RANK": "2"}
    a, b = cluster.addresses[:2]
    job = cluster.popen(0, [sys.executable, "-m", "ddp.run", "-np", "3", "-H", f"{a}:2,{b}:1",
                            "--rsh", cluster.rsh, sys.executable, str(script)], env=env,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        ready, deadline = 0, time.monotonic() + HANG
        while ready < 3:  # rank 2, on host b, stops itself after its 50 allreduces
            line = job.stdout.readline()
            assert line and time.monotonic() < deadline, "no READY from every rank"
            ready += "READY" in line
        time.sleep(0.5)
        done = cluster.run(0, [sys.executable, "-m", "ddp.run", "status"], env=env,
                           capture_output=True, text=True, timeout=HANG)
        assert done.returncode == 0, done.stderr
        rows = {int(line.split()[0]): line for line in done.stdout.splitlines()[2:5]}
        assert rows[2].split()[1] == b and "NOT ANSWERING" in rows[2], done.stdout
        assert rows[0].split()[1] == a and "allreduce 'stuck'" in rows[0], done.stdout
        assert "ranks 0, 1 wait for rank 2, which does not answer" in done.stdout, done.stdout
    finally:
        job.terminate()  # ddprun stops every rank, the stopped one too (SIGCONT, SIGTERM)
        try:
            job.wait(timeout=30)
        finally:
            job.stdout.close()
