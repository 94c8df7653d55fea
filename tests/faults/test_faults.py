"""Faults injected into real `sgh-train` processes; nothing finished may be lost.

    two writers      two runs started together in one hydra.run.dir: one trains, one is refused
    damaged files    the latest checkpoint truncated, overwritten with garbage, or without its
                     index: the resume falls back to the one before it
    kill -9          at seeded random moments of a run, each followed by a resume; and once
                     amid an atomic write (the encoder's export)
    changed data     the dataset file rewritten between an interrupt and the resume
    read-only        sgh-export into a run directory it may not write (not as root)

After every fault, each artifact present must be complete (codes, metrics, config, inputs and
asymmetric files load; the encoder is whole; every listed checkpoint reads back), and once the
run has been resumed no temporary file may remain and its codes must equal, bit for bit, those
of one uninterrupted run of the same command. Slow: about three minutes on two cores, most of it
the start-up of the processes (Python, TensorFlow, Hydra). XLA is off, as in
tests/training/test_resume.py: compiling would cost every process seconds and resumes the same.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from omegaconf import OmegaConf

from sgh.artifacts.checkpoint_integrity import checkpoint_damage
from sgh.artifacts.codes_file import load_codes
from sgh.data.synthetic import gaussian_clusters
from tests.helpers import run_codes, start_training

pytestmark = pytest.mark.slow

ARGS = ["dataset=synthetic", "model.bits=16", "trainer.steps=1200", "trainer.batch_size=100",
        "trainer.steps_per_call=25", "trainer.checkpoint_every=100", "validation.every=200",
        "trainer.jit_compile=false"]
LAST, BEFORE_LAST = 1200, 1100  # the two checkpoints a finished run keeps
FINAL_FILES = ("codes.npz", "metrics.json", "asymmetric.npz", "encoder")
# sgh.artifacts.atomic's temporaries (`.<name>.*.tmp*`) and TensorFlow's (`ckpt-N_temp/`,
# `checkpoint.tmp<hex>`).
TEMPORARY = re.compile(r"^\..+\.tmp|_temp$|\.tmp[0-9a-f]+$")


def _start(run_dir, *extra, args=ARGS):
    return start_training(run_dir, *args, *extra)


def _finished(process, timeout=300):
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def _assert_same_codes(run_dir, reference):
    codes = run_codes(run_dir)
    for key, expected in reference.items():
        np.testing.assert_array_equal(codes[key], expected)


def _temporaries(run_dir):
    return sorted(str(path.relative_to(run_dir)) for path in run_dir.rglob("*")
                  if TEMPORARY.search(path.name))


def _partial_artifacts(run_dir):
    """What in `run_dir` is present but not whole: each artifact is read back."""
    problems = []
    readers = {"codes.npz": load_codes, "metrics.json": lambda path: json.loads(path.read_text()),
               "inputs.json": lambda path: json.loads(path.read_text())["files"],
               "config.yaml": lambda path: OmegaConf.load(path).model.bits,
               "asymmetric.npz": lambda path: dict(np.load(path, allow_pickle=False))}
    for name, read in readers.items():
        if (run_dir / name).exists():
            try:
                read(run_dir / name)
            except Exception as error:  # noqa: BLE001  (any failure to read it is the finding)
                problems.append(f"{name}: {error}")
    encoder = run_dir / "encoder"
    if encoder.exists() and not ((encoder / "saved_model.pb").is_file() and checkpoint_damage(
            encoder / "variables" / "variables") is None):
        problems.append("encoder/ is not a whole SavedModel")
    for directory in (run_dir / "checkpoints", run_dir / "checkpoints" / "best"):
        state = directory / "checkpoint"
        if state.is_file():
            for prefix in re.findall(r'all_model_checkpoint_paths: "([^"]+)"', state.read_text()):
                problem = checkpoint_damage(directory / prefix)
                if problem:
                    problems.append(f"{directory / prefix}: {problem}")
    return problems


def _lock_holder(run_dir):
    try:
        return json.loads((run_dir / ".lock").read_text() or "null")
    except (FileNotFoundError, ValueError):
        return None


def _latest_step(run_dir):
    state = run_dir / "checkpoints" / "checkpoint"
    try:
        return int(re.search(r'model_checkpoint_path: "ckpt-(\d+)"', state.read_text())[1])
    except (FileNotFoundError, TypeError):
        return None


# The moments a run passes, in order, as seen from outside: it holds the lock, has saved a
# checkpoint of at least a step, has written metrics.json (last).
MOMENTS = ("lock", 100, 600, LAST, "metrics")


def _passed(run_dir, process, moment):
    if moment == "lock":
        return (_lock_holder(run_dir) or {}).get("pid") == process.pid
    if moment == "metrics":
        return (run_dir / "metrics.json").exists()
    return (_latest_step(run_dir) or 0) >= moment


def _wait_for(run_dir, process, moment, timeout=180):
    """Wait until the run passes `moment` (or has ended); the time it did."""
    deadline = time.monotonic() + timeout
    while process.poll() is None and not _passed(run_dir, process, moment):
        assert time.monotonic() < deadline, f"the run never passed {moment}"
        time.sleep(0.01)
    return time.monotonic()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted run: its codes, and how long it took from each of `MOMENTS` to the
    next, to place the kills."""
    run_dir = tmp_path_factory.mktemp("reference")
    process = _start(run_dir)
    times = [_wait_for(run_dir, process, moment) for moment in MOMENTS]
    returncode, _, err = _finished(process)
    assert returncode == 0, err[-3000:]
    return {"dir": run_dir, "codes": run_codes(run_dir),
            "gaps": {start: end - begun for start, begun, end in
                     zip(MOMENTS, times, times[1:], strict=False)}}


