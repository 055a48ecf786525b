#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""Synthetic data-parallel training benchmark (Horovod's pytorch_synthetic_benchmark, CPU-sized).

Every rank trains the same model on its own fixed random batch with SGD; gradients are averaged
either by libddp's DistributedOptimizer (--backend ddp) or by torch's DistributedDataParallel on
Gloo (--backend torch-ddp), so the two can be compared step for step:

    ddprun -np 4 python examples/pytorch/synthetic_benchmark.py --model mlp
    ddprun -np 4 python examples/pytorch/synthetic_benchmark.py --model mlp --backend torch-ddp
    mpirun -np 4 python examples/pytorch/synthetic_benchmark.py --model mlp --backend horovod

--backend none exchanges nothing (every rank trains alone): the compute floor of N ranks sharing
the machine, which tells communication from contention.

torch-ddp reads MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE; any that is missing is derived from
ddprun's DDP_* variables (MASTER_PORT from DDP_TORCH_MASTER_PORT, else DDP_RENDEZVOUS_PORT + 1).
Rank 0 prints img/sec per iteration, the mean +- 1.96 std, and one `RESULT ...` line for scripts
(benchmarks/training/compare_training reads it).
"""

import argparse
import datetime
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

IMAGE_SHAPE = (3, 32, 32)
NUM_CLASSES = 10


class Dense(nn.Conv2d):
    """A fully-connected layer on (N, C) inputs, computed as a 1x1 convolution: Debian's torch
    runs nn.Linear on the reference BLAS (~1 GFLOPS per core) but convolutions on oneDNN (~4x
    faster), and an MLP whose step is all matmul would otherwise hide its communication. The
    parameters (and gradient bytes) are those of nn.Linear, the weight shaped (out, in, 1, 1)."""

    def __init__(self, in_features, out_features):
        super().__init__(in_features, out_features, kernel_size=1)

    def forward(self, x):
        return super().forward(x[:, :, None, None]).flatten(1)


def mlp():
    """~12.6M parameters (50 MB of f32 gradients) in 8 tensors: communication-heavy."""
    return nn.Sequential(nn.Flatten(), Dense(3 * 32 * 32, 2048), nn.ReLU(),
                         Dense(2048, 2048), nn.ReLU(), Dense(2048, 1024), nn.ReLU(),
                         Dense(1024, NUM_CLASSES))


def deep_mlp():
    """~2.9M parameters in 68 small tensors: many gradients, so fusion and negotiation matter."""
    layers = [nn.Flatten(), Dense(3 * 32 * 32, 256), nn.ReLU()]
    for _ in range(32):
        layers += [Dense(256, 256), nn.ReLU()]
    return nn.Sequential(*layers, Dense(256, NUM_CLASSES))


def cnn():
    """~0.4M parameters, ~0.1 GFLOP per image forward: compute-heavy, little to communicate."""
    def block(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
    return nn.Sequential(*block(3, 32), *block(32, 64), nn.MaxPool2d(2),
                         *block(64, 128), nn.MaxPool2d(2), *block(128, 256), nn.MaxPool2d(2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, NUM_CLASSES))


MODELS = {"mlp": mlp, "deep-mlp": deep_mlp, "cnn": cnn}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", choices=sorted(MODELS), default="mlp",
                   help="mlp: 12.6M parameters, communication-heavy; deep-mlp: 68 small "
                   "gradients; cnn: small conv net, compute-heavy")
    p.add_argument("--batch-size", type=int, default=32, help="images per rank per step")
    p.add_argument("--num-warmup-batches", type=int, default=5)
    p.add_argument("--num-batches-per-iter", type=int, default=5)
    p.add_argument("--num-iters", type=int, default=10)
    p.add_argument("--fp16-allreduce", action="store_true",
                   help="reduce gradients as float16 (ddp: Compression.fp16; torch-ddp: "
                   "fp16_compress_hook)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch.set_num_threads; 0: max(1, cores // ranks on this host)")
    p.add_argument("--backend", choices=("ddp", "torch-ddp", "horovod", "none"), default="ddp",
                   help="horovod: Horovod's DistributedOptimizer (a peer, for comparisons); "
                   "none: no gradient exchange, each rank alone (the compute floor)")
    p.add_argument("--baseline-samples-per-sec", type=float, default=0.0, metavar="X",
                   help="one rank's samples/s; prints the scaling efficiency against it")
    p.add_argument("--engine-stats", action="store_true",
                   help="ddp only: print the fusion engine's counters per step at the end")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto: this rank's GPU (its local rank) where torch sees one")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds torch-ddp waits at start and in a collective")
    args = p.parse_args()
    for name in ("batch_size", "num_batches_per_iter", "num_iters"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.num_warmup_batches < 0 or args.threads < 0:
        p.error("--num-warmup-batches and --threads must be >= 0")
    return args


def usable_cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def env_int(*names, default):
    for name in names:
        if os.environ.get(name, "").strip():
            return int(os.environ[name])
    return default


class LibddpBackend:
    """Gradients averaged by libddp's DistributedOptimizer (submitted from backward hooks)."""

    name = "ddp"

    def __init__(self, args):
        import ddp.torch as ddp
        self.ddp = ddp
        ddp.init()
        self.rank, self.size, self.local_size = ddp.rank(), ddp.size(), ddp.local_size()
        self.args = args

    def wrap(self, model, optimizer):
        ddp = self.ddp
        ddp.broadcast_parameters(model.state_dict(), root_rank=0)
        compression = ddp.Compression.fp16 if self.args.fp16_allreduce else ddp.Compression.none
        optimizer = ddp.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             compression=compression)
        ddp.broadcast_optimizer_state(optimizer, root_rank=0)
        return model, optimizer

    def stats(self):
        return self.ddp.engine_stats()

    def shutdown(self):
        self.ddp.shutdown()


