# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddp.tensorflow in real multi-rank jobs under ddprun (TensorFlow's environment: make test-tf).
The workers check every rank's results against numpy or closed forms and exit non-zero on the
first mismatch, naming it."""
import pathlib
import re

import pytest


# 1 rank alone and 3: the ops' binding does not change with the count (the engine's collectives
# on 2 ranks are the C++ conformance suite's; a run at 2 took half a minute of make test's).
@pytest.mark.parametrize("np", [1, 3])
def test_every_op_and_dtype_matches_numpy_eager_and_in_tf_function(run_job, np):
    result = run_job(np, "tf_ops.py")
    assert result.stdout.count(": ok") == np


# 3 ranks (2 are Horovod's own suite's, make horovod-suite-tf).
@pytest.mark.parametrize("np", [3])
def test_gradients_follow_horovods_rules(run_job, np):
    result = run_job(np, "tf_grads.py")
    assert result.stdout.count(": ok") == np


@pytest.mark.parametrize("np", [3])
def test_horovods_rank_ops_objects_inplace_broadcast_and_process_sets(run_job, np):
    result = run_job(np, "tf_extras.py")
    assert result.stdout.count(": ok") == np


def test_a_killed_rank_surfaces_as_a_tensorflow_error_with_libddps_message(run_job):
    result = run_job(3, "tf_killed.py", check=False)
    assert result.returncode != 0  # the launcher reports the killed rank
    assert "rank 2 was killed by signal SIGKILL" in result.stderr, result.stderr
    assert result.stdout.count(": ok (AbortedError") == 2, result.stdout + result.stderr


@pytest.mark.parametrize("np", [3])
def test_keras_training_is_identical_on_every_rank_and_equals_one_process(run_job, np):
    # fit with DistributedOptimizer and the callbacks, a DistributedGradientTape loop in a
    # tf.function, gradient accumulation, the warmup.
    result = run_job(np, "tf_keras.py")
    assert result.stdout.count(": ok") == np


@pytest.mark.parametrize("np", [3])
def test_the_engines_codecs_from_tensorflow_and_keras(run_job, np):
    # bf16, int8 and PowerSGD through the ops (eager, tf.function, grouped) and Keras'
    # DistributedOptimizer: identical on every rank, the bytes counted, integers refused.
    result = run_job(np, "tf_compression.py")
    assert result.stdout.count(": ok") == np


def test_mixed_float16_skips_an_overflow_on_one_rank_everywhere_and_trains_as_one_process(run_job):
    # DistributedOptimizer(LossScaleOptimizer(opt)) under fit and a custom step; the unsafe
    # setups refused with a message.
    result = run_job(3, "tf_mixed.py")
    assert result.stdout.count(": ok") == 3


def test_the_keras_demo_reaches_97_percent_on_4_ranks(run_job, tmp_path):
    demo = pathlib.Path(__file__).resolve().parents[2] / "examples" / "tensorflow" / \
        "train_digits_keras.py"
    result = run_job(4, str(demo), "--target-accuracy", "0.97", timeout=600)
    assert "test accuracy:" in result.stdout, result.stdout


@pytest.mark.parametrize("np", [3])
def test_local_state_sync_batch_norm_schedules_and_elastic_states_as_horovods(run_job, np):
    # SyncBatchNormalization against BatchNormalization over every rank's batch (value, moving
    # statistics, gradient), local sources and layers (tape, Keras optimizer, broadcast
    # callback), LearningRateScheduleCallback, broadcast_global_variables in a TF1 graph,
    # TensorFlowState and KerasState.
    result = run_job(np, "tf_local.py")
    assert result.stdout.count(": ok") == np


def test_an_elastic_keras_job_goes_on_without_a_failed_worker(run_job):
    job = run_job(3, "elastic_tf.py", "fail", "localhost:2",
                  launcher_args=("--min-np", "2", "--max-np", "3"))
    done = re.findall(r"^\[(localhost:\d)\] done rank (\d) size (\d) generation (\d) "
                      r"sizes ([\d,]+) epochs (\d) checksum (\w+)$", job.stdout, re.M)
    assert sorted(d[0] for d in done) == ["localhost:0", "localhost:1"], job.stdout + job.stderr
    for _, _, size, generation, sizes, epochs, _ in done:
        assert (size, generation, sizes, epochs) == ("2", "1", "3,2", "3"), job.stdout
    # Restored to the last commit, synchronised, trained alike: the same weights everywhere.
    assert len({d[6] for d in done}) == 1, job.stdout
    assert "generation 1: 2 workers (worker localhost:2" in job.stderr, job.stderr
