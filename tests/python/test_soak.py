"""The soak (tests/soak/soak.py) for 3 minutes: 4 ranks training on the engine over shared
memory, sampled from outside; resident memory, file descriptors, threads and /dev/shm must stay
flat after the warm-up. `make soak` runs it for 30 minutes and saves the figures."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_a_three_minute_soak_stays_flat():
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "soak" / "soak.py"),
                           "--minutes", "3", "--ranks", "4",
                           "--ddprun", str(pathlib.Path(sys.executable).parent / "ddprun"),
                           "--python", sys.executable],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Verdict: flat." in done.stdout, done.stdout
    # Every rank was sampled all along: four rows of figures.
    assert done.stdout.count(" MiB | ") == 4, done.stdout
