"""Training SGH: one core (`SGHFit`) behind `sgh-train` (`train_sgh`) and `SGHHasher`.

The core trains with validation and reports the fields of `metrics.json`;
`fit_in_run_directory` adds resuming, checkpoints, TensorBoard events and SIGINT/SIGTERM
handling, `fit_in_memory` (the Python API) keeps everything in memory.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Callable
from functools import partial

import keras
import numpy as np
import tensorflow as tf

from sgh.artifacts.atomic import write_json
from sgh.artifacts.run_directory import RunDirectory
from sgh.config import Config
from sgh.data import RetrievalSplit
from sgh.data.streamed_features import Features, StreamedFeatures
from sgh.errors import TrainingInterrupted, UserInputError
from sgh.methods import EncodedSplit
from sgh.model.encoding import encode_packed
from sgh.model.export import export_encoder
from sgh.model.sgh_model import SGH
from sgh.training.batches import BLOCKS_IN_MEMORY, block_bytes
from sgh.training.holdout import ValidationSet, carve, split_training_labels
from sgh.training.loop import Trainer, median_ms_per_step
from sgh.training.model_selection import ModelSelection
from sgh.training.progress import (
    ConsoleProgress,
    PeriodicCheckpoints,
    TrainingScalars,
    ValidationPoints,
)
from sgh.training.recipe_choice import fit_and_score
from sgh.training.signals import stop_on_signals

logger = logging.getLogger(__name__)


def train_sgh(config: Config, split: RetrievalSplit, run_directory: RunDirectory,
              strategy: tf.distribute.Strategy | None = None) -> EncodedSplit:
    """Train (or resume) SGH in the run directory, export the encoder, encode the split."""
    # A sweep's jobs share a process: each starts from a clean Keras state, collecting an earlier
    # job's objects only if there was one (an optimizer named "adam" before this one). Not in the
    # core: `SGHHasher.fit` leaves the user's Keras state alone (its draws are keyed by its seed).
    keras.backend.clear_session(free_memory=keras.backend.get_uid("adam") > 1)
    train_items, validation = hold_out(config, split.train, split_training_labels(split),
                                       repr(split.name), split.similarity)

    def fit(recipe: Config, candidate: str | None) -> tuple[SGH, dict]:
        directory = run_directory if candidate is None else run_directory.candidate(candidate)
        trained = fit_in_run_directory(recipe, train_items, validation, strategy, directory)
        _keep_training_record(trained.fields, directory)
        return trained.model, trained.fields

    chosen = fit_and_score(config, train_items, validation, split.similarity,
                           config.eval.ranking, fit)
    model, scores, fields = chosen.model, chosen.scores, chosen.fields
    export_encoder(model, run_directory.encoder, unit_normalise=split.similarity == "angular")
    return EncodedSplit(database=encode_packed(model, split.database),
                        query=encode_packed(model, split.query), fields=fields, scores=scores)


# The fields that describe how a run trained, kept beside its checkpoints.
TRAINING_RECORD = ("train_seconds", "ms_per_step", "final_loss_terms_per_item",
                   "validation_seconds")
_RECORD_FILE = "training_record.json"


def _keep_training_record(fields: dict, run_directory: RunDirectory) -> None:
    """Keep the record of the process that trained; one resuming at the last step reports it."""
    path = run_directory.checkpoints / _RECORD_FILE
    if fields.get("steps_this_process", 0) > 0 or not path.is_file():
        write_json(path, {key: fields[key] for key in TRAINING_RECORD if key in fields})
        return
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # damaged: this process's own (empty) record stands
    fields.update({key: kept[key] for key in TRAINING_RECORD if key in kept})


def hold_out(config: Config, train: Features, labels: np.ndarray | None,
             name: str, similarity: str = "euclidean") -> tuple[Features, ValidationSet | None]:
    """(training items, validation set) when `validation.every > 0`, else (`train`, None)."""
    if config.validation.every == 0:
        return train, None
    return carve(train, config.validation, config.eval.recall_k, labels, name, similarity)


def fit_in_memory(config: Config, train_items: Features,
                  validation: ValidationSet | None) -> SGHFit:
    """`SGHHasher`'s fit: nothing on disk but the best weights, in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="sgh-best-") as scratch:
        fit = SGHFit(config, train_items, validation, None,
                     lambda weights: tf.train.CheckpointManager(weights, scratch, 1))
        fit.train()
        return fit.finish("kept in memory during the fit")


def fit_in_run_directory(config: Config, train_items: Features, validation: ValidationSet | None,
                         strategy: tf.distribute.Strategy | None,
                         run_directory: RunDirectory) -> SGHFit:
    """`sgh-train`'s fit: resumed, checkpointed periodically and at the end or a SIGINT/SIGTERM."""
    fit = SGHFit(config, train_items, validation, strategy,
                 partial(run_directory.checkpoint_manager, best=True),
                 run_directory.weights_of_step)
    checkpoints = run_directory.checkpoint_manager(fit.checkpoint)
    resumed_from, resumed_step = run_directory.resume_checkpoint(checkpoints), None
    if resumed_from:
        fit.checkpoint.restore(resumed_from).assert_consumed()
        resumed_step = int(fit.trainer.step.numpy())
        logger.info("resuming from step %d (%s)", resumed_step, resumed_from)
        if fit.selection is not None:  # lost best weights fail now, not after the whole run
            fit.selection.require_best_weights()
    periodic = PeriodicCheckpoints(checkpoints, config.trainer.checkpoint_every)
    with run_directory.summary_writer(), stop_on_signals() as signals:
        step = fit.train([periodic], stop_requested=lambda: bool(signals))
        # Unless this step's checkpoint is known intact (a damaged one is replaced).
        if step not in (periodic.last_saved, resumed_step):
            checkpoints.save(checkpoint_number=step)
        if signals or fit.trainer.stopped_by_another_worker:  # a Ctrl-C on any worker stops all
            raise TrainingInterrupted(
                f"interrupted at step {step} of {config.trainer.steps}; checkpoint saved")
        return fit.finish("checkpoints/best", resumed_step)


