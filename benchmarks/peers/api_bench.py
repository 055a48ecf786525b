#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""api_bench: the same measurements through `import ddp.torch` or `import horovod.torch`.

One process per rank (started by ddprun, mpirun or horovodrun); only the import differs:

    ddprun -np 2 python benchmarks/peers/api_bench.py --api ddp
    mpirun -np 2 --bind-to none python benchmarks/peers/api_bench.py --api horovod

Measurements (--what, comma-separated; every one after warm-up steps, --steps repetitions):
  submit   200 x 40 KiB f32 gradients (--tensors, --kib), each allreduce_async_ by name, then
           synchronize all: per-tensor submission time (the loop of calls, divided by the
           tensors; wall time, and the calling thread's CPU time, which leaves out the waits for
           a core when ranks outnumber cores) and the step (first submission to last
           synchronize);
  resnet50 the same step with ResNet-50's 161 gradients (25.6M parameters, 102 MB);
  busbw    one allreduce of --busbw-mib MiB f32: busbw = bytes / time x 2(N-1)/N.
Steps are separated by a one-element allreduce (a barrier every API has). Rank 0 prints one
`RESULT key=value ...` line per measurement (medians over steps), which
benchmarks/peers/compare_horovod reads.
"""

import argparse
import statistics
import sys
import time

import torch


def resnet50_gradient_shapes():
    """The parameters of torchvision's resnet50 in registration order (161 tensors): conv1 and
    its batch norm, 16 bottleneck blocks ([3, 4, 6, 3], downsampling in each stage's first),
    and the classifier."""
    shapes = [(64, 3, 7, 7), (64,), (64,)]
    inplanes = 64
    for planes, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for block in range(blocks):
            shapes += [(planes, inplanes, 1, 1), (planes,), (planes,),
                       (planes, planes, 3, 3), (planes,), (planes,),
                       (planes * 4, planes, 1, 1), (planes * 4,), (planes * 4,)]
            if block == 0:
                shapes += [(planes * 4, inplanes, 1, 1), (planes * 4,), (planes * 4,)]
            inplanes = planes * 4
    shapes += [(1000, 2048), (1000,)]
    return shapes


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--api", choices=("ddp", "horovod"), required=True)
    p.add_argument("--what", default="submit,resnet50,busbw")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--tensors", type=int, default=200)
    p.add_argument("--kib", type=int, default=40)
    p.add_argument("--busbw-mib", type=int, default=64)
    args = p.parse_args()
    if args.api == "ddp":
        import ddp.torch as hvd
    else:
        import horovod.torch as hvd
    hvd.init()
    torch.set_num_threads(1)
    rank, size = hvd.rank(), hvd.size()
    barrier_tensor = torch.zeros(1)
    calls = [0]

    def barrier():
        calls[0] += 1
        hvd.allreduce_(barrier_tensor, name=f"barrier.{calls[0]}", op=hvd.Sum)

    def report(key, **values):
        if rank == 0:
            fields = " ".join(f"{k}={v:.6g}" for k, v in values.items())
            print(f"RESULT api={args.api} ranks={size} what={key} {fields}", flush=True)

    def fused_steps(key, shapes):
        tensors = [torch.ones(s) for s in shapes]
        names = [f"{key}.{i}" for i in range(len(tensors))]
        submit_us, submit_cpu_us, step_ms = [], [], []
        for step in range(args.warmup + args.steps):
            barrier()
            t0 = time.perf_counter()
            c0 = time.thread_time()
            handles = [hvd.allreduce_async_(t, name=n, op=hvd.Sum)
                       for t, n in zip(tensors, names)]
            c1 = time.thread_time()
            t1 = time.perf_counter()
            for h in handles:
                hvd.synchronize(h)
            t2 = time.perf_counter()
            if step >= args.warmup:
                submit_us.append((t1 - t0) / len(tensors) * 1e6)
                submit_cpu_us.append((c1 - c0) / len(tensors) * 1e6)
                step_ms.append((t2 - t0) * 1e3)
            # Each step sums ones in place (size), checked and set back to ones after the timing:
            # any number of steps, every one of them checked.
            for t in tensors[:3] + tensors[-3:]:
                if not torch.all(t == size):
                    sys.exit(f"api_bench: {key}: wrong sums in step {step}")
            for t in tensors:
                t.fill_(1.0)
        report(key, tensors=len(tensors), mbytes=sum(t.numel() for t in tensors) * 4 / 1e6,
               submit_us=statistics.median(submit_us),
               submit_cpu_us=statistics.median(submit_cpu_us), step_ms=statistics.median(step_ms),
               step_ms_min=min(step_ms))

    for what in args.what.split(","):
        if what == "submit":
            fused_steps("submit", [(args.kib * 256,)] * args.tensors)
        elif what == "resnet50":
            fused_steps("resnet50", resnet50_gradient_shapes())
        elif what == "busbw":
            x = torch.ones(args.busbw_mib << 18)
            times = []
            for step in range(max(3, args.warmup // 2) + args.steps // 2):
                barrier()
                t0 = time.perf_counter()
                hvd.allreduce_(x, name="busbw", op=hvd.Average)
                times.append(time.perf_counter() - t0)
            t = statistics.median(times[max(3, args.warmup // 2):])
            report("busbw", mib=args.busbw_mib, ms=t * 1e3,
                   busbw_gbs=x.numel() * 4 / t * 2 * (size - 1) / size / 1e9)
        else:
            sys.exit(f"api_bench: unknown measurement {what!r}")
    barrier()
    hvd.shutdown()


if __name__ == "__main__":
    main()
