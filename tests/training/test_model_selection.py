"""Validation during training: the held-out split, the best checkpoint, early stopping."""

import json

import numpy as np
import pytest

from sgh.config import ValidationConfig
from sgh.data import load_split
from sgh.errors import UserInputError
from sgh.pipeline import run
from sgh.training.holdout import carve, split_training_labels
from tests.helpers import compose_config, quick, trained

QUICK = quick("trainer.steps=200", "validation.every=40")


def _config(*overrides):
    return compose_config(*QUICK, *overrides)


def _rows(array):
    return {row.tobytes() for row in array}


def test_validation_queries_are_held_out_of_training_and_never_test_queries():
    config = _config()
    split = load_split(config.dataset)
    train, validation = carve(split.train, ValidationConfig(queries=150, database=500,
                                                            metric="map"),
                              recall_k=10, labels=split_training_labels(split))
    assert len(train) == len(split.train) - 150 and len(validation.query) == 150
    assert len(validation.database) == 500
    # Synthetic features are continuous: equal rows are the same item.
    assert not _rows(validation.query) & _rows(train)  # never trained on
    assert _rows(validation.database) <= _rows(train)  # ranked against training items
    assert not _rows(validation.query) & _rows(split.query)  # never the test queries
    # Labels travel with their items.
    labels = dict(zip(map(bytes, split.train), split.database_labels[: len(split.train)],
                      strict=True))
    assert [labels[bytes(row)] for row in validation.query] == list(validation.query_labels)
    assert validation.metric == "map"


def test_held_out_share_is_capped_at_a_tenth_of_the_training_set():
    split = load_split(_config().dataset)  # 2,000 training items
    train, validation = carve(split.train, ValidationConfig(queries=1000), recall_k=10)
    assert len(validation.query) == 200 and len(train) == 1800


