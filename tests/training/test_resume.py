"""Interrupted runs: SIGINT and SIGTERM save a checkpoint and exit 130, SIGKILL loses nothing
finished, and the same command resumes to codes bit-identical to an uninterrupted run.

Every case is compared with one reference run of the same command (validation on, so the
model-selection state rides in the checkpoints too), and the reference's own directory shows
that a finished run is not retrained and that another configuration is refused.
"""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

ARGS = ["dataset=synthetic", "model.bits=16", "trainer.steps=2000", "trainer.batch_size=100",
        "trainer.steps_per_call=50", "trainer.checkpoint_every=250", "validation.every=500"]


def _start(run_dir, *extra):
    return subprocess.Popen([sys.executable, "-m", "sgh.cli.train", *ARGS, *extra,
                             f"hydra.run.dir={run_dir}"],
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(run_dir, *extra):
    process = _start(run_dir, *extra)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]
    return out


def _codes(run_dir):
    with np.load(run_dir / "codes.npz", allow_pickle=False) as codes:
        return {key: codes[key] for key in ("database", "query")}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("reference")
    _finish(run_dir)
    return run_dir, _codes(run_dir)


def _assert_same_codes(run_dir, reference):
    codes = _codes(run_dir)
    for key in ("database", "query"):
        np.testing.assert_array_equal(codes[key], reference[1][key])


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM],
                         ids=["SIGKILL", "SIGINT", "SIGTERM"])
def test_an_interrupted_run_resumes_to_identical_codes(tmp_path, reference, how):
    process = _start(tmp_path)
    deadline = time.monotonic() + 180
    while not (tmp_path / "checkpoints" / "checkpoint").is_file():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.05)
    process.send_signal(how)
    _, err = process.communicate(timeout=120)

    if how == signal.SIGKILL:
        assert process.returncode == -signal.SIGKILL
    else:  # a request to stop: the current call ends, a checkpoint is saved, exit 130
        assert process.returncode == 130, err[-3000:]
        assert "Traceback" not in err
        assert (f"checkpoint saved. Run the same command with hydra.run.dir={tmp_path} to "
                "resume" in err)
        interrupted_at = int(err.split("interrupted at step ")[1].split()[0])
        assert 0 < interrupted_at < 2000  # stopped mid-run, not at the end
        assert list((tmp_path / "checkpoints").glob(f"ckpt-{interrupted_at}.index"))
    # Nothing partial that looks complete: no temporary files, no final artifacts yet.
    assert not [path for path in tmp_path.rglob("*") if ".tmp" in path.name]
    assert not (tmp_path / "codes.npz").exists() and not (tmp_path / "metrics.json").exists()

    out = _finish(tmp_path)
    assert "[sgh] resuming from step" in out
    _assert_same_codes(tmp_path, reference)


def test_a_finished_run_is_not_retrained_and_another_config_is_refused(reference):
    run_dir, codes = reference
    assert len(np.unique(codes["database"], axis=0)) > 1  # distinct codes: not a collapsed run
    out = _finish(run_dir)  # the same command again: nothing left to train
    assert "resuming from step 2000" in out
    _assert_same_codes(run_dir, reference)
    process = _start(run_dir, "trainer.seed=5")
    _, err = process.communicate(timeout=120)
    assert process.returncode == 2 and "holds a run with another configuration" in err
