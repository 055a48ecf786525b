#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""One torch.distributed measurement for benchmarks/training/compare_c10d, the same script for every
backend: `ddp` (libddp's torch.distributed backend), `gloo`, `mpi`, and two floors that exchange
no gradients: `none` (no process group, the plain model: every rank trains alone) and
`ddp-noexchange` (DistributedDataParallel on a Gloo group, with a comm hook that exchanges
nothing: DDP's own bucketing and copies, without communication).

  --mode train        DistributedDataParallel training step (the MLP or the CNN of
                      examples/pytorch/synthetic_benchmark.py), batch 32 per rank, SGD;
                      --backend none trains the plain model, nothing exchanged
  --mode paired       the training step of the plain model, of DDP with no exchange (on
                      Gloo), of DDP on `ddp` and on Gloo, and an allreduce of the buckets
                      DDP has ready last (on `ddp` and on Gloo), all in the same processes,
                      one step of each per round, the order turning every round (give
                      --backend ddp: the default group; Gloo's is a second group)
  --mode collectives  all_reduce, all_gather_into_tensor and reduce_scatter_tensor (1.13:
                      _all_gather_base, _reduce_scatter_base), f32, nccl-tests' busbw
  --mode fsdp         a FullyShardedDataParallel (--fsdp-api fsdp1) or fully_shard (fsdp2)
                      training step of the MLP, on CPU (torch 2)

With --np N it starts N ranks on 127.0.0.1 itself (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
init_method env://); --backend mpi is started by mpirun instead and takes its rank from MPI.
Rank 0 prints `RESULT key=value ...` lines (benchmarks/lib/runner.py reads them); where an operation
fails, its line has status=unsupported or failed and why=<torch's message, URL-quoted>.
"""
import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BATCH = 32
MiB = 1 << 20
# Bytes per timed group of a collective: a size gets as many calls as fit (2 to 20), so that a
# 64 MiB Gloo allreduce at 4 ranks (~0.3 s) does not take minutes.
GROUP_BYTES = 64 * MiB
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


def parse_size(text):
    units = {"K": 10, "M": 20, "G": 30}
    suffix = text[-1:].upper()
    return int(text[:-1]) << units[suffix] if suffix in units else int(text)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", type=int, default=0, help="start this many ranks on 127.0.0.1")
    ap.add_argument("--backend", choices=("ddp", "gloo", "mpi", "none", "ddp-noexchange"),
                    required=True)
    ap.add_argument("--mode", choices=("train", "paired", "collectives", "fsdp"),
                    default="train")
    ap.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    ap.add_argument("--fsdp-api", choices=("fsdp1", "fsdp2"), default="fsdp1")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch threads; 0: cores // ranks")
    ap.add_argument("--sizes", default="4K,16K,64K,256K,1M,4M,16M,64M",
                    help="collective sizes: the whole tensor (allgather's output, "
                    "reduce-scatter's input), as nccl-tests counts them")
    ap.add_argument("--repeats", type=int, default=3, help="timed groups per collective size")
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args(argv)
    args.sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    return args


# Launching -------------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_argv(argv):
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--np":
            skip = True
        elif not a.startswith("--np="):
            out.append(a)
    return out


def launch(args, argv):
    """Starts the ranks with torch's env:// variables. Rank 0's exit status is the launch's: once
    it has exited the others get 10 s, then are stopped (a rank that failed an operation its
    peers also failed may otherwise wait for them)."""
    port, store_port = free_port(), free_port()
    procs = []
    for rank in range(args.np):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.np), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(args.np), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   BENCH_STORE_PORT=str(store_port), GLOO_SOCKET_IFNAME="lo")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)]
                                      + child_argv(argv), env=env))
    deadline = None
    while any(p.poll() is None for p in procs):
        code0 = procs[0].poll()
        failed = [p for p in procs if p.poll() not in (None, 0)]
        if (code0 is not None or failed) and deadline is None:
            deadline = time.monotonic() + 10
        if deadline is not None and time.monotonic() > deadline:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.05)
    codes = [p.returncode for p in procs]
    return codes[0] if codes[0] != 0 else max((c for c in codes if c > 0), default=0)


# Ranks -----------------------------------------------------------------------------------------

class Rank:
    """This process's place in the job, and a store of the benchmark's own (beside the process
    group's), so that the floor, which has no process group, can start its ranks together and
    collect their step times the same way as the others."""

    def __init__(self, args):
        import torch.distributed as dist
        self.dist, self.backend = dist, args.backend
        timeout = datetime.timedelta(seconds=args.timeout)
        if args.backend == "mpi":
            dist.init_process_group("mpi", timeout=timeout)
            self.rank, self.size = dist.get_rank(), dist.get_world_size()
            self.store = None
            return
        self.rank = int(os.environ.get("RANK", "0"))
        self.size = int(os.environ.get("WORLD_SIZE", "1"))
        self.store = dist.TCPStore("127.0.0.1", int(os.environ["BENCH_STORE_PORT"]), self.size,
                                   self.rank == 0, timeout)
        if args.backend == "ddp":
            import ddp.torch  # noqa: F401 - registers the backend
        if args.backend != "none":
            group = "gloo" if args.backend == "ddp-noexchange" else args.backend
            dist.init_process_group(group, init_method="env://", timeout=timeout)

    def gather_floats(self, key, value):
        """Every rank's value, on every rank (the store: the floor has no process group)."""
        if self.store is None:  # mpi
            import torch
            out = [torch.zeros(1, dtype=torch.float64) for _ in range(self.size)]
            self.dist.all_gather(out, torch.tensor([value], dtype=torch.float64))
            return [t.item() for t in out]
        self.store.set(f"{key}/{self.rank}", repr(value))
        return [float(self.store.get(f"{key}/{r}")) for r in range(self.size)]

    def arrive(self, key):
        """Counts this rank in under `key`; returns how many have arrived."""
        return self.store.add(key, 1) if self.store is not None else self.size

    def count(self, key):
        return self.store.add(key, 0) if self.store is not None else self.size

    def barrier(self, key):
        if self.store is None:  # mpi
            self.dist.barrier()
            return
        self.arrive(key)
        while self.count(key) < self.size:
            time.sleep(0.001)

    def close(self):
        """Rank 0 hosts the store: it leaves last, once every other rank is done with it."""
        if self.store is not None:
            if self.rank != 0:
                self.arrive("leaving")
            else:
                deadline = time.monotonic() + 60
                while self.count("leaving") < self.size - 1 and time.monotonic() < deadline:
                    time.sleep(0.001)
        if self.backend != "none" and self.dist.is_initialized():
            self.dist.destroy_process_group()


def why(error):
    """An exception as one RESULT value (quoted: a value has no spaces)."""
    return urllib.parse.quote(" ".join(f"{type(error).__name__}: {error}".split())[:400])


def result(rank, **values):
    if rank.rank == 0:
        print("RESULT " + " ".join(f"{k}={v}" for k, v in values.items()), flush=True)


# Training --------------------------------------------------------------------------------------

def models():
    sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
    import synthetic_benchmark
    return synthetic_benchmark


def timed_steps(rank, step, args, key, keep_pace=False):
    """Median ms of `args.steps` steps after warm-up, the slowest rank's. With keep_pace (ranks
    that exchange nothing) a rank that is done keeps stepping, untimed, until all are, so that
    every timed step shares the machine with as many ranks as the others' did."""
    for _ in range(args.warmup):
        step()
    rank.barrier(f"{key}/start")
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    if keep_pace:
        rank.arrive(f"{key}/done")
        while rank.count(f"{key}/done") < rank.size:
            step()
    return max(rank.gather_floats(f"{key}/median", statistics.median(times)))


def no_exchange(state, bucket):
    """A DDP comm hook that exchanges nothing: the bucket's gradients stay this rank's own. Its
    state, {"first": ids of the first layer's parameters, "tail": {}}, gets in "tail" the bytes
    of each bucket that holds one of them: the gradients backward computes last, whose exchange
    nothing can overlap (the MLP's: the first layer's weight, 42 MB, and its bias, a bucket of
    its own)."""
    import torch
    buffer = bucket.buffer()
    if any(id(p) in state["first"] for p in bucket.parameters()):
        state["tail"][bucket.index()] = buffer.numel() * buffer.element_size()
    fut = torch.futures.Future()
    fut.set_result(buffer)
    return fut


def first_layer(model):
    """The parameters of the model's first module that has any (in forward order)."""
    for module in model.modules():
        own = list(module.parameters(recurse=False))
        if own:
            return own
    return []


def train(rank, args, torch):
    sb = models()
    torch.manual_seed(42)
    model = sb.MODELS[args.model]()
    tail = {"first": {id(p) for p in first_layer(model)}, "tail": {}}  # ddp-noexchange
    if args.backend != "none":
        # As compare_training: no buffer broadcast before every forward (libddp's optimizer
        # makes none either), DDP's default 25 MB buckets.
        model = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
        if args.backend == "ddp-noexchange":
            model.register_comm_hook(tail, no_exchange)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1000 + rank.rank)
    data = torch.randn(BATCH, *sb.IMAGE_SHAPE, generator=gen)
    target = torch.randint(0, sb.NUM_CLASSES, (BATCH,), generator=gen)

    def step():
        tail["tail"].clear()  # this step's buckets (the first step's layout is another)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(data), target).backward()
        opt.step()

    step_ms = timed_steps(rank, step, args, "train",
                          keep_pace=args.backend in ("none", "ddp-noexchange"))
    params = sum(p.numel() for p in model.parameters())
    # The bytes of the buckets ready last (DDP rebuilds its buckets after the first step: the
    # layout of the last step is the one timed).
    last = {"tail_bytes": sum(tail["tail"].values())} if tail["tail"] else {}
    result(rank, mode="train", backend=args.backend, model=args.model, ranks=rank.size,
           params=params, step_ms=f"{step_ms:.2f}", **last)


PAIRED = ("plain", "noexchange", "ddp", "gloo", "allreduce-ddp", "allreduce-gloo")


def paired(rank, args, torch):
    """Every variant of the training step in the same processes, a step of each per round (the
    order turning by one every round), each step started by all ranks together (the benchmark's
    store) and timed on every rank; per variant, the median over rounds of the slowest rank's
    time. Launch-to-launch drift of a shared machine (tens of ms) then falls on every variant
    alike, and the differences (what DDP and each backend add to the plain step) are taken round
    by round. The allreduce of the buckets ready last is timed here too, on both groups, at the
    size the no-exchange hook saw."""
    if args.backend != "ddp":
        raise SystemExit("c10d_bench: --mode paired needs --backend ddp")
    dist, sb = rank.dist, models()
    gloo = dist.new_group(backend="gloo")
    nets, tail = {}, {"first": set(), "tail": {}}
    for variant in PAIRED[:4]:
        torch.manual_seed(42)
        net = sb.MODELS[args.model]()
        if variant == "noexchange":
            tail["first"] = {id(p) for p in first_layer(net)}
        if variant != "plain":
            net = torch.nn.parallel.DistributedDataParallel(
                net, broadcast_buffers=False, process_group=None if variant == "ddp" else gloo)
            if variant == "noexchange":
                net.register_comm_hook(tail, no_exchange)
        nets[variant] = (net, torch.optim.SGD(net.parameters(), lr=0.01))
    gen = torch.Generator().manual_seed(1000 + rank.rank)
    data = torch.randn(BATCH, *sb.IMAGE_SHAPE, generator=gen)
    target = torch.randint(0, sb.NUM_CLASSES, (BATCH,), generator=gen)
    bucket = {}

    def train_step(variant):
        net, opt = nets[variant]
        if variant == "noexchange":
            tail["tail"].clear()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(data), target).backward()
        opt.step()

    def allreduce(group):
        dist.all_reduce(bucket["tensor"], group=group)

    steps = {v: (lambda v=v: train_step(v)) for v in PAIRED[:4]}
    steps["allreduce-ddp"] = lambda: allreduce(None)
    steps["allreduce-gloo"] = lambda: allreduce(gloo)
    times = {v: [] for v in PAIRED}
    for r in range(args.warmup + args.steps):
        if r == args.warmup:  # the buckets' layout is the rebuilt one by now
            size = sum(tail["tail"].values())
            bucket["tensor"] = torch.ones(max(1, size // 4))
        order = PAIRED[r % len(PAIRED):] + PAIRED[:r % len(PAIRED)]
        for variant in order:
            if variant.startswith("allreduce") and "tensor" not in bucket:
                continue
            rank.barrier(f"paired/{r}/{variant}")
            start = time.perf_counter()
            steps[variant]()
            if r >= args.warmup:
                times[variant].append((time.perf_counter() - start) * 1e3)
    slowest = {}
    for v, ts in times.items():  # per round, the slowest rank's time
        rank.store.set(f"paired/times/{v}/{rank.rank}", json.dumps(ts))
        every = [json.loads(rank.store.get(f"paired/times/{v}/{r}")) for r in range(rank.size)]
        slowest[v] = [max(column) for column in zip(*every)]
    med = {v: statistics.median(ts) for v, ts in slowest.items()}
    diff = lambda a, b: statistics.median(x - y for x, y in zip(slowest[a], slowest[b]))  # noqa: E731
    result(rank, mode="paired", backend="ddp", model=args.model, ranks=rank.size,
           rounds=args.steps, tail_bytes=bucket["tensor"].numel() * 4,
           **{f"{v.replace('-', '_')}_ms": f"{m:.2f}" for v, m in med.items()},
           own_ms=f"{diff('noexchange', 'plain'):.2f}", ddp_adds_ms=f"{diff('ddp', 'plain'):.2f}",
           gloo_adds_ms=f"{diff('gloo', 'plain'):.2f}")


def fsdp_model(args, torch, sb):
    model = sb.MODELS["mlp"]()
    layers = [m for m in model if isinstance(m, sb.Dense)]
    if args.fsdp_api == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
        return FSDP(model, device_id=torch.device("cpu"), use_orig_params=True,
                    auto_wrap_policy=ModuleWrapPolicy({sb.Dense}))
    from torch.distributed.fsdp import fully_shard
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
    return model


def fsdp(rank, args, torch):
    """An FSDP step of the MLP (a unit per layer and one at the root); a failure (a backend
    that lacks an operation FSDP needs) is a result, printed with torch's message."""
    sb = models()
    torch.manual_seed(42)
    try:
        model = fsdp_model(args, torch, sb)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        gen = torch.Generator().manual_seed(1000 + rank.rank)
        data = torch.randn(BATCH, *sb.IMAGE_SHAPE, generator=gen)
        target = torch.randint(0, sb.NUM_CLASSES, (BATCH,), generator=gen)

        def step():
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(data), target).backward()
            opt.step()
        step()
    except Exception as e:  # noqa: BLE001 - the failure is what this run measures
        result(rank, mode="fsdp", api=args.fsdp_api, backend=args.backend, ranks=rank.size,
               status="failed", why=why(e))
        sys.stdout.flush()
        os._exit(0)  # the group may be broken: no orderly shutdown
    step_ms = timed_steps(rank, step, args, "fsdp")
    result(rank, mode="fsdp", api=args.fsdp_api, backend=args.backend, ranks=rank.size,
           status="ok", step_ms=f"{step_ms:.2f}")


# Collectives -----------------------------------------------------------------------------------

def collective_call(dist, op, n, size, torch, rank):
    """(call, check) for one op at `size` bytes: call() runs it once, check() counts the
    elements that are wrong after a fresh call."""
    count = size // 4
    chunk = count // n
    if op == "all_reduce":
        start = torch.full((count,), float(rank + 1))
        t = start.clone()
        want = n * (n + 1) / 2

        def call():
            dist.all_reduce(t)

        def check():
            t.copy_(start)
            call()
            return int((t != want).sum())
        return call, check, lambda: t.copy_(start)
    if op == "all_gather":
        fn = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
        inp, out = torch.full((chunk,), float(rank + 1)), torch.zeros(chunk * n)
        want = torch.arange(1, n + 1, dtype=torch.float32).repeat_interleave(chunk)

        def call():
            fn(out, inp)

        def check():
            out.zero_()
            call()
            return int((out != want).sum())
        return call, check, lambda: None
    fn = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
    inp, out = torch.full((chunk * n,), float(rank + 1)), torch.zeros(chunk)
    want = n * (n + 1) / 2

    def call():
        fn(out, inp)

    def check():
        out.zero_()
        call()
        return int((out != want).sum())
    return call, check, lambda: None


def time_collective(rank, call, reset, iters, args, torch):
    """Microseconds per call: median over timed groups on this rank, the slowest rank's."""
    dist = rank.dist
    per_call = []
    for _ in range(args.repeats):
        reset()  # all_reduce works in place: restart from the inputs (untimed)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            call()
        per_call.append((time.perf_counter() - start) * 1e6 / iters)
    t = torch.tensor([statistics.median(per_call)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def collectives(rank, args, torch):
    dist, n = rank.dist, rank.size
    for op in COLLECTIVES:
        for size in args.sizes:
            call, check, reset = collective_call(dist, op, n, size, torch, rank.rank)
            try:
                wrong = check()
            except Exception as e:  # noqa: BLE001 - an operation the backend lacks: a result
                result(rank, mode="collectives", backend=args.backend, op=op, ranks=n,
                       bytes=size, status="unsupported", why=why(e))
                break
            iters = max(2, min(20, GROUP_BYTES // size))
            for _ in range(2):  # warm-up
                call()
            us = time_collective(rank, call, reset, iters, args, torch)
            wrong_t = torch.tensor([wrong], dtype=torch.float64)
            dist.all_reduce(wrong_t)
            algbw = size / us / 1e3  # GB/s
            factor = 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n
            result(rank, mode="collectives", backend=args.backend, op=op, ranks=n, bytes=size,
                   status="ok", time_us=f"{us:.1f}", algbw=f"{algbw:.3f}",
                   busbw=f"{algbw * factor:.3f}", wrong=int(wrong_t.item()))


def run_rank(args):
    import torch
    rank = Rank(args)
    threads = args.threads or max(1, (os.cpu_count() or 1) // rank.size)
    torch.set_num_threads(threads)
    if rank.rank == 0:
        print(f"# c10d_bench: torch {torch.__version__}, backend {args.backend}, {rank.size} "
              f"ranks, {threads} thread(s) per rank, mode {args.mode}", flush=True)
    if args.mode == "train":
        train(rank, args, torch)
    elif args.mode == "paired":
        paired(rank, args, torch)
    elif args.mode == "fsdp":
        fsdp(rank, args, torch)
    else:
        collectives(rank, args, torch)
    rank.close()
    return 0


def main(argv):
    args = parse_args(argv)
    if args.np > 0 and args.backend != "mpi":
        return launch(args, argv)
    return run_rank(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
