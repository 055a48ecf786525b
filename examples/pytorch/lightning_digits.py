#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The digits CNN of train_digits.py trained with PyTorch Lightning on libddp's torch.distributed
backend: `DDPStrategy(process_group_backend="ddp")`, nothing else changed.

    python examples/pytorch/lightning_digits.py --devices 4          # Lightning starts the ranks
    ddprun -np 4 python examples/pytorch/lightning_digits.py --devices 4
    ddprun -np 4 -H a:2,b:2 python examples/pytorch/lightning_digits.py --devices 2 --nodes 2

Under ddprun (or torchrun, or SLURM) Lightning takes the ranks it was given (--devices is the
ranks per host, --nodes the hosts); run alone, it starts --devices ranks itself. Lightning puts a
DistributedSampler in front of the loader. Every rank checks at the end that the group ran on
`ddp`, that the ranks' parameters are equal and the test accuracy (framework_checks.py).
"""
import argparse
import sys

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.strategies import DDPStrategy
from torch.utils.data import DataLoader, TensorDataset

import ddp.torch  # noqa: F401 - registers the backend `ddp` (torch >= 2.5 also loads it by itself)
from framework_checks import check_trained
from train_digits import Net, load_data


class Digits(pl.LightningModule):
    def __init__(self, lr, epochs):
        super().__init__()
        self.net, self.lr, self.epochs = Net(), lr, epochs

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, _):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        return [opt], [torch.optim.lr_scheduler.CosineAnnealingLR(opt, self.epochs)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", type=int, default=2, help="ranks per host")
    ap.add_argument("--nodes", type=int, default=1, help="hosts")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=16, help="per rank")
    ap.add_argument("--lr", type=float, default=0.01, help="scaled by the number of ranks")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--target-accuracy", type=float, default=0.0)
    args = ap.parse_args()

    pl.seed_everything(args.seed, verbose=False)
    (x_train, y_train), (x_test, y_test) = load_data(args.seed)
    loader = DataLoader(TensorDataset(x_train, y_train), batch_size=args.batch_size,
                        shuffle=True)
    size = args.devices * args.nodes
    model = Digits(args.lr * size, args.epochs)
    trainer = pl.Trainer(accelerator="cpu", devices=args.devices, num_nodes=args.nodes,
                         strategy=DDPStrategy(process_group_backend="ddp"),
                         max_epochs=args.epochs, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, loader)
    return check_trained(model.net, x_test, y_test, args.target_accuracy, "lightning")


if __name__ == "__main__":
    sys.exit(main())
