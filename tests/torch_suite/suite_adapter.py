# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""How PyTorch's own distributed suite is pointed at the backend `ddp` and made to treat it as Gloo.

torch ships the suite as `torch.testing._internal.distributed.distributed_test`. It reads the
backend's name once, at import, into the module global `BACKEND`, and gates its tests on it in two
ways:

- at import, in decorators: `BACKEND != "gloo"` and `BACKEND in {...}` skips, and the feature sets
  of `common_distributed.DistTestCases` (`backend_feature["gpu"]`, `["subgroup"]`, `["ddp"]`, ...,
  `skip_collective[...]`) read through `require_backend_is_available` / `require_backend`;
- at run time, in test bodies: `if BACKEND == "gloo":` branches (which device, which error to
  expect), and `dist.get_backend() in PROFILING_SUPPORTED_BACKENDS`-style allowlists.

The bar is "every test that passes with gloo on CPU passes with ddp", so ddp must meet every gate
exactly where gloo meets it, on both torch lines (1.13 uses `require_backend`,
`require_backends_available` and `sandcastle_skip_if`; torch 2 `require_backend_is_available`
and `skip_but_pass_in_sandcastle_if`; both read the same `DistTestCases`). Rather than patch
each gate by name, which a new torch would outgrow:

1. The suite is imported with `BACKEND=gloo` in the environment, so every import-time gate (the
   decorators and the feature sets, whatever their names in this torch) decides as it does for
   gloo: the same tests run, the same are skipped.
2. Right after, the module global `BACKEND` becomes `GlooLikeName("ddp")`: a `str` whose value is
   `ddp` (what `init_process_group(backend=BACKEND)` and `new_group` receive: torch normalizes it
   through `dist.Backend`, which returns the plain string "ddp"), but which compares equal to
   "gloo" (and hashes as "gloo", so it is found in any set or dict that holds "gloo"). Every
   run-time `BACKEND == "gloo"` branch then takes gloo's path. The environment's `BACKEND` becomes
   "ddp" (the suite's `os.environ["BACKEND"]` reads compare it only with "nccl" and "mpi").
3. The backend is added beside gloo wherever the suite lists backends by their plain names, since
   torch returns the plain "ddp" from `dist.get_backend()`: every `DistTestCases` feature set that
   holds "gloo", the "plugin" set (the suite's hook for third-party backends), and the profiling
   allowlists (so the profiler events gloo is checked for are expected from ddp too, not skipped;
   import_suite's profiler_checks=False leaves them out).

The name clash: `DistTestCases.backend_feature` is keyed by feature, and one feature is named
"ddp" (the backends that serve DistributedDataParallel). Our backend is also named "ddp". The two
never meet here: features are only ever looked up by their own key, never by a backend's name,
and our backend enters `backend_feature["ddp"]` because it serves DDP (gloo is there, and
tests/python/test_c10d.py checks DDP on ddp), not because of its name. `GlooLikeName` hashes as
"gloo", so `BACKEND in backend_feature[...]` answers as gloo's does, and
`backend_feature[BACKEND]` (which the suite never does) would look up "gloo", not the feature.
"""

import importlib
import json
import os

SUITE_MODULE = "torch.testing._internal.distributed.distributed_test"
COMMON_MODULE = "torch.testing._internal.common_distributed"
# The suite's allowlists of backends by plain name (torch 1.13 and 2 both have these three).
PROFILING_LISTS = ("PROFILING_SUPPORTED_BACKENDS", "CUDA_PROFILING_SUPPORTED_BACKENDS",
                   "SEND_RECV_PROFILING_SUPPORTED_BACKENDS")


class GlooLikeName(str):
    """The name "ddp" for torch, "gloo" for every comparison the suite makes."""

    _AS = "gloo"

    def __eq__(self, other):
        return str.__eq__(self, other) or other == self._AS

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash(self._AS)


def _treat_as_gloo(suite, common, name, profiler_checks):
    """Steps 2 and 3 of the module docstring, once the suite is imported with BACKEND=gloo."""
    suite.BACKEND = GlooLikeName(name)
    os.environ["BACKEND"] = name
    for table in (common.DistTestCases.backend_feature, common.DistTestCases.skip_collective):
        for backends in table.values():
            if "gloo" in backends:
                backends.add(name)
    common.DistTestCases.backend_feature["plugin"].add(name)
    for list_name in PROFILING_LISTS if profiler_checks else ():
        allowlist = getattr(suite, list_name, None)
        if allowlist is not None and "gloo" in allowlist and name not in allowlist:
            allowlist.append(name)


def import_suite(backend, profiler_checks=True):
    """Imports torch's suite for `backend` ("gloo", or "ddp" treated as gloo); returns the module.

    The caller has set WORLD_SIZE and TEMP_DIR; for "ddp" it has imported ddp.torch.
    profiler_checks=False leaves ddp off the profiling allowlists: the suite then runs each
    collective without checking the profiler's events for it, as it does for any backend it does
    not list (the runner's --profiler-checks off: what else fails, where the events are missing).
    """
    os.environ["BACKEND"] = "gloo"
    suite = importlib.import_module(SUITE_MODULE)
    if backend != "gloo":
        _treat_as_gloo(suite, importlib.import_module(COMMON_MODULE), backend, profiler_checks)
    return suite


def make_test_class(suite, backend, module_name, start_method="spawn"):
    """The suite's tests as one TestCase class that starts each test's ranks with `start_method`.

    spawn is what torch's own runner uses: each rank is a fresh interpreter. forkserver forks each
    rank from one server process that imported torch, the suite and ddp.torch once (the runner's
    --start-method says when that is worth it). `module_name` is the module the class is published
    in (the runner's, `__main__`): both pickle the class by reference, and each rank (or the fork
    server) finds it again by re-importing that module as `__mp_main__`.
    """
    import torch.multiprocessing

    base = (suite.TestDistBackend, suite.DistributedTest._DistTestBase)

    def setUp(self):  # unittest's name
        suite.TestDistBackend.setUp(self)
        if start_method != "spawn":
            # torch's setUp has just pointed TEMP_DIR and INIT_METHOD at this test's fresh
            # directory; a spawned rank inherits them, a forked one has its server's: it reads
            # them from beside the test's file (torch hands each rank that file's name).
            with open(f"{self.file_name}.env", "w") as f:
                json.dump(dict(os.environ), f)
        self._start_processes(torch.multiprocessing.get_context(start_method).Process)

    def _run(cls, rank, test_name, file_name, *args, **kwargs):
        if start_method != "spawn":
            with open(f"{file_name}.env") as f:
                env = json.load(f)
            os.environ.clear()
            os.environ.update(env)
            suite.INIT_METHOD = env.get("INIT_METHOD", suite.INIT_METHOD)  # spawn: read at import
        return suite.TestDistBackend._run.__func__(cls, rank, test_name, file_name, *args, **kwargs)

    def tearDown(self):  # unittest's name
        if start_method != "spawn" and os.path.exists(f"{self.file_name}.env"):
            os.unlink(f"{self.file_name}.env")
        suite.TestDistBackend.tearDown(self)

    name = f"TestDistBackendWithSpawn{backend.upper()}"
    cls = type(name, base, {"setUp": setUp, "tearDown": tearDown, "_run": classmethod(_run),
                            "__module__": module_name})
    cls.__qualname__ = name
    return cls
