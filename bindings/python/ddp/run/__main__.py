# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""`python -m ddp.run ...`, and the agent on another host: `PYTHON .../ddp/run/__main__.py
--_agent`, run by its path. Run so, it loads this folder as a package of its own (not as part of
`ddp`, whose compiled extension the agent does not need)."""
import sys

if __package__:
    from . import main
else:
    import importlib.util
    import os

    _here = os.path.dirname(os.path.abspath(__file__))
    _spec = importlib.util.spec_from_file_location(
        "_ddprun", os.path.join(_here, "__init__.py"), submodule_search_locations=[_here])
    assert _spec is not None and _spec.loader is not None  # a path to a file that exists
    _package = importlib.util.module_from_spec(_spec)
    sys.modules["_ddprun"] = _package
    _spec.loader.exec_module(_package)
    main = _package.main

if __name__ == "__main__":
    sys.exit(main())
