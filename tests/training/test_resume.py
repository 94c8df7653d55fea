"""Interrupted runs: SIGINT and SIGTERM save a checkpoint and exit 130, SIGKILL loses nothing
finished, and the same command resumes to codes bit-identical to an uninterrupted run.

Every case is compared with one reference run of the same command (validation on, so the
model-selection state rides in the checkpoints too), and the reference's own directory shows
that a finished run is not retrained and that another configuration is refused. These runs
skip XLA: compiling costs each of the ten processes seconds, and resuming is the same either
way (the XLA path resumes exactly in tests/data/test_streaming.py and tests/test_pipeline.py).
"""

import signal
import time

import numpy as np
import pytest

from tests.helpers import run_codes, start_training

ARGS = ["dataset=synthetic", "model.bits=16", "trainer.steps=2000", "trainer.batch_size=100",
        "trainer.steps_per_call=50", "trainer.checkpoint_every=250", "validation.every=500",
        "trainer.jit_compile=false"]


def _start(run_dir, *extra):
    return start_training(run_dir, *ARGS, *extra)


SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}


def _interrupt(dirs, timeout=180):
    """Start a run in each of `dirs` and signal each the moment its own first checkpoint shows
    (so mid-training), all polled together: waiting for one after another let the last run
    finish under load before its turn came. Returns what each stopped run left."""
    processes = {name: _start(run_dir) for name, run_dir in dirs.items()}
    waiting, deadline = set(processes), time.monotonic() + timeout
    while waiting:
        for name in sorted(waiting):
            if (dirs[name] / "checkpoints" / "checkpoint").is_file():
                processes[name].send_signal(SIGNALS[name])
                waiting.remove(name)
            else:
                assert processes[name].poll() is None, processes[name].communicate()
        assert time.monotonic() < deadline, f"no checkpoint appeared in {sorted(waiting)}"
        time.sleep(0.02)
    stopped = {}
    for name, process in processes.items():
        _, err = process.communicate(timeout=120)
        run_dir = dirs[name]
        stopped[name] = {
            "returncode": process.returncode, "err": err,
            "temporaries": [path for path in run_dir.rglob("*") if ".tmp" in path.name],
            "checkpoints": {path.name for path in (run_dir / "checkpoints").glob("ckpt-*")},
            "finished": (run_dir / "codes.npz").exists() or (run_dir / "metrics.json").exists()}
    return stopped


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The reference run, and one run per signal: interrupted at its first checkpoint, then
    resumed by the same command. The processes of each phase run side by side (their start-ups,
    most of their time, overlap on the cores); the tests below read what happened.

    A starved test process can still see a checkpoint only after the run has trained all its
    steps; the signal then meets a finished run, which is no interruption. The run shows it
    (its final files exist), and that signal is tried again in a new directory."""
    reference_dir = tmp_path_factory.mktemp("reference")
    reference = _start(reference_dir)
    dirs, stopped, pending = {}, {}, list(SIGNALS)
    for _attempt in range(3):
        trying = {name: tmp_path_factory.mktemp(name) for name in pending}
        for name, result in _interrupt(trying).items():
            dirs[name], stopped[name] = trying[name], result
        pending = [name for name in pending if stopped[name]["finished"]]
        if not pending:
            break
    _, err = reference.communicate(timeout=300)
    assert reference.returncode == 0, err[-3000:]
    resumed = {name: _start(run_dir) for name, run_dir in dirs.items()}
    outputs = {}
    for name, process in resumed.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-3000:]
        outputs[name] = out
    return {"reference": (reference_dir, run_codes(reference_dir)), "dirs": dirs,
            "stopped": stopped, "resumed": outputs}


def _assert_same_codes(run_dir, reference):
    codes = run_codes(run_dir)
    for key in ("database", "query"):
        np.testing.assert_array_equal(codes[key], reference[1][key])


@pytest.mark.slow
@pytest.mark.parametrize("name", SIGNALS)
def test_an_interrupted_run_resumes_to_identical_codes(runs, name):
    stopped, run_dir = runs["stopped"][name], runs["dirs"][name]
    if name == "SIGKILL":
        assert stopped["returncode"] == -signal.SIGKILL
    else:  # a request to stop: the current call ends, a checkpoint is saved, exit 130
        err = stopped["err"]
        assert stopped["returncode"] == 130, err[-3000:]
        assert "Traceback" not in err
        assert (f"checkpoint saved. Run the same command with hydra.run.dir={run_dir} to "
                "resume" in err)
        interrupted_at = int(err.split("interrupted at step ")[1].split()[0])
        assert 0 < interrupted_at < 2000  # stopped mid-run, not at the end
        assert f"ckpt-{interrupted_at}.index" in stopped["checkpoints"]
    # Nothing partial that looked complete: no temporary files, no final artifacts then.
    assert not stopped["temporaries"] and not stopped["finished"]
    assert "[sgh] resuming from step" in runs["resumed"][name]
    _assert_same_codes(run_dir, runs["reference"])


@pytest.mark.slow
def test_a_finished_run_is_not_retrained_and_another_config_is_refused(runs):
    run_dir, codes = runs["reference"]
    assert len(np.unique(codes["database"], axis=0)) > 1  # distinct codes: not a collapsed run
    # One after the other: side by side, the second would (rightly) be refused as "in use"
    # by the run lock before it read the directory's configuration.
    again = _start(run_dir)
    before = {path: path.stat().st_mtime_ns for path in run_dir.rglob("*") if path.is_file()
              and path.name not in ("train.log", ".lock") and ".hydra" not in path.parts}
    out, err = again.communicate(timeout=300)  # the same command: nothing left to do
    assert again.returncode == 0, err[-3000:]
    assert "holds this run, finished" in out and "Recall10@100" in out
    # Finished work is not recorded again: every file of the run as it was.
    assert {path: path.stat().st_mtime_ns for path in before} == before
    other = _start(run_dir, "trainer.seed=5")
    _, err = other.communicate(timeout=120)
    assert other.returncode == 2 and "holds a run with another configuration" in err
    _assert_same_codes(run_dir, runs["reference"])
