# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Compression (docs/compression.md) from Python: ddp.allreduce(compression=) on numpy arrays,
DistributedOptimizer(compression=Compression.bf16/.int8/.powersgd) and the DDP comm hooks of
ddp.torch.hooks on both torch lines. Jobs over TCP (DDP_TRANSPORT=tcp), so that every codec's
bytes travel and are counted; the workers (tests/python/workers/compression_*.py) check each
rank's results and print digests that must agree across ranks."""
import re

import pytest


def digests(stdout):
    """{label: set of digests over the ranks}."""
    out = {}
    for label, digest in re.findall(r"^\[\d+\] digest (.+) (\w+)$", stdout, re.M):
        out.setdefault(label, set()).add(digest)
    return out


def test_numpy_every_codec_within_its_error_identical_everywhere(run_job):
    job = run_job(3, "compression_numpy.py", env={"DDP_TRANSPORT": "tcp"})
    assert job.stdout.count("compression numpy ok") == 3, job.stdout
    found = digests(job.stdout)
    assert {"bf16", "fp16", "int8", "powersgd:3"} <= set(found), found
    assert all(len(d) == 1 for d in found.values()), found  # the same bits on every rank


@pytest.mark.torch
@pytest.mark.parametrize("how", ["optimizer", "hooks"])
def test_torch_trains_with_every_codec_and_ranks_agree(run_job, how):
    job = run_job(2, "compression_torch.py", how, env={"DDP_TRANSPORT": "tcp"})
    assert job.stdout.count("compression torch ok") == 2, job.stdout
    found = digests(job.stdout)
    want = 3 if how == "optimizer" else 5
    assert len(found) == want and all(len(d) == 1 for d in found.values()), found
