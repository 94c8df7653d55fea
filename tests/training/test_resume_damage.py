"""Resuming a damaged run directory: a truncated, overwritten or missing checkpoint file is
skipped for the newest intact checkpoint (with a warning naming it), the run then ends with the
codes of an undamaged one; with none intact, one line says what to do. A resume on another
configuration names the keys that differ, and one on changed dataset files names the file; a
finished run is shown under its own settings only, and refused as a resume is while it holds a
checkpoint.

The runs here are the quick ones (synthetic data, no XLA); tests/faults/test_faults.py injects
the same faults into real `sgh-train` processes (slow).
"""

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from sgh.artifacts.checkpoint_integrity import checkpoint_damage
from sgh.artifacts.resume_checks import check_recorded_configuration, refuse_other_data
from sgh.artifacts.run_directory import RunDirectory
from sgh.artifacts.run_inputs import changed_inputs, describe_inputs
from sgh.config import FileDatasetConfig
from sgh.data import load_split_and_files
from sgh.errors import UserInputError
from sgh.model.export import restore_run_model
from sgh.pipeline import run
from tests.helpers import QUICK, compose_config
from tests.helpers_vector_files import write_texmex

START_OVER = "to train the run again, or choose a new hydra.run.dir"


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garble(path):
    path.write_bytes(np.random.default_rng(0).bytes(path.stat().st_size))


DAMAGE = {  # the file of checkpoint `prefix` that is damaged, and how
    "truncated data": (".data-00000-of-00001", _truncate),
    "garbage data": (".data-00000-of-00001", _garble),
    "missing data": (".data-00000-of-00001", os.remove),
    "truncated index": (".index", _truncate),
    "garbage index": (".index", _garble),
    "missing index": (".index", os.remove),
}


def _damage_file(prefix, kind):
    suffix, how = DAMAGE[kind]
    how(Path(f"{prefix}{suffix}"))


def _saved_twice(run: RunDirectory, best: bool = False):
    """A run directory whose checkpoints hold steps 1 and 2 of a 1000-float variable."""
    variable = tf.Variable(np.arange(1000, dtype=np.float32))
    manager = run.checkpoint_manager(tf.train.Checkpoint(v=variable), best=best)
    manager.save(checkpoint_number=1)
    variable.assign_add(tf.ones(1000))
    manager.save(checkpoint_number=2)
    return variable


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_damaged_latest_checkpoint_is_skipped_for_the_one_before_it(tmp_path, caplog, kind):
    run = RunDirectory(tmp_path)
    variable = _saved_twice(run)
    latest = str(run.checkpoints / "ckpt-2")
    assert checkpoint_damage(latest) is None
    _damage_file(latest, kind)
    assert checkpoint_damage(latest)  # a few words saying what is wrong
    checkpoint = tf.train.Checkpoint(v=variable)
    with caplog.at_level(logging.WARNING):  # as a resumed process sees the directory
        chosen = run.resume_checkpoint(run.checkpoint_manager(checkpoint))
    assert chosen == str(run.checkpoints / "ckpt-1")
    assert f"checkpoint {latest} is damaged (" in caplog.text
    assert f"resuming from {chosen}, the newest intact one" in caplog.text
    checkpoint.restore(chosen).assert_consumed()
    np.testing.assert_array_equal(variable.numpy(), np.arange(1000))


def test_no_intact_checkpoint_is_one_line_saying_what_to_do(tmp_path):
    run = RunDirectory(tmp_path)
    variable = _saved_twice(run)
    _damage_file(run.checkpoints / "ckpt-2", "garbage data")
    _damage_file(run.checkpoints / "ckpt-1", "missing index")
    with pytest.raises(UserInputError) as refused:
        run.resume_checkpoint(run.checkpoint_manager(tf.train.Checkpoint(v=variable)))
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"no intact checkpoint in {run.checkpoints} (ckpt-2: ")
    assert "; ckpt-1: no ckpt-1.index); delete " in message
    assert message.endswith(f"delete {run.checkpoints} {START_OVER}")


def test_an_unreadable_list_of_checkpoints_is_rebuilt_from_the_files(tmp_path, caplog):
    # TensorFlow itself ignores such a file, and the run would silently start from step 0.
    run = RunDirectory(tmp_path)
    variable = _saved_twice(run)
    (run.checkpoints / "checkpoint").write_bytes(b"\x00not a checkpoint state{{")
    with caplog.at_level(logging.WARNING):
        manager = run.checkpoint_manager(tf.train.Checkpoint(v=variable))
    assert "is unreadable; listing the checkpoints found beside it instead: ckpt-1, ckpt-2" \
        in caplog.text
    assert run.resume_checkpoint(manager) == str(run.checkpoints / "ckpt-2")


