"""The cpu overlay's MPIJobs rehearsed on network namespaces named as the operator names the pods
(tests/deploy/rehearsal.py says what is and is not the same as on a cluster): the digits demo
trains to >= 97%, ddp-bench's allreduces are all exact, and the ranks sit where the hostfile
puts them. Skipped, saying why, where namespaces cannot be made (not root)."""
import copy
import re
import shutil

import pytest

import rehearsal


@pytest.fixture(scope="module", autouse=True)
def can_rehearse():
    why = rehearsal.netsim.available()
    if why:
        pytest.skip(f"network namespaces: {why}")
    for command in ("kubectl", "mpirun"):
        if shutil.which(command) is None:
            pytest.skip(f"{command} is not installed here")


def run(job, tmp_path, timeout=300):
    done = rehearsal.rehearse(job, tmp_path, timeout=timeout)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "could not find environment variable" not in output, output  # a stale -x
    return done.stdout


def test_the_operator_view_of_a_job():
    view = rehearsal.operator_view(rehearsal.find_job("cpu", "ddp-digits"))
    assert view["pods"] == ["ddp-digits-launcher", "ddp-digits-worker-0", "ddp-digits-worker-1"]
    assert view["hostfile"] == ("ddp-digits-worker-0.ddp-digits.libddp.svc slots=2\n"
                                "ddp-digits-worker-1.ddp-digits.libddp.svc slots=2\n")


def test_the_ranks_run_where_the_hostfile_puts_them(tmp_path):
    job = copy.deepcopy(rehearsal.find_job("cpu", "ddp-digits"))
    args = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["args"]
    program = args.index("python3")
    args[program:] = ["sh", "-c", 'echo "rank $OMPI_COMM_WORLD_RANK on $(hostname)"']
    out = run(job, tmp_path)
    placed = sorted(re.findall(r"rank (\d) on (\S+)", out))
    assert placed == [("0", "ddp-digits-worker-0"), ("1", "ddp-digits-worker-0"),
                      ("2", "ddp-digits-worker-1"), ("3", "ddp-digits-worker-1")], out


def test_the_digits_demo_trains_to_97_percent(tmp_path):
    out = run(rehearsal.find_job("cpu", "ddp-digits"), tmp_path)
    accuracy = float(re.search(r"final test accuracy ([\d.]+)% after 20 epochs", out).group(1))
    assert accuracy >= 97.0, out
    assert "training on 4 ranks" in out


def test_the_allreduce_benchmark_checks_every_result(tmp_path):
    out = run(rehearsal.find_job("cpu", "ddp-bench"), tmp_path)
    rows = re.findall(r"^\S*\s*(\d+)\s+\d+\s+f32\s+sum\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+(\d+)\s*$",
                      out, re.M)
    sizes = [int(size) for size, _ in rows]
    assert sizes[0] == 1024 and sizes[-1] == 64 << 20, out
    assert all(wrong == "0" for _, wrong in rows), out
    assert "Out of bounds values : 0 OK" in out
