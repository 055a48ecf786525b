# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Straggler scores: how long the other ranks waited for each rank, agreed by the engine's
negotiation (every rank gets the same figures), from ddp.stats() and in ddprun's table at the
end of a job."""
import importlib.util
import json
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

RUN_DIR = pathlib.Path(__file__).resolve().parents[2] / "bindings" / "python" / "ddp" / "run"
SLEEP, STEPS = 0.05, 20

SCRIPT = textwrap.dedent(f"""
    import json, sys, time
    import numpy as np
    import ddp
    ddp.init()
    slow = int(sys.argv[1])
    x = np.ones(1000, np.float32)
    for step in range({STEPS}):
        before = ddp.stats()
        if ddp.rank() == slow:
            time.sleep({SLEEP})  # its gradients come late, every step
        for i in range(4):
            ddp.allreduce(x, name=f"grad{{i}}")
        ddp.allreduce(x, name="step_end")  # every rank's step ends here: its waits reported
        last = ddp.stats(since=before)
    print("STATS " + json.dumps(ddp.stats()["stragglers"]), flush=True)
    print("LAST " + json.dumps(last["stragglers"]), flush=True)
    ddp.shutdown()
""")


@pytest.fixture(scope="module")
def stragglers_mod():
    """run/stragglers.py alone (it needs nothing of ddp)."""
    spec = importlib.util.spec_from_file_location("stragglers_under_test",
                                                  RUN_DIR / "stragglers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def _ddprun(ddp_env, tmp_path, *args):
    script = tmp_path / "slow.py"
    script.write_text(SCRIPT)
    return subprocess.run([sys.executable, "-m", "ddp.run", *args, sys.executable, str(script),
                           "2"], env=ddp_env, capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path))


def test_a_rank_slowed_by_a_sleep_is_named_first_with_the_same_figures_everywhere(ddp_env,
                                                                                   tmp_path):
    done = _ddprun(ddp_env, tmp_path, "-np", "4", "--stragglers", "always")
    assert done.returncode == 0, done.stderr[-3000:]
    stats = [json.loads(line.split("STATS ", 1)[1]) for line in done.stdout.splitlines()
             if "STATS " in line]
    assert len(stats) == 4, done.stdout
    # Agreed: every rank counts the same rounds from the same data, so the figures differ only by
    # the rounds a rank had not yet run when it asked (the last reports come a round later).
    for s in stats:
        assert s[0]["rank"] == stats[0][0]["rank"], stats
        assert s[0]["waited_for_seconds"] == pytest.approx(stats[0][0]["waited_for_seconds"],
                                                           rel=0.05), stats
    first = stats[0][0]
    assert first["rank"] == 2, stats[0]
    # One step's figures (ddp.stats(since=...)): rank 2 held the others in the last step too.
    last = [json.loads(line.split("LAST ", 1)[1]) for line in done.stdout.splitlines()
            if "LAST " in line]
    assert all(step and step[0]["rank"] == 2 and step[0]["waited_for_seconds"] > 0
               for step in last), last
    # The 3 others waited for about SLEEP every step; within the step, rank 2 is late for its
    # first gradient only (the other three follow at once). Half of it, at least, is counted.
    assert first["waited_for_seconds"] >= 0.5 * 3 * STEPS * SLEEP, stats[0]
    assert first["rounds"] >= STEPS // 2, stats[0]
    # It held the others far longer than any other rank did.
    others = [s["waited_for_seconds"] for s in stats[0][1:]]
    assert not others or max(others) < first["waited_for_seconds"] / 4, stats[0]
    said = [line for line in done.stderr.splitlines() if line.startswith("ddprun: ")]
    assert said[0].startswith("ddprun: stragglers: how long the other ranks waited for each"), said
    assert "rank 2 held each of them" in said[0], said
    assert re.match(r"ddprun: +2 +[0-9.]+ s +[0-9]+% +[0-9]+$", said[2]), said


def test_never_prints_no_table_and_a_job_without_libddp_reports_nothing(ddp_env, tmp_path):
    done = _ddprun(ddp_env, tmp_path, "-np", "2", "--stragglers", "never")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "stragglers" not in done.stderr, done.stderr
    plain = subprocess.run([sys.executable, "-m", "ddp.run", "-np", "2", "--stragglers",
                            "always", sys.executable, "-c", "print('hi')"], env=ddp_env,
                           capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0 and "stragglers" not in plain.stderr, plain.stderr


def test_the_table_reads_the_report_and_prints_only_what_is_worth_a_look(stragglers_mod):
    m = stragglers_mod
    rows = m.parse("stragglers 3:4.5:10 1:bad 0:0.25:2 7")
    assert rows == [m.Straggler(3, 4.5, 10), m.Straggler(0, 0.25, 2)]  # malformed items skipped
    assert m.parse("failure 1 ABORTED x") is None
    # rank 3 held each of the 3 others 1.5 s: of a 10 s job, printed by default; of a 100 s one,
    # only when asked; under a second, never by default.
    assert m.table(rows, 4, 10.0, {}, always=False)
    assert m.table(rows, 4, 100.0, {}, always=False) == []
    assert m.table(rows, 4, 100.0, {}, always=True)
    assert m.table([m.Straggler(3, 1.5, 1)], 4, 2.0, {}, always=False) == []
    assert m.table(rows, 1, 10.0, {}, always=True) == []  # one rank waits for nobody
    lines = m.table(rows, 4, 10.0, {3: "node-b", 0: "node-a"}, always=True)
    assert lines[0].endswith("rank 3 held each of them 1.50 s (15% of the job)"), lines
    assert lines[1].split() == ["rank", "host", "waited", "for", "share", "rounds", "last"], lines
    assert lines[2].split() == ["3", "node-b", "4.500", "s", "95%", "10"], lines
    many = [m.Straggler(r, 10.0 - r, 1) for r in range(10)]
    assert m.table(many, 10, 10.0, {}, always=True)[-1] == "  ... 2 more ranks, 3.000 s in all"
