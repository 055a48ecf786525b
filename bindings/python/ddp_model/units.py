# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Units of the cost model: bytes (64M, 1G), link rates (400gbit), and the share of a link's rate
that TCP payload can have at its MTU."""
from __future__ import annotations

import argparse
import re

ALGOS = ("ring", "rd", "hier")
DEFAULT_MTU = 1500
UNITS = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}


def parse_bytes(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMGT]?)(I?B)?", text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (say 64M, 1G)")
    return int(m.group(1)) << UNITS[m.group(2)]


def parse_rate(text: str) -> float:
    """Bits per second from 400gbit, 25gbit, 1e9."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]?)bit", text.strip().lower())
    if m:
        return float(m.group(1)) * 1000 ** "_kmgt".index(m.group(2) or "_")
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad rate {text!r} (say 400gbit)") from None


def frame_share(mtu: int | None = None) -> float:
    """The most of a link's rate that TCP payload can have at this MTU (None: 1500): a frame
    carries MTU - 52 bytes of it (IPv4 and TCP headers, the timestamps option) and takes MTU + 14
    of the link (its Ethernet header). 1500: 95.6%; 9001: 99.3%."""
    mtu = mtu or DEFAULT_MTU
    return (mtu - 52) / (mtu + 14)
