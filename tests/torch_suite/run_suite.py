# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Runs PyTorch's own distributed suite (distributed_test.py, shipped with torch) on gloo or ddp.

    python tests/torch_suite/run_suite.py --backend ddp --out ddp.json [-k NAME_REGEX ...]
        [--tests-file FILE] [--world-size 3] [--init-method env|file]
        [--start-method spawn|forkserver] [--timeout SECONDS]

Each test starts WORLD_SIZE ranks with the spawn start method, as torch's own runner
(test/distributed/test_distributed_spawn.py) does; `ddp` is treated by the suite as `gloo`
(suite_adapter.py says how and why). Writes a JSON summary after every test: each test's outcome
(passed, failed, error, skipped), its seconds and, for the failed and skipped, the message's tail.
docs/testing.md describes it; compare.py lists what passes on gloo and not on ddp.
"""

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import traceback
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite_adapter  # after the path

# The runner's settings reach the ranks through the environment: spawn re-imports this module as
# each rank's main module, and the code at the bottom rebuilds the test class there (importing
# ddp.torch first, so that the backend is registered in every rank).
ENV_BACKEND = "DDP_TORCH_SUITE_BACKEND"
ENV_START_METHOD = "DDP_TORCH_SUITE_START_METHOD"
ENV_PROFILER_CHECKS = "DDP_TORCH_SUITE_PROFILER_CHECKS"
MESSAGE_TAIL = 3000  # characters of a failure's message kept in the summary


def load_test_class(backend, start_method, profiler_checks):
    """Registers the backend (ddp), imports the suite, publishes its TestCase class here."""
    if backend == "ddp":
        import ddp.torch  # noqa: F401 (registers torch.distributed's backend "ddp")
    suite = suite_adapter.import_suite(backend, profiler_checks)
    cls = suite_adapter.make_test_class(suite, backend, __name__, start_method)
    globals()[cls.__name__] = cls
    return cls


class OutcomeRecorder(unittest.TestResult):
    """Keeps each test's outcome and writes the summary after every test."""

    def __init__(self, summary, out_path):
        super().__init__()
        self.summary, self.out_path, self.started = summary, out_path, {}
        self.t0 = time.monotonic()

    def startTest(self, test):  # noqa: N802 (unittest's names, here and below)
        super().startTest(test)
        self.started[test.id()] = time.monotonic()
        print(f"{_short(test)} ...", end=" ", flush=True)

    def _record(self, test, outcome, message=""):
        seconds = time.monotonic() - self.started.get(test.id(), time.monotonic())
        entry = {"outcome": outcome, "seconds": round(seconds, 1)}
        if message:
            entry["message"] = message[-MESSAGE_TAIL:]
        self.summary["tests"][_short(test)] = entry
        self.summary["seconds"] = round(time.monotonic() - self.t0, 1)
        print(f"{outcome} ({seconds:.1f} s)", flush=True)
        write_summary(self.summary, self.out_path)

    def addSuccess(self, test):  # noqa: N802 - unittest's name
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test, err):  # noqa: N802 - unittest's name
        super().addFailure(test, err)
        self._record(test, "failed", _format(err))

    def addError(self, test, err):  # noqa: N802 - unittest's name
        super().addError(test, err)
        self._record(test, "error", _format(err))

    def addSkip(self, test, reason):  # noqa: N802 - unittest's name
        super().addSkip(test, reason)
        self._record(test, "skipped", str(reason))

    def addExpectedFailure(self, test, err):  # noqa: N802 - unittest's name
        super().addExpectedFailure(test, err)
        self._record(test, "passed", "expected failure")

    def addUnexpectedSuccess(self, test):  # noqa: N802 - unittest's name
        super().addUnexpectedSuccess(test)
        self._record(test, "failed", "unexpected success")


def _short(test):
    return test.id().rsplit(".", 1)[-1]


def _format(err):
    return "".join(traceback.format_exception(*err))


def write_summary(summary, path):
    counts = {}
    for entry in summary["tests"].values():
        counts[entry["outcome"]] = counts.get(entry["outcome"], 0) + 1
    summary["counts"] = counts
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def select_tests(cls, patterns, names_file):
    """The suite's test names, those matching any regex (all without one) or listed in the file."""
    names = unittest.TestLoader().getTestCaseNames(cls)
    wanted = set()
    if names_file:
        with open(names_file) as f:
            wanted = {ln.split("#")[0].strip() for ln in f} - {""}
        missing = wanted - set(names)
        if missing:
            raise SystemExit(f"{names_file}: not in this torch's suite: {sorted(missing)}")
        if not (wanted or patterns):
            return []  # a file that names none selects none, never the whole suite
    regexes = [re.compile(p) for p in patterns]
    if not (wanted or regexes):
        return list(names)
    return [n for n in names if n in wanted or any(r.search(n) for r in regexes)]