def test_two_runs_started_together_in_one_directory_one_trains_and_one_is_refused(tmp_path):
    longer = [*ARGS, "trainer.steps=2400"]  # the winner writes for seconds: the loser meets it
    processes = {seed: _start(tmp_path, f"trainer.seed={seed}", args=longer) for seed in (0, 1)}
    results = {seed: _finished(process) for seed, process in processes.items()}
    returncodes = sorted(returncode for returncode, _, _ in results.values())
    assert returncodes == [0, 2], [err[-2000:] for _, _, err in results.values()]
    winner = next(seed for seed, (returncode, _, _) in results.items() if returncode == 0)
    loser = 1 - winner
    errors = [line for line in results[loser][2].splitlines() if "sgh-train: error" in line]
    assert len(errors) == 1 and "Traceback" not in results[loser][2]
    assert errors[0].startswith(f"sgh-train: error: {tmp_path} is in use by sgh-train (pid "
                                f"{processes[winner].pid} on ")
    assert errors[0].endswith("; wait for it to finish, or choose another hydra.run.dir")
    # One consistent run: the winner's configuration, metrics and codes.
    config = OmegaConf.load(tmp_path / "config.yaml")
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    codes = load_codes(tmp_path / "codes.npz")
    assert config.trainer.seed == metrics["seed"] == winner
    assert config.model.bits == metrics["bits"] == codes.bits == 16
    assert metrics["steps"] == 2400 and metrics["n_database"] == len(codes.database)
    assert not _temporaries(tmp_path) and not _partial_artifacts(tmp_path)


DAMAGE = {
    "truncated data": lambda prefix: _truncate(prefix.with_name(
        f"{prefix.name}.data-00000-of-00001")),
    "garbage data": lambda prefix: _garble(prefix.with_name(
        f"{prefix.name}.data-00000-of-00001")),
    "missing index": lambda prefix: prefix.with_name(f"{prefix.name}.index").unlink(),
}


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])


def _garble(path):
    path.write_bytes(np.random.default_rng(15).bytes(path.stat().st_size))


@pytest.fixture(scope="module")
def damaged(reference, tmp_path_factory):
    """Per kind of damage: the reference run as a kill right after its last checkpoint leaves
    it (no final files), that checkpoint damaged, then resumed; the resumes run side by side."""
    dirs = {}
    for kind, damage in DAMAGE.items():
        run_dir = tmp_path_factory.mktemp(kind.replace(" ", "-")) / "run"
        shutil.copytree(reference["dir"], run_dir)
        for name in FINAL_FILES:
            shutil.rmtree(run_dir / name) if name == "encoder" else (run_dir / name).unlink()
        damage(run_dir / "checkpoints" / f"ckpt-{LAST}")
        dirs[kind] = run_dir
    resumed = {kind: _start(run_dir) for kind, run_dir in dirs.items()}
    return {kind: (dirs[kind], _finished(process)) for kind, process in resumed.items()}


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_damaged_latest_checkpoint_is_skipped_and_the_resume_gives_the_same_codes(
        reference, damaged, kind):
    run_dir, (returncode, out, err) = damaged[kind]
    assert returncode == 0, err[-3000:]
    checkpoints = run_dir / "checkpoints"
    assert (f"checkpoint {checkpoints / f'ckpt-{LAST}'} is damaged (" in err and
            f"resuming from {checkpoints / f'ckpt-{BEFORE_LAST}'}, the newest intact one" in err)
    assert f"resuming from step {BEFORE_LAST}" in out
    _assert_same_codes(run_dir, reference["codes"])
    assert checkpoint_damage(checkpoints / f"ckpt-{LAST}") is None  # saved again, whole
    assert not _temporaries(run_dir) and not _partial_artifacts(run_dir)


# What each kill interrupts: the moment it waits for, then a seeded random delay within a part
# (from, to) of the time the reference took from there to the next moment. Anchored on what the
# run itself shows, the kills land in every phase however fast a run starts or trains.
KILLED_AFTER = {"the set-up (model, first calls)": ("lock", 0.0, 0.9),
                "training and validation": (100, 0.0, 0.9),
                "training and the best weights": (600, 0.0, 0.9),
                "the final checkpoint, export, codes": (LAST, 0.0, 0.5),
                "the export, codes, metrics": (LAST, 0.5, 0.9)}


