# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The Python package's shape: every module imports first, alone, in a fresh interpreter (an
import cycle breaks exactly there: a module met half-made); no import sits inside a function to
dodge a cycle (one that must be there, for an optional dependency or the agent's lightness, says
why with `# lazy:`); every package's __init__.py says in its first line what the folder is and
only imports and re-exports. Run by test-python (torch 1.13) and test-torch2; the TensorFlow
modules where TensorFlow is (tests/tensorflow/test_imports.py, in test-tf)."""
import ast
import concurrent.futures
import importlib.util
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.torch  # on both torch lines: the backend's classes differ

SOURCE = pathlib.Path(__file__).resolve().parents[2] / "bindings" / "python"
PACKAGES = ("ddp", "ddp_model")
# __init__.py: imports, __all__, constants and a module __getattr__ (lazy attributes); no more.
INIT_MOST_LINES = 60


def source_files():
    files = [SOURCE / "_ddp_torch_backend.py"]
    for package in PACKAGES:
        files += sorted((SOURCE / package).rglob("*.py"))
    return files


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(SOURCE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def needs(name: str):
    """Why this interpreter cannot import the module (None: it can)."""
    if name.startswith("ddp.tensorflow"):
        if importlib.util.find_spec("tensorflow") is None:
            return "TensorFlow is not installed here (test-tf imports these)"
        if ".keras" in name and importlib.util.find_spec("keras") is None:
            return "Keras is not installed here"
    if name.startswith("ddp.torch") and importlib.util.find_spec("torch") is None:
        return "torch is not installed here"
    if name.startswith("ddp.ray") and importlib.util.find_spec("ray") is None:
        return "Ray is not installed here (make torch2-frameworks: test-torch2 imports these)"
    if name.startswith("ddp.spark") and importlib.util.find_spec("pyspark") is None:
        return "PySpark is not installed here (make torch2-frameworks: test-torch2 imports these)"
    if name == "ddp.torch.torchft" and importlib.util.find_spec("torchft") is None:
        return "torchft is not installed here (make torch2-frameworks: test-torch2 imports it)"
    if name.endswith("__main__"):
        return "runs the command it belongs to"
    return None


MODULES = sorted({module_name(p) for p in source_files()})


def test_the_modules_are_found():
    assert {"ddp", "ddp._job", "ddp.elastic", "ddp.torch.c10d", "ddp.torch.c10d.backend",
            "ddp.tensorflow.collectives", "ddp.ps.client", "ddp.run.cli",
            "ddp.run.static_job", "ddp.run.elastic_driver", "ddp_model.formulas"} <= set(MODULES)


def import_each_first(names, env):
    """Imports each module in an interpreter of its own, two at a time (an import is a core's
    work: CI's two cores halve the time); fails naming every module that did not import, with its
    error, and says which were not tried here and why."""
    tried = []
    for name in names:
        why = needs(name)
        if why:
            print(f"not imported here: {name}: {why}")
        else:
            tried.append(name)

    def imports(name):
        done = subprocess.run([sys.executable, "-c", f"import {name}"], env=env,
                              capture_output=True, text=True, timeout=120)
        return name, done.returncode, done.stderr[-3000:]

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(imports, tried))
    failed = [f"{name}:\n{stderr}" for name, code, stderr in results if code != 0]
    assert not failed, "\n\n".join(failed)
    return tried


def test_each_module_imports_first_in_a_fresh_interpreter(ddp_env):
    tried = import_each_first(MODULES, ddp_env)
    assert len(tried) >= len(MODULES) // 2, tried  # most of the package is importable here


def lazy_imports(path: pathlib.Path):
    """(line, text) of every import inside a function, and whether it says why (# lazy:)."""
    text = path.read_text()
    lines = text.splitlines()
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    line = lines[inner.lineno - 1]
                    found.append((inner.lineno, line.strip(), "# lazy:" in line))
    return found


def test_no_import_inside_a_function_without_a_reason():
    unexplained = [f"{p.relative_to(SOURCE)}:{n}: {line}" for p in source_files()
                   for n, line, said in lazy_imports(p) if not said]
    assert unexplained == [], "\n".join(unexplained)


def test_the_check_finds_an_import_in_a_function(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from . import g\n\n\ndef h():\n    import os  # lazy: x\n")
    assert lazy_imports(sample) == [(2, "from . import g", False),
                                    (6, "import os  # lazy: x", True)]


@pytest.mark.parametrize("path", [p for p in source_files() if p.name == "__init__.py"],
                         ids=lambda p: str(p.relative_to(SOURCE).parent))
def test_every_init_says_what_its_folder_is_and_only_re_exports(path):
    tree = ast.parse(path.read_text())
    doc = ast.get_docstring(tree)
    assert doc and doc.splitlines()[0].strip(), f"{path}: no docstring saying what it is"
    assert len(path.read_text().splitlines()) <= INIT_MOST_LINES, path
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            assert node.name == "__getattr__", f"{path}:{node.lineno}: {node.name} defined here"


@pytest.mark.parametrize("api,module,package", [("ddp.ray", "ray", "'ray[train]'"),
                                                ("ddp.spark", "pyspark", "pyspark"),
                                                ("ddp.torch.torchft", "torchft", "torchft")])
def test_ray_spark_and_torchft_missing_say_what_to_install(api, module, package, ddp_env):
    """Importing ddp.ray without Ray (ddp.spark without PySpark, ddp.torch.torchft without
    torchft) names what to install, whether or not this environment has it (the test hides
    it)."""
    code = f"import sys; sys.modules[{module!r}] = None; import {api}"
    done = subprocess.run([sys.executable, "-c", code], env=ddp_env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0
    assert f"ModuleNotFoundError: {api} needs {module}, which is not installed in " in \
        done.stderr and f": pip install {package}" in done.stderr, done.stderr[-2000:]
