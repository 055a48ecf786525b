# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Lists the tests of torch's distributed suite that pass on gloo and not on ddp, by reason.

    python tests/torch_suite/compare.py RESULTS_DIR... [--markdown] [--fail-on-gap]
    python tests/torch_suite/compare.py --list-profiler-gaps RESULTS_DIR
    python tests/torch_suite/compare.py --baseline-fits BASELINE TESTS_FILE

Each RESULTS_DIR holds gloo.json and ddp.json, run_suite.py's summaries of one torch (the same
selection of tests). Prints each backend's counts, then every gap (a test that passed on gloo and
did not pass on ddp) grouped by its reason, the cause read from ddp's failure message. A test that
ran on one backend only (a run cut short) is counted apart, never as a gap. --fail-on-gap: exit 1
when there is a gap (what `make torch-suite-ci` checks).

The profiler's events: where ddp failed on them (gloo records "gloo:<op>" events the suite
checks), the rest of the test was not run. --list-profiler-gaps prints those tests; run again on
ddp with --profiler-checks off into ddp-noprof.json beside the others, they are reported as
"missing events alone" where they then pass, under their other reason where they do not.

--baseline-fits: exit 0 when BASELINE (a recorded gloo.json, tests/torch_suite/gloo-baseline)
exists and holds exactly the tests TESTS_FILE names (run_all.sh ci then uses it instead of a live
gloo run), 1 otherwise.
"""

import argparse
import json
import os
import re
import sys

PROFILER = "profiler: no '<backend>:<op>' events, as gloo records"
# (group, pattern searched in ddp's failure message), first match wins. The messages are the
# ranks' tracebacks as torch's suite relays them.
REASONS = [
    ("recv from any source (not served)", r"from any source\) is not supported"),
    ("send/recv (not served)", r"send/recv are not supported|batch_isend_irecv|\bP2POp\b"),
    ("subgroups (not served)", r"subgroups \(new_group\) are not supported"),
    ("monitored_barrier (not served)", r"monitored_barrier"),
    ("sparse tensors (not served)", r"sparse"),
    (PROFILER, r"get_profiling_event|len\(events\)|assertTrue\(events\)|event_count"),
    ("rendezvous: WORLD_SIZE without RANK refused", r"environment is partial"),
    ("Work.is_completed() False after wait() (torch 2's Work for a Python backend)",
     r"assertTrue\(request\.is_completed\(\)\)|is_completed\(\)\)"),
    ("torch 2, debug level DETAIL: getBackendName not reached on a new_group's backend",
     r"getBackendName is not implemented"),
    ("torch 2: DDP's logging names the backend 'custom', not 'ddp'", r"'custom' != 'ddp'"),
    ("barrier: the group's timeout= not enforced (gloo raises)", r"_test_barrier_timeout"),
    ("a rank timed out or hung", r"timed out|Timing out|terminated or timed out"),
    ("another error than gloo's expected", r"does not match|not raised|Regex didn't match"),
]

CAUSE = re.compile(r"^(\w+(?:\.\w+)*(?:Error|Exception|Exit)\b.*)$", re.M)


def load(path):
    with open(path) as f:
        return json.load(f)


def cause_of(message):
    """The first exception line of the message (the first failing rank's), shortened."""
    found = CAUSE.findall(message or "")
    lines = [ln for ln in found if not ln.startswith("RuntimeError: Process ")] or found
    if not lines:
        lines = (message or "").strip().splitlines()[-1:] or [""]
    return lines[0][:160]


def reason_of(entry):
    message = entry.get("message", "")
    for group, pattern in REASONS:
        if re.search(pattern, message):
            return group
    return f"other: {cause_of(message)}"


def compare(gloo, ddp, noprof=None):
    """{reason: [test names]} for the gaps, and the names that ran on one backend only.

    `noprof`: ddp's summary of a run without the profiler checks, where there is one."""
    gaps, one_sided = {}, []
    for name, g in sorted(gloo["tests"].items()):
        d = ddp["tests"].get(name)
        if d is None:
            one_sided.append(name)
        elif g["outcome"] == "passed" and d["outcome"] != "passed":
            reason = reason_of(d)
            again = (noprof or {}).get("tests", {}).get(name)
            if reason == PROFILER and again is not None:
                reason = (f"{PROFILER}: missing events alone" if again["outcome"] == "passed"
                          else f"{reason_of(again)} (and {PROFILER})")
            gaps.setdefault(reason, []).append(name)
    one_sided += sorted(set(ddp["tests"]) - set(gloo["tests"]))
    return gaps, one_sided


def counts_line(summary):
    c = summary.get("counts", {})
    return (f"{summary['backend']}: {c.get('passed', 0)} passed, {c.get('failed', 0)} failed, "
            f"{c.get('error', 0)} error, {c.get('skipped', 0)} skipped "
            f"({len(summary['tests'])} of {summary['selected']} run, "
            f"{summary.get('seconds', 0)} s)")


def load_dir(directory):
    noprof = os.path.join(directory, "ddp-noprof.json")
    return (load(os.path.join(directory, "gloo.json")), load(os.path.join(directory, "ddp.json")),
            load(noprof) if os.path.exists(noprof) else None)


def report(directory, markdown):
    gloo, ddp, noprof = load_dir(directory)
    gaps, one_sided = compare(gloo, ddp, noprof)
    total = sum(len(v) for v in gaps.values())
    head = "### " if markdown else "== "
    print(f"{head}torch {ddp['torch']} ({directory})")
    for s in (gloo, ddp):
        print(f"- {counts_line(s)}")
    print(f"- passed on gloo, not on ddp: {total}")
    if one_sided:
        print(f"- ran on one backend only (not compared): {len(one_sided)}")
    for reason, names in sorted(gaps.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"\n{'**' if markdown else ''}{reason}{'**' if markdown else ''} ({len(names)}):")
        for name in names:
            print(f"- `{name}`" if markdown else f"  {name}")
    print()
    return total


def baseline_fits(baseline, tests_file):
    """Whether the recorded gloo run BASELINE holds exactly the tests of TESTS_FILE."""
    try:
        recorded = load(baseline)
        with open(tests_file) as f:
            wanted = {line.split("#")[0].strip() for line in f} - {""}
    except (OSError, ValueError):
        return False
    return set(recorded.get("tests", {})) == wanted


def main(argv):
    if argv[:1] == ["--baseline-fits"] and len(argv) == 3:
        return 0 if baseline_fits(argv[1], argv[2]) else 1
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dirs", nargs="+", help="directories holding gloo.json and ddp.json")
    p.add_argument("--markdown", action="store_true", help="print Markdown (for the docs)")
    p.add_argument("--fail-on-gap", action="store_true", help="exit 1 if any test is a gap")
    p.add_argument("--list-profiler-gaps", action="store_true",
                   help="print the gaps whose reason is the profiler's events, one a line")
    args = p.parse_args(argv)
    if args.list_profiler_gaps:
        for directory in args.dirs:
            gloo, ddp, _ = load_dir(directory)
            # None: nothing at all (not an empty line, which run_all.sh would take for a list).
            for name in compare(gloo, ddp)[0].get(PROFILER, []):
                print(name)
        return 0
    total = sum(report(d, args.markdown) for d in args.dirs)
    if args.fail_on_gap and total:
        print(f"FAILED: {total} test(s) pass on gloo and not on ddp")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
