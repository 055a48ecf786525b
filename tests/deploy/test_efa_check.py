# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""k8s/image/efa_check.py (ddp-efa-check, run by the GPU jobs' launchers after training): fed
sample launcher logs (tests/deploy/logs/: NCCL over aws-ofi-nccl and EFA, NCCL fallen back to
sockets, libddp's ofi transport on efa and on tcp), it passes the good ones and names what went
wrong in the others; as a wrapper it keeps the command's exit status."""
import importlib.util
import subprocess
import sys

import pytest

import deploycheck as dc

SCRIPT = dc.ROOT / "k8s" / "image" / "efa_check.py"
LOGS = dc.ROOT / "tests" / "deploy" / "logs"
spec = importlib.util.spec_from_file_location("efa_check", SCRIPT)
efa = importlib.util.module_from_spec(spec)
spec.loader.exec_module(efa)


def lines(name):
    return (LOGS / name).read_text().splitlines()


def test_nccl_over_efa_on_every_rank_passes():
    assert efa.check_nccl(lines("nccl-efa.log"), ranks=16) == []


def test_nccl_fallen_back_to_sockets_fails():
    found = "\n".join(efa.check_nccl(lines("nccl-socket.log"), ranks=16))
    assert "NCCL: used network Socket on ranks 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15, not " \
           "Libfabric" in found, found
    assert "NCCL found no net plugin" in found
    assert "no report from rank(s) 0,1" in found


def test_nccl_silent_or_partial_or_on_another_provider_fails():
    assert "no 'Using network' line" in efa.check_nccl(["NCCL WARN something"])[0]
    partial = [line for line in lines("nccl-efa.log") if not line.startswith("[1,5]")]
    assert efa.check_nccl(partial, ranks=16) == [
        "NCCL over Libfabric: no report from rank(s) 5 of 16"]
    tcp = [line.replace("Provider is efa", "Provider is tcp") for line in lines("nccl-efa.log")]
    assert "aws-ofi-nccl selected provider tcp on ranks 0" in efa.check_nccl(tcp, 16)[0]
    assert efa.check_nccl(lines("nccl-efa.log")) == []  # ranks unknown: no count


def test_libddp_on_efa_passes_and_on_another_provider_fails():
    assert efa.check_ddp_ofi(lines("ddp-efa.log"), ranks=16) == []
    found = efa.check_ddp_ofi(lines("ddp-tcp.log"), ranks=16)
    assert found[0].startswith("libddp: libfabric provider tcp on ranks 0,1,2"), found
    assert "no 'libfabric transport' line" in efa.check_ddp_ofi(lines("nccl-efa.log"))[0]


def check(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("log, flag, status", [
    ("nccl-efa.log", "--nccl", 0), ("nccl-socket.log", "--nccl", 3),
    ("ddp-efa.log", "--ddp-ofi", 0), ("ddp-tcp.log", "--ddp-ofi", 3),
    ("nccl-efa.log", "--ddp-ofi", 3)])
def test_a_saved_log(log, flag, status):
    done = check(flag, "--ranks", 16, "--log", LOGS / log)
    assert done.returncode == status, done
    assert ("ddp-efa-check: OK" if status == 0 else "ddp-efa-check: FAILED") in done.stdout


def test_as_a_wrapper_it_passes_output_through_and_keeps_a_failure(tmp_path):
    """The ranks come from mpirun's -np; a command that failed is not checked, its status
    stays."""
    fake = tmp_path / "mpirun"
    fake.write_text('#!/bin/sh\ncat "$LOG"\nexit "$STATUS"\n')
    fake.chmod(0o755)
    good = subprocess.run([sys.executable, str(SCRIPT), "--nccl", "--", str(fake), "-np", "16"],
                          env={"LOG": str(LOGS / "nccl-efa.log"), "STATUS": "0"},
                          capture_output=True, text=True, timeout=60)
    assert good.returncode == 0, good
    assert "final test accuracy 97.78%" in good.stdout
    assert good.stdout.endswith("ddp-efa-check: OK: NCCL used EFA on all 16 ranks\n")
    bad = subprocess.run([sys.executable, str(SCRIPT), "--nccl", "--", str(fake), "-np", "17"],
                         env={"LOG": str(LOGS / "nccl-efa.log"), "STATUS": "0"},
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 3 and "no report from rank(s) 16 of 17" in bad.stdout, bad
    failed = subprocess.run([sys.executable, str(SCRIPT), "--nccl", "--", str(fake)],
                            env={"LOG": str(LOGS / "nccl-socket.log"), "STATUS": "7"},
                            capture_output=True, text=True, timeout=60)
    assert failed.returncode == 7 and "EFA not checked" in failed.stderr, failed