class HorovodBackend:
    """The same with Horovod's DistributedOptimizer (`import horovod.torch`), for side-by-side
    runs: under mpirun its MPI operations, under `horovodrun --gloo` its Gloo ones
    (benchmarks/peers/build_horovod builds it, benchmarks/peers/compare_horovod runs it)."""

    name = "horovod"

    def __init__(self, args):
        import horovod.torch as hvd
        self.hvd = hvd
        hvd.init()
        self.rank, self.size, self.local_size = hvd.rank(), hvd.size(), hvd.local_size()
        self.args = args

    def wrap(self, model, optimizer):
        hvd = self.hvd
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        compression = hvd.Compression.fp16 if self.args.fp16_allreduce else hvd.Compression.none
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             compression=compression)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        return model, optimizer

    def stats(self):
        return None

    def shutdown(self):
        self.hvd.shutdown()


class TorchDdpBackend:
    """Gradients averaged by torch.nn.parallel.DistributedDataParallel on Gloo."""

    name = "torch-ddp"

    def __init__(self, args):
        import torch.distributed as dist
        self.dist = dist
        env = os.environ
        env.setdefault("RANK", env.get("DDP_RANK", "0"))
        env.setdefault("WORLD_SIZE", env.get("DDP_SIZE", "1"))
        env.setdefault("MASTER_ADDR", env.get("DDP_RENDEZVOUS_ADDR", "127.0.0.1"))
        if "MASTER_PORT" not in env:
            if "DDP_TORCH_MASTER_PORT" in env:
                env["MASTER_PORT"] = env["DDP_TORCH_MASTER_PORT"]
            elif "DDP_RENDEZVOUS_PORT" in env:
                env["MASTER_PORT"] = str(int(env["DDP_RENDEZVOUS_PORT"]) + 1)
            else:
                env["MASTER_PORT"] = "29500"
        if env["MASTER_ADDR"] in ("127.0.0.1", "localhost"):
            env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", init_method="env://",
                                timeout=datetime.timedelta(seconds=args.timeout))
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.local_size = env_int("LOCAL_WORLD_SIZE", "DDP_LOCAL_SIZE",
                                  "OMPI_COMM_WORLD_LOCAL_SIZE", default=self.size)
        self.args = args

    def wrap(self, model, optimizer):
        # DistributedDataParallel broadcasts rank 0's parameters and buffers when it is built.
        # broadcast_buffers=False: like ddp (and Horovod), no buffer broadcast before every
        # forward, so both backends exchange the same bytes per step.
        model = nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
        if self.args.fp16_allreduce:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return model, optimizer

    def stats(self):
        return None

    def shutdown(self):
        self.dist.destroy_process_group()


class NoCommunicationBackend:
    """Every rank trains alone (no gradient exchange): the compute floor of the same number of
    processes sharing this machine, to tell communication from contention."""

    name = "none"

    def __init__(self, args):
        del args
        self.rank = env_int("DDP_RANK", "RANK", default=0)
        self.size = env_int("DDP_SIZE", "WORLD_SIZE", default=1)
        self.local_size = env_int("DDP_LOCAL_SIZE", "LOCAL_WORLD_SIZE", default=self.size)

    def wrap(self, model, optimizer):
        return model, optimizer

    def stats(self):
        return None

    def shutdown(self):
        pass


