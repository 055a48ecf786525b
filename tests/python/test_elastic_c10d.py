# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""In-job recovery of a torch.distributed script (ddp.torch.elastic.run over the default group on
the `ddp` backend, launched elastic by ddprun): a killed rank's survivors re-form the default group
in their own processes and go on from the last commit, without a sample lost; with torchrun's
--max-restarts a replacement starts on the lost slot and receives the state from a live peer
(tests/python/workers/elastic_c10d.py)."""
import pathlib
import re

import pytest

pytest.importorskip("torch")

WORKER = "elastic_c10d.py"
DONE = re.compile(r"^\[([^\]]+)\] done rank (\d+) size (\d+) generation (-?\d+) sizes ([\d,]+) "
                  r"worlds ([\d,]+) checksum (\w+) seen (.*)$", re.M)


def finished(stdout):
    """{worker id: (rank, size, generation, sizes, worlds, checksum, seen)}."""
    return {m[0]: (int(m[1]), int(m[2]), int(m[3]), m[4], m[5], m[6], m[7])
            for m in DONE.findall(stdout)}


def check_trained_alike(done, stdout):
    """Every worker saw every sample of every epoch and ends with the same weights."""
    assert all(d[6] == "OK" for d in done.values()), stdout
    assert len({d[5] for d in done.values()}) == 1, stdout


@pytest.mark.torch
def test_a_killed_rank_s_survivors_re_form_the_default_group_in_their_own_processes(run_job):
    job = run_job(3, WORKER, "localhost:2", launcher_args=("--min-np", "2", "--max-np", "3"))
    done = finished(job.stdout)
    assert set(done) == {"localhost:0", "localhost:1"}, job.stdout + job.stderr
    assert sorted(d[0] for d in done.values()) == [0, 1]
    for _, size, generation, sizes, worlds, _, _ in done.values():
        # The same process called the function twice: on the group of 3, then of 2.
        assert (size, generation, sizes, worlds) == (2, 1, "3,2", "3,2"), job.stdout
    check_trained_alike(done, job.stdout)
    # Each survivor said what failed (the lost rank named) and what it does about it.
    failed = re.findall(r"ddp elastic: rank \d of generation 0: the job failed \(.*rank 2 .*\); "
                        r"back to the last commit", job.stderr)
    assert len(failed) == 2, job.stderr
    assert "worker localhost:2 (rank 2, host localhost) was killed by signal SIGKILL (9); " \
        "host localhost gets no new workers" in job.stderr, job.stderr
    # Where the epoch stood: 3 workers x 4 samples x 2 batches committed (the kill came at the
    # third), the rest dealt out again.
    assert "ddp elastic: epoch 1: 24 of 96 samples processed as of the last commit; the other " \
        "72 (the lost workers' among them) are dealt out among 2 workers" in job.stderr, \
        job.stderr


@pytest.mark.torch
def test_max_restarts_replaces_the_lost_rank_which_gets_the_state_from_a_live_peer(run_job):
    # torchrun's flags: 2 to 3 nodes of 1 process, a failed one replaced once.
    job = run_job(3, WORKER, "localhost:1", 3,
                  launcher_args=("--nnodes", "2:3", "--max-restarts", "1"))
    done = finished(job.stdout)
    assert set(done) == {"localhost:0", "localhost:1.1", "localhost:2"}, job.stdout + job.stderr
    assert sorted(d[0] for d in done.values()) == [0, 1, 2]
    for wid, (_, size, generation, sizes, worlds, _, _) in done.items():
        # The survivors trained on as 2 (no wait for the new process), then took it in at a
        # commit; the replacement's first group is the one of 3, its state a peer's (sizes).
        assert (size, generation, sizes) == (3, 2, "3,2,3"), job.stdout
        assert worlds == ("3" if wid == "localhost:1.1" else "3,2,3"), job.stdout
    check_trained_alike(done, job.stdout)
    assert "worker localhost:1 (rank 1, host localhost) was killed by signal SIGKILL (9); " \
        "starting a replacement on its slot (restart 1 of 1, --max-restarts)" in job.stderr
    assert "generation 1: 2 workers (worker localhost:1" in job.stderr, job.stderr
    assert "generation 2: 3 workers (1 replacement ready: localhost:1.1)" in job.stderr


@pytest.mark.once
@pytest.mark.torch
def test_a_fixed_size_job_waits_for_its_replacement_and_losses_together_or_in_turn(run_job):
    # -np 2 --max-restarts 1: torchrun's fixed size. The survivor waits in its process.
    job = run_job(2, WORKER, "localhost:1", launcher_args=("--max-restarts", "1"))
    done = finished(job.stdout)
    assert set(done) == {"localhost:0", "localhost:1.1"}, job.stdout + job.stderr
    assert done["localhost:0"][2:5] == (1, "2", "2,2"), job.stdout
    assert done["localhost:1.1"][2:5] == (1, "2", "2"), job.stdout
    check_trained_alike(done, job.stdout)
    assert "1 worker left, fewer than --min-np 2: waiting up to 600 s (--elastic-timeout) for " \
        "replacements" in job.stderr, job.stderr
    assert "generation 1: 2 workers (--min-np 2 reached again)" in job.stderr, job.stderr
    # Two ranks lost together: one re-forming without both (generation 1); a second loss at the
    # first step after the job re-formed: one more (generation 2, whose state has no size 3: its
    # first step failed before any commit).
    for victims, generation, sizes, worlds in (("localhost:2,localhost:3", 1, "4,2", "4,2"),
                                               ("localhost:3,localhost:2@1", 2, "4,2", "4,3,2")):
        job = run_job(4, WORKER, victims, launcher_args=("--min-np", "2"))
        done = finished(job.stdout)
        assert set(done) == {"localhost:0", "localhost:1"}, job.stdout + job.stderr
        for d in done.values():
            assert d[2:5] == (generation, sizes, worlds), job.stdout
        check_trained_alike(done, job.stdout)
        together = re.search(r"generation 1: 2 workers \(worker localhost:[23] .* and 1 worker "
                             r"more\)", job.stderr)
        assert bool(together) == (generation == 1), job.stderr

@pytest.mark.once
@pytest.mark.torch
def test_the_example_trains_to_its_accuracy_through_a_crash(run_job):
    pytest.importorskip("sklearn")
    example = pathlib.Path(__file__).resolve().parents[2] / "examples" / "pytorch" / \
        "elastic_digits.py"
    job = run_job(3, example, "--epochs", "5", "--crash-at-epoch", "1", "--target-accuracy",
                  "0.9", launcher_args=("--min-np", "2", "--max-np", "3"))
    finals = re.findall(r"^\[localhost:\d\] rank (\d) of 2: final test accuracy ([\d.]+)%, "
                        r"weights (\w+)$", job.stdout, re.M)
    assert sorted(f[0] for f in finals) == ["0", "1"], job.stdout + job.stderr
    assert len({f[2] for f in finals}) == 1, job.stdout
    # The crash came in epoch 2's first batch: back to its start, committed at epoch 1's end.
    assert "the job goes on with 2 workers, from epoch 2 batch 0" in job.stdout, job.stdout
    assert "was killed by signal SIGKILL (9)" in job.stderr, job.stderr
