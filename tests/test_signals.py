"""SIGTERM on a training subprocess (a scheduler's or `kill`'s stop; SIGINT and SIGKILL are in
test_resume.py), and determinism: the same command twice gives identical codes."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

ARGS = ["dataset=synthetic", "model.bits=16", "trainer.steps=3000", "trainer.batch_size=100",
        "trainer.steps_per_call=50", "trainer.checkpoint_every=250", "validation.every=500"]


def _start(run_dir):
    return subprocess.Popen([sys.executable, "-m", "sgh.train", *ARGS, f"hydra.run.dir={run_dir}"],
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(run_dir):
    process = _start(run_dir)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]
    return out


def _codes(run_dir):
    with np.load(run_dir / "codes.npz", allow_pickle=False) as codes:
        return {key: codes[key] for key in ("database", "query")}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("uninterrupted")
    _finish(run_dir)
    return _codes(run_dir)


def test_sigterm_saves_a_checkpoint_exits_130_and_the_same_command_resumes(tmp_path,
                                                                           uninterrupted):
    process = _start(tmp_path)
    deadline = time.monotonic() + 180
    while not (tmp_path / "checkpoints" / "checkpoint").is_file():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)

    assert process.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    assert (f"checkpoint saved. Run the same command with hydra.run.dir={tmp_path} to resume"
            in err)
    interrupted_at = int(err.split("interrupted at step ")[1].split()[0])
    assert 0 < interrupted_at < 3000  # stopped mid-run, not at the end
    assert list((tmp_path / "checkpoints").glob(f"ckpt-{interrupted_at}.index"))
    # Nothing partial that looks complete: no temporary files, no final artifacts yet.
    assert not [path for path in tmp_path.rglob("*") if ".tmp" in path.name]
    assert not (tmp_path / "codes.npz").exists() and not (tmp_path / "metrics.json").exists()

    out = _finish(tmp_path)
    assert f"[sgh] resuming from step {interrupted_at}" in out
    resumed = _codes(tmp_path)
    for key in ("database", "query"):
        np.testing.assert_array_equal(resumed[key], uninterrupted[key])


def test_same_seed_and_config_give_identical_codes(tmp_path, uninterrupted):
    _finish(tmp_path)
    again = _codes(tmp_path)
    for key in ("database", "query"):
        np.testing.assert_array_equal(again[key], uninterrupted[key])
    assert len(np.unique(again["database"], axis=0)) > 1  # distinct codes: not a collapsed run
