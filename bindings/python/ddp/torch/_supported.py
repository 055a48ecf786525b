# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The oldest torch ddp.torch runs on, checked at import: an older one is refused by name here,
not by an AttributeError deep inside the backend (pyproject.toml's `torch` extra says the same)."""
import re

import torch

OLDEST = (1, 13)


def _line(version):
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else None


line = _line(torch.__version__)
if line is None or line < OLDEST:
    raise ImportError(f"ddp.torch needs torch >= {OLDEST[0]}.{OLDEST[1]}; this Python has torch "
                      f"{torch.__version__} ({torch.__file__}): pip install 'torch>=1.13'")
