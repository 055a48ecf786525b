# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The torch.distributed backend's checks of a call's own tensors, made at the call: outputs of
the count, size and dtype the input asks for, as Gloo checks them. What this rank alone can get
wrong is refused here with a ValueError, before anything is sent; left to the copy that finishes
the operation it would put the data in the wrong places, or fail that copy on this rank alone
while the others went on."""
from __future__ import annotations

PREFIX = "torch.distributed backend 'ddp': "


def _refuse(what, message):
    raise ValueError(f"{PREFIX}{what}: {message}")


def one(tensors, what):
    """One tensor per rank (torch's lists hold one per device; the backend serves one)."""
    if len(tensors) != 1:
        raise ValueError(f"{PREFIX}{what} takes one tensor per rank (got {len(tensors)}); use "
                         f"one process per device")


def dtypes(tensors, dtype, what):
    """Every tensor of `tensors` of `dtype` (the input's)."""
    for i, t in enumerate(tensors):
        if t.dtype != dtype:
            _refuse(what, f"tensor {i} is {t.dtype}, the input {dtype}")


def count(items, n, what, whose):
    """`n` of `items` (tensors, or lists of them), one per rank."""
    if len(items) != n:
        _refuse(what, f"needs {n} {whose} (one per rank), got {len(items)}")


def whole(big, small, size, what, big_role, small_role):
    """`big` holds `size` times `small`'s elements (an all_gather_into_tensor's output, a
    reduce_scatter_tensor's input) and has its dtype."""
    if big.numel() != small.numel() * size:
        raise ValueError(f"{PREFIX}{what}'s {big_role} has {big.numel()} elements, not {size} x "
                         f"the {small_role}'s {small.numel()}")
    dtypes([big], small.dtype, what)


def like(tensors, n, numel, dtype, what, whose="output"):
    """`n` tensors of `numel` elements and `dtype` each (an allgather's outputs, a scatter's
    inputs)."""
    count(tensors, n, what, f"{whose} tensors")
    for i, t in enumerate(tensors):
        if t.numel() != numel:
            _refuse(what, f"{whose} tensor {i} has {t.numel()} elements, the input {numel}")
    dtypes(tensors, dtype, what)


def coalesced(outer, inner, size, factor, what):
    """The coalesced forms: the tensors of `outer` pairwise `factor` x those of `inner`, each
    pair of one dtype (all_gather_single_coalesced: outputs x size of the inputs;
    reduce_scatter_single_coalesced: inputs x size of the outputs; allgather_coalesced: one
    rank's outputs x 1 of the inputs). Pairs may differ in dtype from each other."""
    if len(outer) != len(inner):
        _refuse(what, f"{len(outer)} tensors against {len(inner)}")
    for i, (big, small) in enumerate(zip(outer, inner)):
        if big.numel() != small.numel() * factor:
            _refuse(what, f"tensor {i}: {big.numel()} elements, not {size} x {small.numel()}")
        if big.dtype != small.dtype:
            _refuse(what, f"tensor {i} is {big.dtype} against {small.dtype}")


def splits(split_sizes, rows, size, what, whose):
    """all_to_all_single's split sizes: empty (even: `rows` a multiple of the ranks), or one per
    rank, non-negative, adding up to `rows`. Returns them as a list of ints."""
    sizes = [int(s) for s in split_sizes]
    if not sizes:
        if rows % size:
            _refuse(what, f"the {whose}'s first dimension ({rows}) does not split evenly over "
                          f"{size} ranks; pass split sizes")
        return sizes
    if len(sizes) != size or any(s < 0 for s in sizes) or sum(sizes) != rows:
        _refuse(what, f"{whose} split sizes {sizes} must be {size} non-negative numbers adding "
                      f"up to the {whose}'s first dimension ({rows})")
    return sizes


def received(got, want, what):
    """After an alltoall: what came from each rank (`got`) against what the outputs hold
    (`want`, one per rank). A ValueError of this rank's alone: the data moved, and the peers'
    operations completed."""
    if list(got) != list(want):
        _refuse(what, f"the ranks sent {list(got)} (first-dimension rows, or elements, from each "
                      f"rank), the outputs hold {list(want)}")
