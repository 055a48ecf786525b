# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""benchmarks/lib/runner.py: the side-by-side scripts start each launch on a quiet machine and say
in their reports which measurements did not (a benchmark beside another job measures the other
job)."""
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "lib"))
import runner  # noqa: E402


def test_cpu_times_count_busy_within_total():
    first = runner.cpu_times()
    assert first is not None
    busy, total = first
    assert 0 <= busy <= total
    # The counters move in clock ticks (10 ms): spend CPU time of our own until they do.
    deadline = time.monotonic() + 5.0
    later = runner.cpu_times()
    while later[1] <= total and time.monotonic() < deadline:
        sum(i * i for i in range(100000))
        later = runner.cpu_times()
    assert later[1] > total and later[0] >= busy
    assert 0.0 <= runner.cpu_busy(0.05) <= 1.0


def test_waiting_for_quiet_ends_at_once_when_quiet_and_at_the_limit_when_not():
    busy, waited = runner.wait_until_quiet(limit=1.0, max_wait=5.0, sample=0.05)
    assert waited < 1.0 and 0.0 <= busy <= 1.0
    # Nothing is ever below a negative limit: it gives up after max_wait.
    busy, waited = runner.wait_until_quiet(limit=-1.0, max_wait=0.3, sample=0.05)
    assert 0.3 <= waited < 2.0


def test_every_value_set_says_how_busy_the_machine_was_before_its_launch(monkeypatch):
    monkeypatch.setattr(runner, "wait_until_quiet", lambda: (0.6, 120.0))
    cmd = [sys.executable, "-c", "print('RESULT a=1 b=x'); print('RESULT a=2 b=y')"]
    values, why = runner.run_one(cmd, None, 30)
    assert why is None
    assert [v["a"] for v in values] == ["1", "2"]
    assert all(v["busy_before"] == "0.600" and v["quiet_wait_s"] == "120.0" for v in values)
    assert runner.busy_note(values[0]) == " (CPUs 60% busy before it)"
    values, why = runner.run_one(cmd, None, 30, quiet=False)
    assert why is None and "busy_before" not in values[0] and runner.busy_note(values[0]) == ""


def test_the_reports_line_counts_the_measurements_that_started_on_a_busy_machine():
    quiet = {"busy_before": "0.050"}
    busy = {"busy_before": "0.900"}
    assert runner.quiet_line([]) == "- quiet machine: not checked"
    line = runner.quiet_line([quiet, quiet])
    assert "all 2 measurements started so" in line and "suspect" not in line
    line = runner.quiet_line([quiet, busy, quiet])
    assert "**1 of 3 measurements started on a busy machine** (up to 90%)" in line