def installed_backend():
    """Which ddp.torch the run used (others may be changing and reinstalling it meanwhile): the
    git blob id of each file of its backend (ddp/torch/c10d/), and whether all are the ones
    committed at HEAD."""
    import ddp.torch

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def git(*argv):
        return subprocess.run(["git", "-C", root, *argv], capture_output=True,
                              text=True).stdout.strip()
    package = os.path.join(os.path.dirname(ddp.torch.__file__), "c10d")
    blobs = {f: git("hash-object", os.path.join(package, f))[:10]
             for f in sorted(os.listdir(package)) if f.endswith(".py")}
    committed = all(git("rev-parse", f"HEAD:bindings/python/ddp/torch/c10d/{f}")[:10] == b
                    for f, b in blobs.items())
    return {"files": blobs, "head": git("rev-parse", "--short", "HEAD"),
            "as_committed": committed}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", required=True, choices=["gloo", "ddp"])
    p.add_argument("--out", required=True, help="the JSON summary to write")
    p.add_argument("-k", "--filter", action="append", default=[], metavar="REGEX",
                   help="run the tests whose name matches (repeatable; default: all)")
    p.add_argument("--tests-file", help="run the tests named in this file, one a line (# comments)")
    p.add_argument("--world-size", type=int, default=3,
                   help="ranks per test (3: what torch's CI uses for gloo on CPU)")
    p.add_argument("--init-method", choices=["env", "file"], default="env",
                   help="INIT_METHOD as torch's CI sets it for its two variants of the suite: "
                   "env:// (the default) or file://; only the runner's own process reads it (a few "
                   "gloo timeout tests run in the file variant alone): torch points each test's "
                   "ranks at a file of their own either way")
    p.add_argument("--timeout", type=int, default=300,
                   help="seconds before a test's ranks are killed (the suite's default: 300)")
    p.add_argument("--start-method", choices=["spawn", "forkserver"], default="spawn",
                   help="how each test's ranks start: spawn (torch's runner: a fresh interpreter "
                   "each, 3-7 s of imports) or forkserver (forked from one process that imported "
                   "torch, the suite and ddp.torch once)")
    p.add_argument("--profiler-checks", choices=["as-gloo", "off"], default="as-gloo",
                   help="ddp: expect the profiler events the suite checks for gloo (as-gloo), or "
                   "check none, as the suite does for backends it does not list (off)")
    p.add_argument("--list", action="store_true", help="print the selected names, run nothing")
    return p.parse_args(argv)


def setup_environment(args, temp_dir):
    """What the suite reads from the environment, before it is imported (here and in the ranks)."""
    for sub in ("barrier", "test_dir"):
        os.makedirs(os.path.join(temp_dir, sub), exist_ok=True)
    os.environ.update({
        ENV_BACKEND: args.backend,
        ENV_START_METHOD: args.start_method,
        ENV_PROFILER_CHECKS: args.profiler_checks,
        "WORLD_SIZE": str(args.world_size),
        "TEMP_DIR": temp_dir,
        "DISTRIBUTED_TESTS_DEFAULT_TIMEOUT": str(args.timeout),
        "INIT_METHOD": ("env://" if args.init_method == "env"
                        else f"file://{os.path.join(temp_dir, 'init_file')}"),
    })
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")


def start_fork_server(backend, temp_dir):
    """Starts multiprocessing's fork server with torch, the suite and the backend imported.

    Python 3.11's fork server does not preload `__main__` (it looks for a key its caller never
    sets), so each forked rank would import everything anew, as a spawned one does. It preloads
    named modules; the suite among them is imported there as import_suite imports it (BACKEND=gloo,
    and an INIT_METHOD of file:// as the ranks see it), and each rank then re-runs this module
    against those imports: load_test_class costs it a fraction of a second instead of 3-7 s.
    """
    import multiprocessing.forkserver

    import torch.multiprocessing
    modules = ["torch", "torch.distributed", suite_adapter.SUITE_MODULE]
    if backend == "ddp":
        modules.insert(2, "ddp.torch")
    torch.multiprocessing.get_context("forkserver").set_forkserver_preload(modules)
    saved = {k: os.environ.get(k) for k in ("BACKEND", "INIT_METHOD")}
    os.environ["BACKEND"] = "gloo"
    os.environ["INIT_METHOD"] = f"file://{os.path.join(temp_dir, 'init_file')}"
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def new_summary(args, selected):
    """The summary's header: what ran, where, how."""
    import torch

    summary = {"backend": args.backend, "torch": torch.__version__,
               "python": platform.python_version(), "world_size": args.world_size,
               "init_method": args.init_method,
               "start_method": args.start_method, "profiler_checks": args.profiler_checks,
               "selected": selected, "tests": {}}
    if args.backend == "ddp":
        summary["ddp_backend"] = installed_backend()
    return summary


def main(argv):
    args = parse_args(argv)
    # torch's common_utils parses sys.argv when imported: it must not see the runner's options,
    # here nor in the ranks (spawn hands them the parent's sys.argv).
    sys.argv = sys.argv[:1]
    with tempfile.TemporaryDirectory(prefix="torch-suite-") as temp_dir:
        setup_environment(args, temp_dir)
        if args.start_method == "forkserver" and not args.list:
            start_fork_server(args.backend, temp_dir)
        cls = load_test_class(args.backend, args.start_method, args.profiler_checks == "as-gloo")
        names = select_tests(cls, args.filter, args.tests_file)
        if args.list:
            print("\n".join(names))
            return 0
        summary = new_summary(args, len(names))
        recorder = OutcomeRecorder(summary, args.out)
        unittest.TestSuite(cls(n) for n in names).run(recorder)
        summary["seconds"] = round(time.monotonic() - recorder.t0, 1)
        if args.backend == "ddp":
            now = installed_backend()
            if now["files"] != summary["ddp_backend"]["files"]:
                summary["ddp_backend_changed_during_run"] = now
                print("warning: ddp.torch was reinstalled during the run:", now)
        write_summary(summary, args.out)
    print(json.dumps(summary["counts"]), f"in {summary['seconds']} s; summary: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
elif os.environ.get(ENV_BACKEND):
    # A rank (this module re-imported as `__mp_main__` by spawn, or by the fork server's child,
    # where the imports are already done): the same class again.
    load_test_class(os.environ[ENV_BACKEND], os.environ[ENV_START_METHOD],
                    os.environ.get(ENV_PROFILER_CHECKS) != "off")
