# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""torchft on libddp (ddp.torch.torchft.ProcessGroupDDP): torchft's own integration tests, shipped
in its wheel, run with its ProcessGroupGloo replaced by ProcessGroupDDP (its Manager's DDP,
recovery, quorum and allreduce tests; LocalSGD and DiLoCo's); and a replica killed in the middle
of an allreduce, whose survivor hears of it from libddp at once (not after the group's timeout),
trains on alone, and whose replacement takes the state from the survivor.

On PyTorch 2 (.venv-torch2, where `make torch2-frameworks` installs torchft;
DDP_REQUIRE_FRAMEWORKS=1 there makes its absence a failure)."""
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from frameworks_needed import need

pytestmark = pytest.mark.torch
EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "pytorch" / "torchft_digits.py"

# Runs one of torchft's test modules with ProcessGroupGloo replaced by ProcessGroupDDP in every
# module that makes one, and counts the groups made and the operations they ran.
_RUN_TORCHFTS_TESTS = r"""
import importlib, sys, unittest
from ddp.torch.torchft import ProcessGroupDDP
made, operations = [], []
class Counted(ProcessGroupDDP):
    def _create_pg(self, *args):
        made.append(1)
        group = super()._create_pg(*args)
        assert group.name() == "ddp", group.name()
        return group
    def allreduce(self, *args):
        operations.append("allreduce")
        return super().allreduce(*args)
tested = importlib.import_module(sys.argv[1])
for name in sys.argv[1:]:
    module = importlib.import_module(name)
    assert hasattr(module, "ProcessGroupGloo"), name
    module.ProcessGroupGloo = Counted
run = unittest.main(module=tested, exit=False, verbosity=2, argv=["torchft"])
for test, why in run.result.skipped:
    print(f"SKIPPED {test.id()}: {why}")
print(f"RESULT ran={run.result.testsRun} skipped={len(run.result.skipped)} "
      f"groups={len(made)} allreduces={len(operations)}")
sys.exit(0 if run.result.wasSuccessful() else 1)
"""


def _need_torchft():
    need("torchft")


@pytest.mark.parametrize("modules,at_least", [
    (["torchft.manager_integ_test"], 7),
    (["torchft.local_sgd_integ_test", "torchft._test.diloco_trainer"], 28),
], ids=["manager", "local_sgd_diloco"])
def test_torchfts_own_integration_tests_pass_on_processgroupddp(modules, at_least, ddp_env,
                                                                tmp_path):
    """torchft's manager_integ_test (healthy DDP, recovery with sync and async quorums, recovery
    of a replica of 2 ranks, skipped initial sync, quorum timeouts, the manager's allreduce) and
    local_sgd_integ_test (LocalSGD and DiLoCo, streaming, recovery, upscale, commit failures),
    every replica and rank a thread of one process, with ProcessGroupDDP where torchft's tests
    make a ProcessGroupGloo. Skipped: only what needs CUDA devices or torchcomms."""
    _need_torchft()
    done = subprocess.run([sys.executable, "-c", _RUN_TORCHFTS_TESTS, *modules], env=ddp_env,
                          capture_output=True, text=True, timeout=400, cwd=str(tmp_path))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-8000:]
    found = re.search(r"RESULT ran=(\d+) skipped=(\d+) groups=(\d+) allreduces=(\d+)", out)
    assert found, out[-4000:]
    ran, skipped, groups, allreduces = map(int, found.groups())
    assert ran - skipped >= at_least, out[-4000:]
    assert groups >= ran - skipped and allreduces > 0, found.group(0)
    for line in re.findall(r"^SKIPPED .*$", out, re.M):
        assert re.search(r"GPU|CUDA|torchcomms", line, re.I), line


class _Replica:
    """A replica of examples/pytorch/torchft_digits.py, its output read as it comes, each line
    with the time it arrived."""

    def __init__(self, replica_id, lighthouse, env, steps, cwd, *more):
        self.lines, self._lock = [], threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--replica-id", str(replica_id), "--lighthouse",
             lighthouse, "--steps", str(steps), "--step-delay", "0.02", "--timeout", "300",
             *more],
            env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self._lock:
                self.lines.append((time.time(), line.rstrip("\n")))

    def _find(self, pattern, since):
        with self._lock:
            for at, line in self.lines:
                found = re.search(pattern, line)
                if found and at >= since:
                    return at, found
        return None

    def wait_for(self, pattern, deadline, since=0.0):
        """The first line matching `pattern` that arrived after `since`, as (time, match)."""
        found = None
        while time.time() < deadline:
            exited = self.proc.poll() is not None
            if exited:
                time.sleep(0.5)  # the reader's last lines
            found = self._find(pattern, since)
            if found or exited:
                break
            time.sleep(0.05)
        if not found:
            raise AssertionError(f"no line like {pattern!r}:\n{self.output()[-6000:]}")
        return found

    def output(self):
        with self._lock:
            return "\n".join(line for _, line in self.lines)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def test_a_replica_killed_in_an_allreduce_is_named_at_once_and_replaced(ddp_env, tmp_path):
    """Two replicas train the digits CNN with torchft on libddp (a group timeout of 300 s; the
    gradients in several buckets, so that the survivor's step fails in its first and its later
    ones are refused at the call). One
    stops itself (SIGSTOP) in a step's quorum before its allreduce (the other now waits for it
    there), and is killed (SIGKILL): the
    survivor's step fails naming the dead rank long before the timeout (libddp sees its process
    go), is discarded, and the survivor trains on alone in the next quorum. A replacement with the
    same replica id joins, takes the model and optimizer from the survivor (torchft's checkpoint
    transport, not a file), and both end with the same parameters and >= 95% test accuracy."""
    _need_torchft()
    from torchft._torchft import LighthouseServer

    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=1, join_timeout_ms=2000,
                                  heartbeat_timeout_ms=1000)
    replicas = []
    try:
        start = time.time()
        deadline = start + 240
        args = (lighthouse.address(), ddp_env, 400, str(tmp_path))
        args = (*args, "--bucket-cap-mb", "0.1")
        replicas = [_Replica(0, *args), _Replica(1, *args, "--freeze-at-step", "100")]
        survivor, victim = replicas
        victim.wait_for(r"frozen at step", deadline)  # in the step's quorum, before its allreduce
        time.sleep(1.0)  # the survivor waits in that allreduce
        os.kill(victim.proc.pid, signal.SIGKILL)
        killed = time.time()
        victim.proc.wait()
        at, found = survivor.wait_for(r"step (\d+) discarded at [\d.]+: (.*)", deadline)
        assert re.search(r"rank 1\b", found.group(2)), found.group(0)
        assert re.search(r"exited|closed|reset|lost|died|stalled", found.group(2)), found.group(0)
        alone, _ = survivor.wait_for(r"with 1 replica\(s\)", deadline, since=at)
        survivor.wait_for(r"step (\d+), loss", deadline, since=alone)  # training again
        print(f"\nkilled: survivor's step failed {at - killed:.2f} s later, trained again "
              f"{alone - killed:.2f} s after the kill (group timeout: 300 s)")
        assert at - killed < 60, "named by a timeout, not by libddp's liveness"

        replacement = _Replica(1, *args)
        replicas.append(replacement)
        replacement.wait_for(r"with 2 replica\(s\)", deadline)
        ends = [r.wait_for(r"done at step (\d+), test accuracy ([\d.]+), checksum (\S+)",
                           deadline)[1] for r in (survivor, replacement)]
        assert ends[0].group(3) == ends[1].group(3), [e.group(0) for e in ends]
        assert all(float(e.group(2)) >= 0.95 for e in ends), [e.group(0) for e in ends]
        assert "healing is required" in replacement.output(), replacement.output()[-4000:]
        for r in (survivor, replacement):
            assert r.proc.wait(timeout=60) == 0, r.output()[-4000:]
    finally:
        for r in replicas:
            r.stop()
        lighthouse.shutdown()


_ABORT_AND_ERRORED = r"""
import threading, time
from datetime import timedelta
import torch
import torch.distributed as dist
from ddp.torch.torchft import ProcessGroupDDP

server = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
groups = [ProcessGroupDDP(timeout=timedelta(seconds=300)) for _ in range(2)]
threads = [threading.Thread(target=g.configure, args=(f"localhost:{server.port}/q1", f"r{i}", i, 2))
           for i, g in enumerate(groups)]
for t in threads: t.start()
for t in threads: t.join()
assert groups[0].getBackendName() == "torchft-ddp" and groups[0].size() == 2
works = [g.allreduce([torch.full((4,), float(i + 1))], dist.AllreduceOptions())
         for i, g in enumerate(groups)]
assert all(w.wait() for w in works) and groups[0].errored() is None
pending = groups[0].allreduce([torch.ones(1 << 16)], dist.AllreduceOptions())
time.sleep(0.5)
groups[1].abort()
started = time.time()
assert pending.wait() is False  # torchft's contract: noted, not raised
print(f"PENDING {time.time() - started:.2f} s: {groups[0].errored()}")
print(f"ABORTER {groups[1].errored()}")
threads = [threading.Thread(target=g.configure, args=(f"localhost:{server.port}/q2", f"r{i}", i, 2))
           for i, g in enumerate(groups)]
for t in threads: t.start()
for t in threads: t.join()
t = [torch.full((3,), float(i + 1)) for i in range(2)]
works = [g.allreduce([t[i]], dist.AllreduceOptions()) for i, g in enumerate(groups)]
assert all(w.wait() for w in works), [g.errored() for g in groups]
print(f"RECONFIGURED {[g.errored() for g in groups]} {t[0].tolist()} {t[1].tolist()}")
for g in groups: g.shutdown()
"""


def test_abort_fails_the_peers_operation_naming_the_replica_and_configure_starts_afresh(ddp_env):
    """ProcessGroupDDP's contract with torchft's Manager: an operation's failure is noted for
    errored() instead of raised by wait(); abort() on one replica fails the other's pending
    allreduce at once with that replica's reason (not after the 300 s timeout); configure() with
    the next quorum's store gives both a working group again, errored() None."""
    _need_torchft()
    done = subprocess.run([sys.executable, "-c", _ABORT_AND_ERRORED], env=ddp_env,
                          capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    pending = re.search(r"^PENDING ([\d.]+) s: (.*)$", out, re.M)
    assert pending and "replica r1 (rank 1) aborted the process group" in pending.group(2), out
    assert float(pending.group(1)) < 60, pending.group(0)
    assert re.search(r"^ABORTER .*aborted the process group", out, re.M), out
    assert "RECONFIGURED [None, None] [3.0, 3.0, 3.0] [3.0, 3.0, 3.0]" in out, out[-3000:]
