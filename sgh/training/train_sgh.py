"""Training SGH: the one core (`fit_sgh`) behind `sgh-train` (`train_sgh`) and `SGHHasher`.

`fit_sgh` holds out the validation split, builds the model from the training set's statistics,
runs the compiled loop with the after-each-call steps (`sgh.training.progress`), keeps the best
validated weights, and reports the fields of `metrics.json`. With a run directory it also
resumes from the run's checkpoints, writes checkpoints and TensorBoard events, and turns
SIGINT/SIGTERM into a saved checkpoint (`TrainingInterrupted`); without one (the Python API)
everything stays in memory, and only the best weights pass through a temporary directory.
`train_sgh` is what `sgh.pipeline` calls for `model=sgh`: `fit_sgh` in the run directory, then
the exported encoder and the split's codes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
import time
from dataclasses import dataclass

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
from sgh.training.score_selection import select_scores
from sgh.training.signals import stop_on_signals

logger = logging.getLogger(__name__)

# Whether this process has trained a run already (a sweep's later jobs).
_trained_before = False


@dataclass
class TrainedSGH:
    model: SGH  # with the final weights: the best validated ones when validation is on
    fields: dict  # SGH's keys of metrics.json (steps, timing, selection)


def train_sgh(config: Config, split: RetrievalSplit, run_directory: RunDirectory,
              strategy: tf.distribute.Strategy | None = None) -> EncodedSplit:
    """Train (or resume) SGH as configured in the run directory; export the encoder; encode.

    `strategy` is the one `sgh.pipeline.run` created before TensorFlow started (None: the
    default, one device).
    """
    # A sweep runs its jobs in one process: each starts from a clean Keras state. The full
    # garbage collection that frees an earlier job's cyclic TF objects (its training set among
    # them) only when there was one: in a fresh process it finds nothing and costs a pause.
    # Here, not in `fit_sgh`: a library user's `SGHHasher.fit` leaves their Keras state alone
    # (every random draw of a fit is keyed by its own seed, none by TensorFlow's global one).
    global _trained_before
    keras.backend.clear_session(free_memory=_trained_before)
    _trained_before = True
    train_items, validation = hold_out(config, split.train, split_training_labels(split),
                                       repr(split.name), split.similarity)
    trained = fit_sgh(config, train_items, validation, strategy, run_directory)
    _keep_training_record(trained.fields, run_directory)
    # The encoder that made the final codes, for sgh-encode and TF Serving (sgh.model.export).
    export_encoder(trained.model, run_directory.encoder,
                   unit_normalise=split.similarity == "angular")
    database = encode_packed(trained.model, split.database)
    scores = select_scores(trained.model, validation, train_items, split.similarity,
                           config.eval.recall_k)
    return EncodedSplit(database=database, query=encode_packed(trained.model, split.query),
                        fields={**trained.fields, **scores.metrics_fields(config.eval.recall_k)},
                        scores=scores)


# The fields that describe how a run trained, and where they are kept beside its checkpoints.
TRAINING_RECORD = ("train_seconds", "ms_per_step", "final_loss_terms_per_item",
                   "validation_seconds")
_RECORD_FILE = "training_record.json"


def _keep_training_record(fields: dict, run_directory: RunDirectory) -> None:
    """The record of the process that trained the last steps, kept beside the checkpoints: a
    process that resumes a run at its last step (an artifact was lost, the evaluation changed)
    trains nothing, and reports the record of the training instead of its own empty one."""
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
    """(training items, validation set): the training set minus the held-out validation queries
    when validation is on (`validation.every > 0`), else all of it and None."""
    if config.validation.every == 0:
        return train, None
    return carve(train, config.validation, config.eval.recall_k, labels, name, similarity)


def fit_sgh(config: Config, train_items: Features, validation: ValidationSet | None,
            strategy: tf.distribute.Strategy | None = None,
            run_directory: RunDirectory | None = None) -> TrainedSGH:
    """Train SGH on `train_items`, selecting on `validation`; see the module doc."""
    strategy = strategy if strategy is not None else tf.distribute.get_strategy()
    if config.trainer.batch_size > len(train_items):
        raise UserInputError(
            f"trainer.batch_size={config.trainer.batch_size} is larger than the training set "
            f"({len(train_items)} items"
            + (f" after holding out {len(validation.query)} for validation" if validation else "")
            + f"); accepted: 1..{len(train_items)}")
    if isinstance(train_items, StreamedFeatures):
        block_mib = block_bytes(config.trainer, train_items.shape[1]) / 2**20
        logger.info("streaming %d training items from %s: %d blocks of %.0f MiB of batches in "
                    "memory at most", len(train_items), train_items.path, BLOCKS_IN_MEMORY,
                    block_mib)
    with strategy.scope():  # several replicas: the model's variables are mirrored on each
        model = SGH.from_training_data(config.model, train_items, seed=config.trainer.seed)
    trainer = Trainer(model, train_items, config.trainer, strategy)
    with contextlib.ExitStack() as stack:
        selection = None
        if validation is not None:
            best_weights = tf.train.Checkpoint(model=model)
            if run_directory is not None:
                best = run_directory.checkpoint_manager(best_weights, best=True)
            else:  # in memory: the best weights wait in a directory that goes with the fit
                scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="sgh-best-"))
                best = tf.train.CheckpointManager(best_weights, scratch, max_to_keep=1)
            selection = ModelSelection(
                model, validation, config.validation.patience, best,
                weights_of_step=run_directory.weights_of_step if run_directory else None)
        checkpoint = trainer.checkpoint(**({"selection": selection.state} if selection else {}))
        checkpoints, resumed_step = None, None
        if run_directory is not None:
            checkpoints = run_directory.checkpoint_manager(checkpoint)
            # The newest checkpoint that reads back whole (a damaged one is skipped, warned).
            resumed_from = run_directory.resume_checkpoint(checkpoints)
            if resumed_from:
                checkpoint.restore(resumed_from).assert_consumed()
                resumed_step = int(trainer.step.numpy())
                logger.info("resuming from step %d (%s)", resumed_step, resumed_from)
                if selection is not None:  # now, not after the whole run: the best weights
                    selection.require_best_weights()
            stack.enter_context(run_directory.summary_writer())
            signals = stack.enter_context(stop_on_signals())
        else:
            signals = []  # the Python API: Ctrl-C raises KeyboardInterrupt, as anywhere

        validating = (None if selection is None else
                      ValidationPoints(selection, config.validation.every, config.trainer.steps))
        console = ConsoleProgress(config.trainer.steps, int(trainer.step.numpy()), validating)
        after_each_call = [TrainingScalars(), *([validating] if validating else []), console]
        periodic = None
        if checkpoints is not None:
            periodic = PeriodicCheckpoints(checkpoints, config.trainer.checkpoint_every)
            after_each_call.append(periodic)
        logs = trainer.fit(lambda log: [step(log) for step in after_each_call],
                           stop_requested=lambda: bool(signals) or (
                               selection is not None and selection.should_stop()))
        train_seconds = time.perf_counter() - console.started
        step = int(trainer.step.numpy())
        if checkpoints is not None:
            # Unless this step's checkpoint is known intact: resumed from, or saved just now. A
            # damaged one listed for this step is replaced.
            if step not in (periodic.last_saved, resumed_step):
                checkpoints.save(checkpoint_number=step)
            if signals or trainer.stopped_by_another_worker:  # a Ctrl-C on any worker stops all
                # The command line says how to resume (a run's or a sweep's directory).
                raise TrainingInterrupted(
                    f"interrupted at step {step} of {config.trainer.steps}; checkpoint saved")
        fields = {
            "objective": config.model.objective,
            "estimator": config.model.gradient_estimator,
            "noise": config.model.noise,
            "steps": step,
            # 0: the run had finished its steps before this process (its training record is
            # the earlier process's, sgh.pipeline keeps it).
            "steps_this_process": step - (resumed_step or 0),
            "batch_size": config.trainer.batch_size,
            "replicas": trainer.replicas,  # devices the global batch was split over
            "n_train": len(train_items),
            "train_seconds": train_seconds,  # this process's training (a resumed run: its part)
            "ms_per_step": median_ms_per_step(logs),
            "ms_per_step_convention": ("median over compiled calls of wall time / steps, first "
                                       "call (compilation) excluded"),
            "final_loss_terms_per_item": logs[-1].terms if logs else {},
        }
        if selection is not None:
            restored = selection.restore_best()  # the best validated weights make the codes
            fields.update(_selection_fields(selection, restored, validating.seconds, step,
                                            config, run_directory is not None))
    return TrainedSGH(model, fields)


def _selection_fields(selection: ModelSelection, restored: bool, validation_seconds: float,
                      step: int, config: Config, on_disk: bool) -> dict:
    """What metrics.json reports about the selection (`restored`: best weights were loaded)."""
    metric = selection.validation.metric
    stopped_early = selection.should_stop() and step < config.trainer.steps
    if stopped_early:
        logger.info("stopped early at step %d: no better validation %s in %d validation points",
                    step, metric, config.validation.patience)
    if restored:
        logger.info("final codes from step %d (best validation %s %.4f)", selection.best_step,
                    metric, selection.best_score)
    kept = "checkpoints/best" if on_disk else "kept in memory during the fit"
    return {
        "validation_metric": metric,
        "validation_convention": selection.validation.convention,
        "best_step": selection.best_step if restored else step,
        f"best_validation_{metric}": selection.best_score if restored else float("nan"),
        "stopped_early": stopped_early,
        "validation_seconds": validation_seconds,  # this process's part
        "codes_from": (f"the best validated weights ({kept})" if restored
                       else "the last step (no validation point reached)"),
    }
