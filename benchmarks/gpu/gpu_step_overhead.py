#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""gpu_step_overhead: what libddp's DistributedOptimizer costs a 1-rank training step on a GPU.

ResNet-50 (torchvision's architecture, defined here so that torchvision is not needed), fp32,
synthetic data, SGD with momentum: the same training step with the plain optimizer and with
ddp.torch.DistributedOptimizer (one rank: every gradient still goes through the hooks, the engine
and NCCL), in alternating blocks in one process, so that both see the same GPU clocks and
memory state. Prints images/s of each, their ratio (goal: >= 0.97) and the engine's
rounds and collectives per step.

    ddprun -np 1 python benchmarks/gpu/gpu_step_overhead.py [--batch-size 64] [--blocks 6]
    python benchmarks/gpu/gpu_step_overhead.py --device cpu --batch-size 2 --steps 2   # a dry run

--torch-ddp adds torch's DistributedDataParallel (NCCL on a GPU, Gloo on the CPU, a 1-rank
process group on 127.0.0.1) as a third variant in the same blocks: the peer's ratio on the same
machine and run (0.974x was measured on an H100 before). --host-times prints, per variant, the
host's milliseconds per step inside forward, backward and step: where the host takes longer than
the GPU's step, the GPU waits for it (the submission cost per gradient shows in backward; the
wait for the last reductions in step).
"""

import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.downsample = downsample

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet50(nn.Module):
    """torchvision.models.resnet50: 25.6M parameters in 161 tensors."""

    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, inplanes = [], 64
        for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            downsample = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride=stride,
                                                 bias=False), nn.BatchNorm2d(planes * 4))
            stage = [Bottleneck(inplanes, planes, stride, downsample)]
            inplanes = planes * 4
            stage += [Bottleneck(inplanes, planes) for _ in range(blocks - 1)]
            layers.append(nn.Sequential(*stage))
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, stride=2, padding=1)
        x = self.layers(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--blocks", type=int, default=6, help="blocks of each variant, alternating")
    p.add_argument("--steps", type=int, default=20, help="timed steps per block")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--torch-ddp", action="store_true",
                   help="also torch's DistributedDataParallel (1-rank process group)")
    p.add_argument("--host-times", action="store_true",
                   help="host ms per step in forward, backward and step, per variant")
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_step_overhead: no GPU visible to torch (--device cpu for a dry run)")
    import ddp.torch as ddp
    ddp.init()
    if ddp.size() != 1:
        sys.exit("gpu_step_overhead: run it as one rank (ddprun -np 1): it measures what the "
                 "optimizer costs, not communication")
    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    torch.manual_seed(0)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    target = torch.randint(0, 1000, (args.batch_size,), device=device)

    def variant(distributed):
        model = ResNet50().to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        if distributed:
            opt = ddp.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        return model, opt

    variants = {"plain": variant(False), "ddp": variant(True)}
    if args.torch_ddp:
        import torch.distributed as tdist
        with socket.socket() as s:  # a free port on loopback for the 1-rank group's store
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        tdist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)
        model = ResNet50().to(device)
        variants["torch_ddp"] = (
            torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[0] if device.type == "cuda" else None),
            torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
    host = {name: [0.0, 0.0, 0.0] for name in variants}  # forward, backward, step: seconds

    def run(name, steps, timed=True):
        model, opt = variants[name]
        if device.type == "cuda":
            torch.cuda.synchronize()
        spent = host[name]
        start = time.perf_counter()
        for _ in range(steps):
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = F.cross_entropy(model(data), target)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            opt.step()
            t3 = time.perf_counter()
            if timed:
                spent[0] += t1 - t0
                spent[1] += t2 - t1
                spent[2] += t3 - t2
        if device.type == "cuda":
            torch.cuda.synchronize()
        return args.batch_size * steps / (time.perf_counter() - start)

    for name in variants:
        run(name, args.warmup, timed=False)
    rates = {name: [] for name in variants}
    before = ddp.engine_stats()
    names = list(variants)
    for block in range(args.blocks):
        for name in (names if block % 2 == 0 else names[::-1]):
            rates[name].append(run(name, args.steps))
    after = ddp.engine_stats()
    steps = args.blocks * args.steps
    plain, dist = (statistics.median(rates[n]) for n in ("plain", "ddp"))
    print(f"device: {torch.cuda.get_device_name(0) if device.type == 'cuda' else 'cpu'}; "
          f"torch {torch.__version__}; batch {args.batch_size}, fp32")
    print(f"plain training: {plain:.1f} images/s (blocks: "
          f"{', '.join(f'{r:.1f}' for r in rates['plain'])})")
    print(f"ddp.DistributedOptimizer: {dist:.1f} images/s (blocks: "
          f"{', '.join(f'{r:.1f}' for r in rates['ddp'])})")
    if args.torch_ddp:
        print(f"torch DistributedDataParallel: {statistics.median(rates['torch_ddp']):.1f} "
              f"images/s (blocks: {', '.join(f'{r:.1f}' for r in rates['torch_ddp'])})")
    if args.host_times:
        for name, (fwd, bwd, stp) in host.items():
            ms = 1000 / (args.blocks * args.steps)
            whole = 1000 * args.batch_size / statistics.median(rates[name])
            print(f"host ms per step, {name}: forward {fwd * ms:.2f}, backward {bwd * ms:.2f}, "
                  f"step {stp * ms:.2f}; the whole step {whole:.2f}")
    per_step = {k: (after[k] - before[k]) / steps for k in ("cycles", "collectives", "tensors")}
    print(f"engine per step: {per_step['cycles']:.1f} rounds, {per_step['collectives']:.1f} "
          f"collectives, {per_step['tensors']:.1f} tensors")
    ratio = dist / plain
    peer = ""
    if args.torch_ddp:
        peer = f" torch_ddp_ratio={statistics.median(rates['torch_ddp']) / plain:.4f}"
    print(f"RESULT ratio={ratio:.4f} plain_images_per_sec={plain:.2f} "
          f"ddp_images_per_sec={dist:.2f}{peer} goal={'met' if ratio >= 0.97 else 'not-met'}")
    if args.torch_ddp:
        torch.distributed.destroy_process_group()
    ddp.shutdown()


if __name__ == "__main__":
    main()
