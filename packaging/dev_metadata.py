#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Writes the package metadata of a development install (`make build` puts `ddp` into a venv
with `cmake --install`, which makes no .dist-info): the name and version, and the entry points
of pyproject.toml (torch's "torch.backends", so that torch >= 2.5 registers the backend `ddp`
at `import torch` as it does after `pip install`), read from pyproject.toml and VERSION.

    packaging/dev_metadata.py SITE_PACKAGES
"""
import pathlib
import shutil
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main(site):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name, version = project["name"], (ROOT / "VERSION").read_text().strip()
    for old in pathlib.Path(site).glob(f"{name}-*.dist-info"):
        shutil.rmtree(old)
    info = pathlib.Path(site) / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("make build (cmake --install)\n")
    groups = project.get("entry-points", {})  # the scripts: make build writes ddprun itself
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()) + "\n"
        for group, points in groups.items() if points))


if __name__ == "__main__":
    main(sys.argv[1])
