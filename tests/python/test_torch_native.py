# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""What ddp.torch does with the module compiled against a torch (ddp/torch/_native.py) when it
cannot be used, and with a torch it does not support: a wheel made against one torch meets
others (docs/install.md). A damaged module (cut short, or not an ELF file) is named and left
alone before the loader maps it; a torch older than 1.13 is refused naming its version. The
wheel's clean-room test (tests/wheel_install_test.sh) runs the same on an installed wheel, with
torch 1.13 and with a damaged module on torch 2."""
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")


def _native():
    from ddp.torch import _native
    return _native


def test_the_module_built_for_this_torch_reads_as_whole():
    native = _native()
    if native.module is None:
        pytest.skip(f"no module for this torch here: {native.missing}")
    assert native._truncated(native.module.__file__) is None


def test_a_module_cut_short_or_not_elf_is_named_not_mapped(tmp_path):
    native = _native()
    if native.module is None:
        pytest.skip(f"no module for this torch here: {native.missing}")
    whole = open(native.module.__file__, "rb").read()
    cut = tmp_path / "cut.so"
    cut.write_bytes(whole[:4096])
    assert native._truncated(str(cut)).startswith("4096 bytes where its headers need ")
    text = tmp_path / "text.so"
    text.write_text("not a library")
    assert native._truncated(str(text)) == "not a 64-bit ELF file"
    assert "No such file" in native._truncated(str(tmp_path / "absent.so"))
    # Headers whose numbers are nonsense: named, never an exception out of the import.
    bad = bytearray(whole[:64])
    bad[0x36:0x38] = (8).to_bytes(2, "little")  # e_phentsize
    (tmp_path / "small.so").write_bytes(bytes(bad) + whole[64:])
    assert native._truncated(str(tmp_path / "small.so")) == "a program header size of 8"
    bad = bytearray(whole[:64])
    bad[0x20:0x28] = (2**63 + 5).to_bytes(8, "little")  # e_phoff past any file
    (tmp_path / "far.so").write_bytes(bytes(bad) + whole[64:])
    assert "bytes where its headers need" in native._truncated(str(tmp_path / "far.so"))


def test_a_damaged_module_leaves_the_python_path_with_its_reason(tmp_path, ddp_env):
    """The loading itself, in a fresh interpreter: the module's file replaced by a copy cut
    short (found first on the package's path), the import does not die, `missing` says why."""
    native = _native()
    if native.module is None:
        pytest.skip(f"no module for this torch here: {native.missing}")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    name = os.path.basename(native.module.__file__)
    (overlay / name).write_bytes(open(native.module.__file__, "rb").read()[:8192])
    script = textwrap.dedent(f"""
        import ddp.torch
        ddp.torch.__path__.insert(0, {str(overlay)!r})
        import importlib, sys
        native = sys.modules.pop("ddp.torch._native")
        sys.modules.pop(native.module.__name__)  # found again: on the overlay first
        native = importlib.import_module("ddp.torch._native")
        print("module", native.module)
        print("missing", native.missing)
    """)
    done = subprocess.run([sys.executable, "-c", script], env=ddp_env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "module None" in done.stdout, done.stdout
    assert f"{overlay / name} is damaged (8192 bytes where its headers need" in done.stdout


def test_a_torch_older_than_supported_is_refused_by_name(tmp_path, ddp_env):
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("__version__ = '1.12.1'\n")
    env = dict(ddp_env, PYTHONPATH=os.pathsep.join([str(tmp_path), ddp_env.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", "import ddp.torch"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "ddp.torch needs torch >= 1.13; this Python has torch 1.12.1" in done.stderr, \
        done.stderr
