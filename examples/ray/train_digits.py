#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""The digits CNN of examples/pytorch/train_digits.py on a Ray cluster, two ways:

    ray start --head ...; ray start --address ... (or any running cluster; RAY_ADDRESS)
    python examples/ray/train_digits.py --path executor --workers 4
    python examples/ray/train_digits.py --path trainer --workers 4

`executor`: ddp.ray.RayExecutor (Horovod's RayExecutor API) runs a Horovod-style training
function on 4 Ray actors: ddp.init(), DistributedOptimizer, broadcast from rank 0.
`trainer`: Ray Train's TorchTrainer with TorchConfig(backend="ddp") runs a plain
torch.distributed training function (DistributedDataParallel through ray.train.torch.
prepare_model) that never imports ddp: torch >= 2.5 loads the backend through its entry point
(on an older torch, `import ddp.torch` at the function's top).

The model and data come from examples/pytorch/train_digits.py, sent to the workers by value.
Exits 1 if the test accuracy is below --target-accuracy.
"""
import argparse
import importlib.util
import json
import pathlib
import sys
import tempfile

import ray
import ray.cloudpickle


def _digits():
    """examples/pytorch/train_digits.py as a module, pickled by value (Ray's workers need not
    have the examples on their path)."""
    path = pathlib.Path(__file__).resolve().parents[1] / "pytorch" / "train_digits.py"
    spec = importlib.util.spec_from_file_location("train_digits", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_digits"] = module
    spec.loader.exec_module(module)
    ray.cloudpickle.register_pickle_by_value(module)
    return module


def _train(model, x, y, opt, epochs, batch_size, steps):
    """The loop both paths share: shuffled batches of this rank's shard, cosine decay."""
    import torch
    import torch.nn.functional as F
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs)
    for _ in range(epochs):
        order = torch.randperm(len(y))
        for step in range(steps):
            batch = order[step * batch_size:(step + 1) * batch_size]
            opt.zero_grad()
            F.cross_entropy(model(x[batch]), y[batch]).backward()
            opt.step()
        sched.step()


def horovod_style(digits, epochs, batch_size, lr, seed):
    """One rank of the executor path: the training loop of examples/pytorch/train_digits.py."""
    import torch

    import ddp.torch as ddp
    ddp.init()
    torch.set_num_threads(1)
    torch.manual_seed(seed + ddp.rank())
    (x_train, y_train), (x_test, y_test) = digits.load_data(seed)
    x, y = x_train[ddp.rank()::ddp.size()], y_train[ddp.rank()::ddp.size()]
    model = digits.Net()
    opt = torch.optim.SGD(model.parameters(), lr=lr * ddp.size(), momentum=0.9)
    ddp.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = ddp.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    _train(model, x, y, opt, epochs, batch_size, len(y_train) // ddp.size() // batch_size)
    accuracy = digits.evaluate(model, x_test, y_test)
    backend = f"{ddp.size()} ranks on backend ddp, local size {ddp.local_size()}"
    ddp.shutdown()
    return accuracy, backend


def torch_distributed(config):
    """One rank of the trainer path: plain torch.distributed, no `import ddp`."""
    import ray.train
    import ray.train.torch
    import torch
    import torch.distributed as dist
    Net, load_data = config["model"], config["data"]
    # torch >= 2.5 registered `ddp` at `import torch` (the entry point's module is loaded).
    autoloaded = "_ddp_torch_backend" in sys.modules
    torch.set_num_threads(1)
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(config["seed"] + rank)
    (x_train, y_train), (x_test, y_test) = load_data(config["seed"])
    x, y = x_train[rank::size], y_train[rank::size]
    model = ray.train.torch.prepare_model(Net())
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"] * size, momentum=0.9)
    b = config["batch_size"]
    _train(model, x, y, opt, config["epochs"], b, len(y_train) // size // b)
    model.eval()
    with torch.no_grad():
        correct = (model(x_test).argmax(1) == y_test).float().mean().item()
    how = "registered by torch's entry point" if autoloaded else "registered by an import"
    metrics = {"accuracy": correct,
               "backend": f"{size} ranks on backend {dist.get_backend()} ({how})"}
    if rank != 0:
        ray.train.report(metrics)
        return
    with tempfile.TemporaryDirectory() as out:  # the result, as Ray Train keeps it
        pathlib.Path(out, "result.json").write_text(json.dumps(metrics))
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", choices=("executor", "trainer"), default="executor")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=16, help="per rank")
    ap.add_argument("--lr", type=float, default=0.01, help="scaled by the number of ranks")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--storage", default=None, help="Ray Train's storage_path (trainer)")
    ap.add_argument("--target-accuracy", type=float, default=0.0)
    args = ap.parse_args()

    ray.init(log_to_driver=False)
    digits = _digits()
    if args.path == "executor":
        from ddp.ray import RayExecutor
        executor = RayExecutor(RayExecutor.create_settings(timeout_s=600),
                               num_workers=args.workers)
        executor.start()
        try:
            results = executor.run(horovod_style, args=[digits, args.epochs, args.batch_size,
                                                        args.lr, args.seed])
        finally:
            executor.shutdown()
        accuracy, backend = results[0]
    else:
        from ray.train import RunConfig, ScalingConfig
        from ray.train.torch import TorchConfig, TorchTrainer
        trainer = TorchTrainer(
            torch_distributed,
            train_loop_config={"model": digits.Net, "data": digits.load_data,
                               "epochs": args.epochs, "lr": args.lr,
                               "batch_size": args.batch_size, "seed": args.seed},
            scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=False,
                                         resources_per_worker={"CPU": 1}),
            torch_config=TorchConfig(backend="ddp"),
            run_config=RunConfig(storage_path=args.storage, name="ddp-digits"))
        result = trainer.fit()
        with result.checkpoint.as_directory() as out:
            metrics = json.loads(pathlib.Path(out, "result.json").read_text())
        accuracy, backend = metrics["accuracy"], metrics["backend"]
    print(f"ray {args.path}: {backend}: test accuracy {accuracy:.2%}", flush=True)
    ray.shutdown()
    return 0 if accuracy >= args.target_accuracy else 1


if __name__ == "__main__":
    sys.exit(main())