def test_kill_9_at_random_moments_loses_nothing(reference, tmp_path):
    """Kills at seeded random moments, one in each phase of a run, each run then resumed by
    the same command to the reference's codes."""
    rng = np.random.default_rng(15)
    injected = []
    for kill, (phase, (moment, low, high)) in enumerate(KILLED_AFTER.items()):
        run_dir = tmp_path / f"kill-{kill}"
        delay = rng.uniform(low, high) * reference["gaps"][moment]
        process = _start(run_dir)
        passed = _wait_for(run_dir, process, moment)
        try:  # a run faster than the reference may end first
            assert process.wait(timeout=max(0.0, passed + delay - time.monotonic())) == 0
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.wait()
            injected.append({
                "in": phase, "delay after": f"{moment}: {delay:.2f} s",
                "latest checkpoint": _latest_step(run_dir),
                "final files": [name for name in FINAL_FILES if (run_dir / name).exists()],
                "temporaries": _temporaries(run_dir)})
            holder = _lock_holder(run_dir)
            assert holder is None or holder["pid"] == process.pid  # left by the killed process
        # Whatever the moment: every file there is whole (metrics.json, written last, marks
        # a finished run).
        assert not _partial_artifacts(run_dir), (phase, delay, _partial_artifacts(run_dir))
        returncode, out, err = _finished(_start(run_dir))  # takes over the killed one's lock
        assert returncode == 0, err[-3000:]
        assert not _temporaries(run_dir), _temporaries(run_dir)
        assert not _partial_artifacts(run_dir)
        _assert_same_codes(run_dir, reference["codes"])
    print(f"kill -9 injected {len(injected)} times:", *injected, sep="\n  ")
    assert len(injected) >= len(KILLED_AFTER) - 1  # the last may come after a fast run's end


def test_kill_9_amid_the_encoders_export_leaves_a_temporary_that_the_resume_removes(
        reference, tmp_path):
    """The moment random kills rarely meet: an atomic write under way (the SavedModel, written
    into `.encoder.*.tmp/` for a few hundred milliseconds)."""
    process = _start(tmp_path)
    deadline = time.monotonic() + 180
    while not list(tmp_path.glob(".encoder.*.tmp")):
        assert process.poll() is None, "the export was not met"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert _temporaries(tmp_path)  # left by the killed writer...
    assert not _partial_artifacts(tmp_path) and not (tmp_path / "metrics.json").exists()
    returncode, out, err = _finished(_start(tmp_path))
    assert returncode == 0, err[-3000:]
    assert f"resuming from step {LAST}" in out
    assert "removed what an interrupted writer left half-written" in out
    assert not _temporaries(tmp_path)  # ...and removed by the next owner
    assert not _partial_artifacts(tmp_path)
    _assert_same_codes(tmp_path, reference["codes"])


def _write_dataset(path, n_train):
    x_train, y_train, x_test, y_test = gaussian_clusters(n_train, 400, 32, 10, seed=0)
    np.savez(path, X_train=x_train, y_train=y_train, X_test=x_test, y_test=y_test)


def test_a_resume_on_a_changed_dataset_file_is_refused_naming_it(tmp_path):
    data = tmp_path / "clusters.npz"
    _write_dataset(data, 2000)
    run_dir = tmp_path / "run"
    args = [*ARGS[1:], "dataset=file", f"dataset.path={data}", "dataset.n_queries=100"]
    process = _start(run_dir, args=args)
    deadline = time.monotonic() + 180
    while not (run_dir / "checkpoints" / "checkpoint").is_file():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    recorded = json.loads((run_dir / "inputs.json").read_text())["files"]
    assert [item["path"] for item in recorded] == [str(data.resolve())]
    checkpoints = sorted(path.name for path in (run_dir / "checkpoints").iterdir())
    _write_dataset(data, 2001)  # one training item more
    returncode, _, err = _finished(_start(run_dir, args=args))
    assert returncode == 2 and "Traceback" not in err
    (error,) = [line for line in err.splitlines() if "sgh-train: error" in line]
    assert error.startswith(f"sgh-train: error: {run_dir} holds a run on other data "
                            f"({data.resolve()} (dataset.path): size ")
    assert error.endswith("; put the file back as it was to resume the run, or choose a new "
                          "hydra.run.dir to train on it as it is now")
    # The refused resume trained nothing, and the record still describes the run's data.
    assert sorted(path.name for path in (run_dir / "checkpoints").iterdir()) == checkpoints
    assert json.loads((run_dir / "inputs.json").read_text())["files"] == recorded


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_sgh_export_into_a_read_only_run_directory_is_one_line(reference, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(reference["dir"], run_dir)
    shutil.rmtree(run_dir / "encoder")
    run_dir.chmod(0o555)
    try:
        result = subprocess.run([sys.executable, "-m", "sgh.cli.export", f"run={run_dir}"],
                                capture_output=True, text=True, timeout=300)
    finally:
        run_dir.chmod(0o755)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"sgh-export: error: cannot write the run directory {run_dir} (Permission denied); "
        "make it writable to export into it")
