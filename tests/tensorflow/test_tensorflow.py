"""ddp.tensorflow in real multi-rank jobs under ddprun (TensorFlow's environment: make test-tf).
The workers check every rank's results against numpy or closed forms and exit non-zero on the
first mismatch, naming it."""
import pytest


@pytest.mark.parametrize("np", [1, 2, 3])
def test_every_op_and_dtype_matches_numpy_eager_and_in_tf_function(run_job, np):
    result = run_job(np, "tf_ops.py")
    assert result.stdout.count(": ok") == np


@pytest.mark.parametrize("np", [2, 3])
def test_gradients_follow_horovods_rules(run_job, np):
    result = run_job(np, "tf_grads.py")
    assert result.stdout.count(": ok") == np


def test_a_killed_rank_surfaces_as_a_tensorflow_error_with_libddps_message(run_job):
    result = run_job(3, "tf_killed.py", check=False)
    assert result.returncode != 0  # the launcher reports the killed rank
    assert "rank 2 was killed by signal SIGKILL" in result.stderr, result.stderr
    assert result.stdout.count(": ok (AbortedError") == 2, result.stdout + result.stderr