def test_default_validation_metric_is_euclidean_recall_and_map_needs_labels():
    split = load_split(_config().dataset)
    _, validation = carve(split.train, ValidationConfig(queries=100, database=300), recall_k=5)
    assert validation.metric == "recall5@100" and validation.groundtruth.shape == (100, 5)
    # The ground truth: the exact 5 nearest validation-database items of each query.
    distances = ((validation.query[:, None, :] - validation.database[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(np.sort(validation.groundtruth, axis=1),
                                  np.sort(np.argsort(distances, axis=1)[:, :5], axis=1))
    _, labelled = carve(split.train, ValidationConfig(queries=100, database=300), recall_k=5,
                        labels=split_training_labels(split))
    assert labelled.metric == "recall5@100"  # labels do not change the default
    with pytest.raises(UserInputError, match="validation.metric=map needs labels"):
        carve(split.train, ValidationConfig(metric="map"), recall_k=5)


def test_too_small_a_training_set_for_validation_is_one_clear_error():
    split = load_split(_config().dataset)
    with pytest.raises(UserInputError, match="validation.every=0"):
        carve(split.train[:9], ValidationConfig(), recall_k=10)


@pytest.fixture(scope="module")
def validated_run(tmp_path_factory):
    return trained(tmp_path_factory.mktemp("validated"), _config())


def test_final_codes_come_from_the_best_validated_weights(validated_run):
    import tensorflow as tf
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from sgh.model.encoding import encode_packed
    from sgh.model.sgh_model import SGH

    run_dir, metrics = validated_run
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    metric = metrics["validation_metric"]
    assert metric == "recall10@100"  # the default: the paper's Euclidean neighbours
    scores = {event.step: float(tf.make_ndarray(event.tensor_proto))
              for event in events.Tensors(f"validation/{metric}")}
    assert sorted(scores) == [40, 80, 120, 160, 200]
    best_step = max(scores, key=lambda step: (scores[step], -step))  # first of the best
    assert metrics["best_step"] == best_step
    assert metrics[f"best_validation_{metric}"] == pytest.approx(scores[best_step], abs=1e-6)
    assert json.loads((run_dir / "metrics.json").read_text())["best_step"] == best_step

    config = _config()
    split = load_split(config.dataset)
    model = SGH.from_training_data(config.model, split.train, seed=5)
    tf.train.Checkpoint(model=model).restore(
        tf.train.latest_checkpoint(str(run_dir / "checkpoints" / "best"))).expect_partial()
    with np.load(run_dir / "codes.npz") as codes:
        np.testing.assert_array_equal(encode_packed(model, split.database), codes["database"])


def test_early_stopping_stops_after_patience_points_without_improvement(tmp_path):
    # A learning rate of ~0 cannot improve on the first validation point: the run must stop at
    # the third point (patience 2) and keep the first point's weights.
    metrics = run(_config("trainer.learning_rate=1e-12", "validation.patience=2"), tmp_path)
    assert metrics["stopped_early"] is True
    assert metrics["steps"] == 120 and metrics["best_step"] == 40
    # Running the finished command again neither trains further nor changes the selection.
    again = run(_config("trainer.learning_rate=1e-12", "validation.patience=2"), tmp_path)
    assert again["steps"] == 120 and again["best_step"] == 40


def test_the_step_where_training_stops_early_gets_its_progress_line(caplog):
    # 1,000 steps: a line every 100. Stopping at step 180 must show that step's line (with its
    # deciding validation score, nothing left to wait for), not leave step 100's as the last.
    from types import SimpleNamespace

    from sgh.training.loop import ChunkLog
    from sgh.training.progress import ConsoleProgress

    stopping = False
    validation = SimpleNamespace(last_score="  val recall10@100 0.6032",
                                 selection=SimpleNamespace(should_stop=lambda: stopping))
    console = ConsoleProgress(total_steps=1000, first_step=0, validation=validation)

    def call_ending_at(step):
        console(ChunkLog(step=step, steps=20, seconds=0.01, learning_rate=1e-3,
                         terms={"total": 1.0}))

    with caplog.at_level("INFO", logger="sgh.training.progress"):
        call_ending_at(100)
        assert [line.split("/")[0] for line in caplog.messages] == ["step    100"]
        call_ending_at(180)
        assert len(caplog.messages) == 1  # not a tenth, not stopping: no line
        stopping = True
        call_ending_at(180)
    assert len(caplog.messages) == 2
    assert caplog.messages[1].startswith("step    180/1000  total 1  lr 0.001  val recall10@100 "
                                         "0.6032")
    assert caplog.messages[1].endswith("ETA 0:00")


def test_without_patience_a_stalled_validation_trains_every_step(tmp_path):
    # The stalled run above, with validation.patience at its default 0: all 200 steps, the
    # codes still from the first (best) point.
    metrics = run(_config("trainer.learning_rate=1e-12"), tmp_path)
    assert metrics["stopped_early"] is False
    assert metrics["steps"] == 200 and metrics["best_step"] == 40


@pytest.mark.slow  # 5-10 s: a whole training run
def test_a_resumed_run_with_patience_stops_where_an_uninterrupted_one_does(tmp_path,
                                                                          monkeypatch):
    # Interrupted (a Ctrl-C) right after the checkpoint of step 80, one point without
    # improvement into a patience of 2: the resumed run must count that point and stop at 120,
    # as the uninterrupted run does. A counter not carried in the checkpoint would stop at 160
    # (at 200, with the best score lost too).
    import signal

    from sgh.errors import TrainingInterrupted
    from sgh.training import progress

    config = _config("trainer.learning_rate=1e-12", "validation.patience=2",
                     "trainer.checkpoint_every=40")
    save = progress.PeriodicCheckpoints.__call__

    def save_then_interrupt_at_80(self, log):
        save(self, log)
        if log.step == 80:
            signal.raise_signal(signal.SIGINT)

    with monkeypatch.context() as patch:
        patch.setattr(progress.PeriodicCheckpoints, "__call__", save_then_interrupt_at_80)
        with pytest.raises(TrainingInterrupted, match="interrupted at step 80 of 200"):
            run(config, tmp_path)
    resumed = run(config, tmp_path)
    assert resumed["stopped_early"] is True
    assert resumed["steps"] == 120 and resumed["steps_this_process"] == 40
    assert resumed["best_step"] == 40


def test_validation_off_trains_on_the_whole_training_set(tmp_path):
    metrics = run(_config("validation.every=0"), tmp_path)
    assert metrics["n_train"] == 2000 and "best_step" not in metrics
    assert not (tmp_path / "checkpoints" / "best").exists()


def test_impossible_validation_settings_are_refused():
    from sgh.config import validate

    with pytest.raises(UserInputError, match="validation.every=-1 is impossible"):
        validate(_config("validation.every=-1"))
    with pytest.raises(UserInputError, match="validation.metric='f1' is not known"):
        validate(_config("validation.metric=f1"))