class SGHFit:
    """The core of both fits (`best`, `weights_of_step`: see `ModelSelection`)."""

    def __init__(self, config: Config, train_items: Features, validation: ValidationSet | None,
                 strategy: tf.distribute.Strategy | None,
                 best: Callable[[tf.train.Checkpoint], tf.train.CheckpointManager],
                 weights_of_step: Callable[[int], str] | None = None):
        if config.trainer.batch_size > len(train_items):
            raise UserInputError(
                f"trainer.batch_size={config.trainer.batch_size} is larger than the training "
                f"set ({len(train_items)} items"
                + (f" after holding out {len(validation.query)} for validation" if validation
                   else "") + f"); accepted: 1..{len(train_items)}")
        if isinstance(train_items, StreamedFeatures):
            block_mib = block_bytes(config.trainer, train_items.shape[1]) / 2**20
            logger.info("streaming %d training items from %s: %d blocks of %.0f MiB of batches "
                        "in memory at most", len(train_items), train_items.path,
                        BLOCKS_IN_MEMORY, block_mib)
        strategy = strategy if strategy is not None else tf.distribute.get_strategy()
        with strategy.scope():  # several replicas: the model's variables are mirrored on each
            self.model = SGH.from_training_data(config.model, train_items, seed=config.trainer.seed)
        self.config, self.n_train = config, len(train_items)
        self.trainer = Trainer(self.model, train_items, config.trainer, strategy)
        self.selection = None if validation is None else ModelSelection(
            self.model, validation, config.validation.patience,
            best(tf.train.Checkpoint(model=self.model)), weights_of_step)
        self.checkpoint = self.trainer.checkpoint(
            **({"selection": self.selection.state} if self.selection else {}))

    def train(self, after_each_call=(), stop_requested=lambda: False) -> int:
        """Train to `trainer.steps` (or a stop, early or requested); the step reached."""
        config, selection = self.config, self.selection
        self.validating = None if selection is None else ValidationPoints(
            selection, config.validation.every, config.trainer.steps)
        console = ConsoleProgress(config.trainer.steps, int(self.trainer.step.numpy()),
                                  self.validating)
        steps = [TrainingScalars(), *([self.validating] if self.validating else []), console,
                 *after_each_call]
        self.logs = self.trainer.fit(lambda log: [step(log) for step in steps],
                                     stop_requested=lambda: stop_requested() or (
                                         selection is not None and selection.should_stop()))
        self.train_seconds = time.perf_counter() - console.started
        return int(self.trainer.step.numpy())

    def finish(self, best_kept: str, resumed_step: int | None = None) -> SGHFit:
        """The final weights and `fields`; `best_kept`: where the best validated ones wait."""
        config, step, logs = self.config, int(self.trainer.step.numpy()), self.logs
        self.fields = {
            "objective": config.model.objective, "estimator": config.model.gradient_estimator,
            "noise": config.model.noise, "steps": step,
            # 0: the run had finished its steps before this process.
            "steps_this_process": step - (resumed_step or 0),
            "batch_size": config.trainer.batch_size, "n_train": self.n_train,
            "replicas": self.trainer.replicas,  # devices the global batch was split over
            "train_seconds": self.train_seconds,  # this process's (a resumed run: its part)
            "ms_per_step": median_ms_per_step(logs),
            "ms_per_step_convention": ("median over compiled calls of wall time / steps, first "
                                       "call (compilation) excluded"),
            "final_loss_terms_per_item": logs[-1].terms if logs else {},
        }
        if self.selection is not None:
            self.fields.update(self._selection_fields(step, best_kept))
        return self

    def _selection_fields(self, step: int, best_kept: str) -> dict:
        """The best validated weights restored (they make the codes), reported."""
        selection, config = self.selection, self.config
        restored = selection.restore_best()  # False: no validation point was reached
        metric = selection.validation.metric
        stopped_early = selection.should_stop() and step < config.trainer.steps
        if stopped_early:
            logger.info("stopped early at step %d: no better validation %s in %d validation "
                        "points", step, metric, config.validation.patience)
        if restored:
            logger.info("final codes from step %d (best validation %s %.4f)",
                        selection.best_step, metric, selection.best_score)
        return {
            "validation_metric": metric,
            "validation_convention": selection.validation.convention,
            "best_step": selection.best_step if restored else step,
            f"best_validation_{metric}": selection.best_score if restored else float("nan"),
            "stopped_early": stopped_early,
            "validation_seconds": self.validating.seconds,  # this process's part
            "codes_from": (f"the best validated weights ({best_kept})" if restored
                           else "the last step (no validation point reached)"),
        }
