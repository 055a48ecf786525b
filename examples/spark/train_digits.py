#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The digits CNN of examples/pytorch/train_digits.py on a Spark cluster, two ways:

    python examples/spark/train_digits.py --path run --workers 4 --master local-cluster[2,2,1024]
    python examples/spark/train_digits.py --path distributor --workers 4 --master spark://HOST:7077

`run`: ddp.spark.run (Horovod's horovod.spark.run) runs a Horovod-style training function as 4
barrier tasks: ddp.init(), DistributedOptimizer, broadcast from rank 0.
`distributor`: Spark's own TorchDistributor (pyspark.ml.torch.distributor) starts torchrun in 4
tasks; the function is plain torch.distributed with DistributedDataParallel and
init_process_group("ddp"), and never imports ddp: torch >= 2.5 loads the backend through its
entry point.

The executors run this interpreter (PYSPARK_PYTHON, set here unless the environment sets it),
which must have ddp and torch. The model and data come from examples/pytorch/train_digits.py,
sent to the executors by value. Exits 1 if the test accuracy is below --target-accuracy.
"""
import argparse
import importlib.util
import os
import pathlib
import sys

from pyspark import cloudpickle
from pyspark.sql import SparkSession


def _digits():
    """examples/pytorch/train_digits.py as a module, pickled by value (the executors need not
    have the examples on their path)."""
    path = pathlib.Path(__file__).resolve().parents[1] / "pytorch" / "train_digits.py"
    spec = importlib.util.spec_from_file_location("train_digits", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_digits"] = module
    spec.loader.exec_module(module)
    cloudpickle.register_pickle_by_value(module)
    return module


def _train(model, x, y, opt, epochs, batch_size, size, len_train):
    """The loop both paths share: shuffled batches of this rank's shard, cosine decay."""
    import torch
    import torch.nn.functional as F
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs)
    steps = len_train // size // batch_size
    for _ in range(epochs):
        order = torch.randperm(len(y))
        for step in range(steps):
            batch = order[step * batch_size:(step + 1) * batch_size]
            opt.zero_grad()
            F.cross_entropy(model(x[batch]), y[batch]).backward()
            opt.step()
        sched.step()


def horovod_style(Net, load_data, epochs, batch_size, lr, seed):
    """One rank of the run path."""
    import torch

    import ddp.torch as ddp
    ddp.init()
    torch.set_num_threads(1)
    torch.manual_seed(seed + ddp.rank())
    (x_train, y_train), (x_test, y_test) = load_data(seed)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=lr * ddp.size(), momentum=0.9)
    ddp.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = ddp.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    _train(model, x_train[ddp.rank()::ddp.size()], y_train[ddp.rank()::ddp.size()], opt, epochs,
           batch_size, ddp.size(), len(y_train))
    model.eval()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    backend = f"{ddp.size()} ranks on libddp"
    ddp.shutdown()
    return accuracy, backend


def torch_distributed(Net, load_data, epochs, batch_size, lr, seed):
    """One rank of the distributor path (under torchrun): no `import ddp`."""
    import torch
    import torch.distributed as dist
    dist.init_process_group("ddp")
    autoloaded = "_ddp_torch_backend" in sys.modules
    torch.set_num_threads(1)
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(seed + rank)
    (x_train, y_train), (x_test, y_test) = load_data(seed)
    model = torch.nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=lr * size, momentum=0.9)
    _train(model, x_train[rank::size], y_train[rank::size], opt, epochs, batch_size, size,
           len(y_train))
    model.eval()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    how = "registered by torch's entry point" if autoloaded else "registered by an import"
    backend = f"{size} ranks on backend {dist.get_backend()} ({how})"
    dist.destroy_process_group()
    return accuracy, backend


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", choices=("run", "distributor"), default="run")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--master", default=None, help="Spark's master (default: the session's)")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=16, help="per rank")
    ap.add_argument("--lr", type=float, default=0.01, help="scaled by the number of ranks")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--target-accuracy", type=float, default=0.0)
    args = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("ddp-digits").config("spark.ui.enabled", "false")
    spark = (builder.master(args.master) if args.master else builder).getOrCreate()
    digits = _digits()
    common = (digits.Net, digits.load_data, args.epochs, args.batch_size, args.lr, args.seed)
    try:
        if args.path == "run":
            import ddp.spark
            accuracy, backend = ddp.spark.run(horovod_style, args=common,
                                              num_proc=args.workers)[0]
        else:
            from pyspark.ml.torch.distributor import TorchDistributor
            distributor = TorchDistributor(num_processes=args.workers, local_mode=False,
                                           use_gpu=False)
            accuracy, backend = distributor.run(torch_distributed, *common)
    finally:
        spark.stop()
    print(f"spark {args.path}: {backend}: test accuracy {accuracy:.2%}", flush=True)
    return 0 if accuracy >= args.target_accuracy else 1


if __name__ == "__main__":
    sys.exit(main())
