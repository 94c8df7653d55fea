"""Interrupted runs: SIGINT saves and exits cleanly, SIGKILL loses nothing finished, and the same
command resumes to codes bit-identical to an uninterrupted run."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

ARGS = ["dataset=synthetic", "trainer.steps=4000", "trainer.batch_size=100",
        "trainer.steps_per_call=50", "trainer.checkpoint_every=500", "model.bits=16"]


def _start(run_dir, *extra):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "sgh.train", *ARGS, *extra,
                             f"hydra.run.dir={run_dir}"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_checkpoint(run_dir, process, timeout=120):
    deadline = time.monotonic() + timeout
    while not (run_dir / "checkpoints" / "checkpoint").is_file():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.05)


def _finish(run_dir, *extra):
    process = _start(run_dir, *extra)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    return out


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("whole")
    _finish(run_dir)
    with np.load(run_dir / "codes.npz") as codes:
        return {key: codes[key] for key in codes.files}


def _assert_same_codes(run_dir, uninterrupted):
    with np.load(run_dir / "codes.npz") as codes:
        for key in ("database", "query"):
            np.testing.assert_array_equal(codes[key], uninterrupted[key])


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT])
def test_interrupted_run_resumes_to_identical_codes(tmp_path, uninterrupted, how):
    process = _start(tmp_path)
    _wait_for_checkpoint(tmp_path, process)
    process.send_signal(how)
    _, err = process.communicate(timeout=120)
    if how == signal.SIGINT:
        assert process.returncode == 130, err
        assert "checkpoint saved. Run the same command with hydra.run.dir=" in err
        assert "Traceback" not in err
    else:
        assert process.returncode == -signal.SIGKILL
    assert not (tmp_path / "codes.npz").exists()  # nothing partial that looks complete
    assert not list(tmp_path.glob(".*.tmp*"))

    out = _finish(tmp_path)
    assert "[sgh] resuming from step" in out
    _assert_same_codes(tmp_path, uninterrupted)


def test_a_finished_run_is_not_retrained_and_another_config_is_refused(tmp_path,
                                                                      uninterrupted):
    _finish(tmp_path)
    out = _finish(tmp_path)  # the same command again: nothing left to train
    assert "resuming from step 4000" in out
    _assert_same_codes(tmp_path, uninterrupted)
    process = _start(tmp_path, "trainer.seed=5")
    _, err = process.communicate(timeout=120)
    assert process.returncode == 2 and "holds a run with another configuration" in err
