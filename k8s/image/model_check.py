#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddp-model-check: loads a checkpoint the digits demo wrote (/fsx/checkpoints/digits.pt on the
cluster) and reports the model's accuracy on the held-out test images, the split the training
never saw; exits 1 below --min-accuracy. The model and the split are the demo's own
(examples/pytorch/train_digits.py, imported, not copied); the images come from scikit-learn, or
from the staged copy on FSx (--data /fsx/data/digits/digits.npz, `make eks-stage-data`).

    ddp-model-check --checkpoint /fsx/checkpoints/digits.pt --min-accuracy 0.97
"""
from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys
import types

DEMO = pathlib.Path("/opt/libddp/examples/pytorch/train_digits.py")  # where the images keep it


def load_demo(path: pathlib.Path):
    spec = importlib.util.spec_from_file_location("train_digits", path)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return demo


def check(checkpoint: pathlib.Path, demo_path: pathlib.Path = DEMO, data: str | None = None,
          seed: int = 42) -> tuple[float, int, dict]:
    """(accuracy on the held-out images, their number, the checkpoint's own record)."""
    import numpy as np
    import torch
    demo = load_demo(demo_path)
    if data:  # the staged images, split exactly as the demo splits scikit-learn's
        staged = np.load(data)
        demo.load_digits = lambda: types.SimpleNamespace(images=staged["images"],
                                                         target=staged["target"])
    _, (x_test, y_test) = demo.load_data(seed)
    saved = torch.load(checkpoint, map_location="cpu")
    model = demo.Net()
    model.load_state_dict(saved["model"])
    model.eval()
    with torch.no_grad():
        correct = int((model(x_test).argmax(1) == y_test).sum())
    record = {k: v for k, v in saved.items() if k in ("epochs", "accuracy")}
    return correct / len(y_test), len(y_test), record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ddp-model-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, type=pathlib.Path)
    parser.add_argument("--min-accuracy", type=float, default=0.0)
    parser.add_argument("--data", help="digits.npz (images, target) instead of scikit-learn's")
    parser.add_argument("--demo", type=pathlib.Path, default=DEMO, help="train_digits.py")
    parser.add_argument("--seed", type=int, default=42, help="the demo's --seed (its split)")
    args = parser.parse_args(argv)
    if not args.checkpoint.exists():
        print(f"ddp-model-check: no checkpoint at {args.checkpoint}", file=sys.stderr)
        return 2
    accuracy, count, record = check(args.checkpoint, args.demo, args.data, args.seed)
    trained = f"{record['epochs']} epochs, {record['accuracy']:.2%} at the end of training" \
        if {"epochs", "accuracy"} <= set(record) else "no training record"
    print(f"model check: test accuracy {accuracy:.2%} on {count} held-out images "
          f"({args.checkpoint}: {trained})", flush=True)
    if accuracy < args.min_accuracy:
        print(f"model check: FAILED: {accuracy:.2%} is below {args.min_accuracy:.2%}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