BACKENDS = {"ddp": LibddpBackend, "torch-ddp": TorchDdpBackend, "horovod": HorovodBackend,
            "none": NoCommunicationBackend}


def main():
    args = parse_args()
    backend = BACKENDS[args.backend](args)
    threads = args.threads or max(1, usable_cores() // max(1, backend.local_size))
    torch.set_num_threads(threads)
    rank, size = backend.rank, backend.size

    def log(text):
        if rank == 0:
            print(text, flush=True)

    if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()):
        local_rank = env_int("DDP_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                             default=0)
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")

    torch.manual_seed(42)  # the same initial model everywhere (it is broadcast from rank 0, too)
    model = MODELS[args.model]().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer = backend.wrap(model, optimizer)

    # Fixed random data, different on every rank, as Horovod's synthetic benchmark.
    gen = torch.Generator().manual_seed(1000 + rank)
    data = torch.randn(args.batch_size, *IMAGE_SHAPE, generator=gen).to(device)
    target = torch.randint(0, NUM_CLASSES, (args.batch_size,), generator=gen).to(device)

    def benchmark_step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()

    params = sum(p.numel() for p in model.parameters())
    log(f"Model: {args.model} ({params / 1e6:.2f}M parameters, "
        f"{sum(1 for _ in model.parameters())} tensors)")
    log(f"Batch size: {args.batch_size}")
    log(f"Number of ranks: {size}")
    log(f"Backend: {backend.name}{' (fp16 allreduce)' if args.fp16_allreduce else ''}, "
        f"torch {torch.__version__}, {threads} thread(s) per rank, on {device}")

    log("Running warmup...")
    for _ in range(args.num_warmup_batches):
        benchmark_step()
    stats_before = backend.stats()

    log("Running benchmark...")
    img_secs, step_secs = [], []
    cpu_start = time.process_time()  # this process's CPU time, every thread (the engine's too)
    for i in range(args.num_iters):
        start = time.perf_counter()
        for _ in range(args.num_batches_per_iter):
            benchmark_step()
        elapsed = time.perf_counter() - start
        img_sec = args.batch_size * args.num_batches_per_iter / elapsed
        log(f"Iter #{i}: {img_sec:.1f} img/sec per rank")
        img_secs.append(img_sec)
        step_secs.append(elapsed / args.num_batches_per_iter)

    cpu_ms = (time.process_time() - cpu_start) * 1e3 / (args.num_iters *
                                                       args.num_batches_per_iter)
    mean = statistics.mean(img_secs)
    conf = 1.96 * (statistics.stdev(img_secs) if len(img_secs) > 1 else 0.0)
    step_ms = statistics.median(step_secs) * 1e3
    per_rank = args.batch_size / (step_ms / 1e3)
    log(f"Img/sec per rank: {mean:.1f} +-{conf:.1f}")
    log(f"Total img/sec on {size} rank(s): {size * mean:.1f} +-{size * conf:.1f}")
    if args.baseline_samples_per_sec > 0:
        log(f"Scaling efficiency vs {args.baseline_samples_per_sec:.1f} samples/s on one rank: "
            f"{100 * per_rank / args.baseline_samples_per_sec:.1f}%")
    stats_after = backend.stats()
    if args.engine_stats and stats_after is not None:
        steps = args.num_iters * args.num_batches_per_iter
        per_step = {k: (stats_after[k] - stats_before[k]) / steps
                    for k in ("cycles", "collectives", "tensors", "fused_tensors", "cache_hits",
                              "cache_misses", "bytes")}
        log("STATS per step: " + " ".join(f"{k}={v:.1f}" for k, v in per_step.items()) +
            f" fusion_threshold={stats_after['fusion_threshold']}"
            f" cycle_time_ms={stats_after['cycle_time_ms']}")
    log(f"RESULT backend={backend.name} model={args.model} ranks={size} batch={args.batch_size} "
        f"threads={threads} fp16={int(args.fp16_allreduce)} step_ms={step_ms:.2f} "
        f"cpu_ms={cpu_ms:.2f} "
        f"samples_per_sec_per_rank={per_rank:.1f} total_samples_per_sec={size * per_rank:.1f}")
    backend.shutdown()


if __name__ == "__main__":
    main()