def test_damaged_best_weights_come_from_the_training_checkpoint_of_their_step(tmp_path, caplog):
    run = RunDirectory(tmp_path)
    _saved_twice(run)
    _saved_twice(run, best=True)  # one slot: best/ckpt-2 only
    best = run.best_checkpoints / "ckpt-2"
    assert run.weights_of_step(2) == str(best)
    _damage_file(best, "truncated data")
    with caplog.at_level(logging.WARNING):
        assert run.weights_of_step(2) == str(run.checkpoints / "ckpt-2")
    assert (f"checkpoint {best} is damaged (Read less bytes than requested); the weights of "
            f"step 2 come from {run.checkpoints / 'ckpt-2'} instead") in caplog.text
    # What sgh-export restores: the step that made codes.npz, by metrics.json.
    (run.path / "metrics.json").write_text(json.dumps({"steps": 2, "best_step": 2}))
    assert run.final_checkpoint() == str(run.checkpoints / "ckpt-2")
    _damage_file(run.checkpoints / "ckpt-2", "missing data")
    with pytest.raises(UserInputError) as refused:
        run.final_checkpoint()
    assert "\n" not in str(refused.value)
    assert str(refused.value).startswith(
        f"no intact checkpoint of step 2, whose weights make the run's codes, in "
        f"{run.best_checkpoints} or {run.checkpoints} ({best}: Read less bytes")
    with pytest.raises(UserInputError, match=r"\(none is kept\); delete .* " + START_OVER):
        run.weights_of_step(7)


@pytest.mark.slow  # 5-10 s: a whole training run
def test_a_run_resumes_past_damaged_checkpoints_to_the_same_codes(tmp_path, caplog):
    """End to end: a run whose latest checkpoint, then whose best weights, are damaged, and
    whose codes are lost (as by a kill before they were written: a finished run is not opened
    again); each time the same command ends with the same codes, and sgh-export's restore too
    finds intact weights."""
    config = compose_config(*QUICK, "trainer.checkpoint_every=20", "trainer.jit_compile=false")
    run(config, tmp_path)
    with np.load(tmp_path / "codes.npz") as codes:
        reference = {key: codes[key] for key in ("database", "query")}
    checkpoints = RunDirectory(tmp_path).checkpoints

    def same_codes():
        with np.load(tmp_path / "codes.npz") as codes:
            for key, expected in reference.items():
                np.testing.assert_array_equal(codes[key], expected)

    _damage_file(checkpoints / "ckpt-60", "truncated data")
    (tmp_path / "codes.npz").unlink()
    caplog.clear()
    with caplog.at_level(logging.INFO):
        run(config, tmp_path)
    assert f"checkpoint {checkpoints / 'ckpt-60'} is damaged" in caplog.text
    assert "resuming from step 40" in caplog.text  # 20 steps made again, as they were
    same_codes()
    assert checkpoint_damage(checkpoints / "ckpt-60") is None  # saved again, whole

    best = checkpoints / "best" / "ckpt-60"
    _damage_file(best, "garbage index")
    (tmp_path / "codes.npz").unlink()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        run(config, tmp_path)
    assert f"checkpoint {best} is damaged" in caplog.text
    same_codes()
    assert checkpoint_damage(best) is None  # the best weights saved again from the same step
    assert not list(tmp_path.rglob("*.tmp*")) and not list(tmp_path.rglob("*_temp"))

    _damage_file(best, "missing index")
    assert restore_run_model(tmp_path).bits == 12  # from checkpoints/ckpt-60


def test_another_configuration_is_refused_naming_the_keys_that_differ(tmp_path):
    run_directory = RunDirectory(tmp_path)
    run_directory.write_config(compose_config(*QUICK))
    run_directory.checkpoints.mkdir()
    (run_directory.checkpoints / "checkpoint").write_text("")  # a run with a checkpoint
    check_recorded_configuration(run_directory, compose_config(*QUICK, "eval.radius=3"))
    with pytest.raises(UserInputError) as refused:
        check_recorded_configuration(run_directory, compose_config(
            *QUICK, "model.bits=16", "trainer.seed=1", "eval.radius=3"))
    assert str(refused.value) == (
        f"{tmp_path} holds a run with another configuration (model.bits: 12 -> 16, "
        "trainer.seed: 0 -> 1); resume it with the same settings, or choose a new "
        "hydra.run.dir")


def test_a_finished_run_is_shown_only_under_its_own_settings(tmp_path):
    run_directory = RunDirectory(tmp_path)
    run_directory.write_config(compose_config(*QUICK, "model=lsh"))
    finished = {"map": 0.5}  # its metrics.json
    same, other = compose_config(*QUICK, "model=lsh"), compose_config(*QUICK, "model=lsh",
                                                                      "model.bits=8")
    assert not check_recorded_configuration(run_directory, same, finished)  # codes lost: redone
    run_directory.codes.write_bytes(b"")
    assert check_recorded_configuration(run_directory, same, finished)  # this run, finished
    assert not check_recorded_configuration(run_directory, other)  # no checkpoint to resume
    with pytest.raises(UserInputError) as refused:
        check_recorded_configuration(run_directory, compose_config(
            *QUICK, "model=lsh", "model.bits=8", "eval.radius=3"), finished)
    assert str(refused.value) == (
        f"{tmp_path} holds a finished run with another configuration (model.bits: 12 -> 8), "
        "and finished work is never recorded again; accepted: its own settings (its results "
        "are shown, nothing is written), or a new hydra.run.dir for this run")
    with pytest.raises(UserInputError) as refused:
        check_recorded_configuration(run_directory, compose_config(
            *QUICK, "model=lsh", "eval.radius=3"), finished)
    assert str(refused.value) == (
        f"{tmp_path} holds a finished run (model=lsh) with other evaluation settings "
        "(eval.radius: 2 -> 3), and finished work is never recorded again; accepted: re-score "
        f"it into a file of its own, sgh-eval run={tmp_path} eval.radius=3 out=scores.json, or "
        "a new hydra.run.dir for a new run")


