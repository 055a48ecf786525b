#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""One Keras training benchmark run (benchmarks/training/compare_tensorflow): the training step of
an MLP or a small CNN (forward, loss, GradientTape, optimizer.apply_gradients in a tf.function) on a
fixed random batch of 32 per rank, timed per step after warm-up; rank 0 prints
`RESULT backend=... model=... ranks=N step_ms=...` (the median step).

  --backend ddp    under ddprun: ddp.tensorflow.keras.DistributedOptimizer (gradients through
                   libddp's engine);
  --backend mwms   tf.distribute.MultiWorkerMirroredStrategy with its CPU ring collectives, one
                   process per rank from TF_CONFIG: start them with --launch-mwms N;
  --backend none   every rank trains alone (no exchange): the compute floor of N processes.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

BATCH = 32


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("ddp", "mwms", "none"), required=True)
    ap.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    ap.add_argument("--steps", type=int, default=30, help="timed steps")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--num-groups", type=int, default=0,
                    help="ddp: DistributedOptimizer's num_groups (0: an allreduce per gradient)")
    ap.add_argument("--launch-mwms", type=int, default=0, metavar="N",
                    help="start N local MWMS workers (TF_CONFIG) running this script")
    return ap.parse_args()


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def launch_mwms(n):
    """N workers of one MWMS cluster on this machine; rank 0's output is ours."""
    argv = [a for i, a in enumerate(sys.argv) if a != "--launch-mwms" and
            (i == 0 or sys.argv[i - 1] != "--launch-mwms")]
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(n)]}
    procs = []
    for i in range(n):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster,
                                                     "task": {"type": "worker", "index": i}}),
                   BENCH_RANK=str(i), BENCH_SIZE=str(n))
        procs.append(subprocess.Popen([sys.executable] + argv, env=env,
                                      stdout=None if i == 0 else subprocess.DEVNULL))
    codes = [p.wait() for p in procs]
    return max(codes)


def make_model(keras, name):
    if name == "mlp":  # ~12.6M parameters, as examples/pytorch/synthetic_benchmark.py's MLP
        return keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Flatten(),
                                 keras.layers.Dense(2048, activation="relu"),
                                 keras.layers.Dense(2048, activation="relu"),
                                 keras.layers.Dense(1024, activation="relu"),
                                 keras.layers.Dense(10)])
    return keras.Sequential([keras.Input((32, 32, 3)),
                             keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
                             keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
                             keras.layers.MaxPooling2D(2),
                             keras.layers.Conv2D(128, 3, padding="same", activation="relu"),
                             keras.layers.MaxPooling2D(2),
                             keras.layers.Flatten(),
                             keras.layers.Dense(256, activation="relu"),
                             keras.layers.Dense(10)])


def main():
    args = parse_args()
    if args.launch_mwms:
        return launch_mwms(args.launch_mwms)
    import numpy as np
    import tensorflow as tf
    import keras

    if args.backend == "ddp":
        import ddp.tensorflow.keras as hvd
        hvd.init()
        rank, size, local = hvd.rank(), hvd.size(), hvd.local_size()
    else:
        rank = int(os.environ.get("BENCH_RANK", os.environ.get("DDP_RANK", "0")))
        size = int(os.environ.get("BENCH_SIZE", os.environ.get("DDP_SIZE", "1")))
        local = size
    threads = max(1, (os.cpu_count() or 1) // local)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    if args.backend == "mwms":  # before any other TensorFlow op: it configures the collectives
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING)
        strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    keras.utils.set_random_seed(42)

    steps = args.warmup + args.steps
    rng = np.random.default_rng(1000 + rank)
    x = tf.constant(rng.standard_normal((BATCH, 32, 32, 3)).astype(np.float32))
    y = tf.constant(rng.integers(0, 10, BATCH))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    # The same Keras step for every backend: forward, loss, tape, optimizer.apply_gradients, in
    # a tf.function. (Keras 3's model.fit does not run under MultiWorkerMirroredStrategy with
    # TensorFlow 2.21: its data adapter fails on the strategy's PerReplica batches.)
    if args.backend == "mwms":
        with strategy.scope():
            model = make_model(keras, args.model)
            optimizer = keras.optimizers.SGD(0.01)
            optimizer.build(model.trainable_variables)
        replicas = strategy.num_replicas_in_sync

        @tf.function
        def step(xb, yb):
            def replica(xr, yr):
                with tf.GradientTape() as tape:
                    # The strategy sums the replicas' gradients: scale for their average.
                    loss = loss_fn(yr, model(xr, training=True)) / replicas
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss
            return strategy.run(replica, args=(xb, yb))
    else:
        model = make_model(keras, args.model)
        optimizer = keras.optimizers.SGD(0.01)
        if args.backend == "ddp":
            optimizer = hvd.DistributedOptimizer(optimizer, num_groups=args.num_groups)
            hvd.broadcast_variables(model.variables, root_rank=0)

        @tf.function
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = loss_fn(yb, model(xb, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step(x, y)
        times.append(time.perf_counter() - start)
    timed = times[args.warmup:]
    if rank == 0:
        print(f"RESULT backend={args.backend} model={args.model} ranks={size} batch={BATCH} "
              f"threads={threads} step_ms={1e3 * statistics.median(timed):.2f}", flush=True)
    if args.backend == "ddp":
        hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