def test_a_finished_run_with_a_checkpoint_is_refused_as_a_resume_would_be(tmp_path):
    """Its checkpoint's checks come first: another configuration is refused as another run's
    resume, and changed data as a resume on other data, even with only `eval.*` changed."""
    from sgh.data.synthetic import gaussian_clusters

    data = tmp_path / "clusters.npz"
    x_train, y_train, x_test, y_test = gaussian_clusters(600, 200, 16, 4, 0)
    np.savez(data, X_train=x_train, y_train=y_train, X_test=x_test, y_test=y_test)
    settings = [*QUICK[1:], "dataset=file", f"dataset.path={data}", "dataset.n_queries=50"]
    run_directory = RunDirectory(tmp_path / "run")
    run_directory.write_config(compose_config(*settings))
    run_directory.write_inputs(describe_inputs({"dataset.path": data}))
    run_directory.checkpoints.mkdir()
    (run_directory.checkpoints / "checkpoint").write_text("")
    run_directory.metrics.write_text('{"map": 0.5}')  # finished
    kept = {path: path.read_bytes() for path in (run_directory.config_file,
                                                 run_directory.inputs_file)}
    with pytest.raises(UserInputError, match=r"holds a run with another configuration "
                                             r"\(trainer.seed: 0 -> 1\); resume it"):
        run(compose_config(*settings, "trainer.seed=1"), run_directory.path)
    np.savez(data, X_train=x_train[1:], y_train=y_train[1:], X_test=x_test, y_test=y_test)
    for changed in ([], ["eval.radius=3"]):
        with pytest.raises(UserInputError, match=f"{run_directory.path} holds a run on other "
                                                 "data"):
            run(compose_config(*settings, *changed), run_directory.path)
    assert {path: path.read_bytes() for path in kept} == kept
    assert not run_directory.codes.exists()


def test_the_dataset_files_are_recorded_by_the_setting_that_names_them(tmp_path):
    rows = np.random.default_rng(0).normal(size=(20, 4))
    base = write_texmex(tmp_path / "toy_base.fvecs", rows)
    query = write_texmex(tmp_path / "toy_query.fvecs", rows[:3])
    ids = np.tile(np.arange(10, dtype=np.int32), (3, 1))  # a valid ground truth: it is read
    truth = write_texmex(tmp_path / "toy_groundtruth.ivecs", ids)
    assert load_split_and_files(FileDatasetConfig(name="toy", path=str(base)))[1] == {
        "dataset.path": base, "dataset.query_path": query, "dataset.groundtruth_path": truth}
    named = tmp_path / "named.npz"
    np.savez(named, base=rows, query=rows[:3])  # one file holds every split
    assert load_split_and_files(FileDatasetConfig(name="toy", path=str(named)))[1] == {
        "dataset.path": named}
    assert load_split_and_files(compose_config(*QUICK).dataset)[1] == {}  # synthetic: no file


def test_a_resume_on_changed_data_is_refused_naming_the_file(tmp_path):
    data = tmp_path / "data.fvecs"
    write_texmex(data, np.ones((20, 4)))
    files = {"dataset.path": data}
    run_directory = RunDirectory(tmp_path / "run")
    run_directory.write_inputs(describe_inputs(files))
    assert json.loads(run_directory.inputs_file.read_text())["files"][0] == {
        "setting": "dataset.path", "path": str(data.resolve()), "size": data.stat().st_size,
        "mtime_ns": data.stat().st_mtime_ns}
    run_directory.checkpoints.mkdir()
    (run_directory.checkpoints / "checkpoint").write_text("")
    refuse_other_data(run_directory, describe_inputs(files))  # unchanged: resumed
    write_texmex(data, np.ones((21, 4)))  # a row more
    with pytest.raises(UserInputError) as refused:
        refuse_other_data(run_directory, describe_inputs(files))
    assert str(refused.value) == (
        f"{run_directory.path} holds a run on other data ({data.resolve()} (dataset.path): size "
        f"{20 * 20} -> {21 * 20} bytes); put the file back as it was to resume the run, or "
        "choose a new hydra.run.dir to train on it as it is now")
    write_texmex(data, np.ones((20, 4)))  # the same size, rewritten later
    recorded = run_directory.previous_inputs()
    os.utime(data, ns=(recorded[0].mtime_ns + 10**9, recorded[0].mtime_ns + 10**9))
    (change,) = changed_inputs(recorded, describe_inputs(files))
    assert change.startswith(f"{data.resolve()} (dataset.path): modified at ")
    assert ", recorded " in change
