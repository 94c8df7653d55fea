"""Training SGH inside a run directory: resume, progress, checkpoints, interruption, export.

`train_sgh` is what `sgh.methods` calls for `model=sgh`; it returns the encoded split and the
SGH-specific fields of `metrics.json`.
"""

from __future__ import annotations

import logging
import time

import tensorflow as tf

from sgh.artifacts.run_directory import RunDirectory
from sgh.config import Config
from sgh.data import RetrievalSplit
from sgh.data.streamed_features import StreamedFeatures
from sgh.errors import TrainingInterrupted, UserInputError
from sgh.methods import EncodedSplit
from sgh.model.encoding import encode_packed
from sgh.model.export import export_encoder
from sgh.model.sgh_model import SGH
from sgh.training.batches import BLOCKS_IN_MEMORY, block_bytes
from sgh.training.holdout import carve
from sgh.training.loop import Trainer, median_ms_per_step
from sgh.training.model_selection import ModelSelection
from sgh.training.progress import (
    ConsoleProgress,
    PeriodicCheckpoints,
    TrainingScalars,
    ValidationPoints,
)
from sgh.training.signals import stop_on_signals

logger = logging.getLogger(__name__)


def train_sgh(config: Config, split: RetrievalSplit, run_directory: RunDirectory,
              strategy: tf.distribute.Strategy | None = None) -> EncodedSplit:
    """Train (or resume) SGH as configured, checkpointing into the run directory; encode.

    `strategy` is the one `sgh.pipeline.run` created before TensorFlow started (None: the
    default, one device). With validation on (`validation.every > 0`), training runs on the
    training set minus the held-out validation queries, and the final codes come from the best
    validated weights.
    """
    strategy = strategy if strategy is not None else tf.distribute.get_strategy()
    train_items, validation = split.train, None
    if config.validation.every > 0:
        train_items, validation = carve(split, config.validation, config.eval.recall_k)
    if config.trainer.batch_size > len(train_items):
        raise UserInputError(
            f"trainer.batch_size={config.trainer.batch_size} is larger than the training set "
            f"({len(train_items)} items of {split.name!r}"
            + (f" after holding out {len(validation.query)} for validation" if validation else "")
            + f"); accepted: 1..{len(train_items)}")
    # A sweep runs its jobs in one process: start each from a clean TF state and its own seed.
    tf.keras.backend.clear_session()
    tf.random.set_seed(config.trainer.seed)
    if isinstance(train_items, StreamedFeatures):
        block_mib = block_bytes(config.trainer, train_items.shape[1]) / 2**20
        logger.info("streaming %d training items from %s: %d blocks of %.0f MiB of batches in "
                    "memory at most", len(train_items), train_items.path, BLOCKS_IN_MEMORY,
                    block_mib)
    with strategy.scope():  # several replicas: the model's variables are mirrored on each
        model = SGH.from_training_data(config.model, train_items, seed=config.trainer.seed)
    trainer = Trainer(model, train_items, config.trainer, strategy)
    selection = None
    if validation is not None:
        best = run_directory.checkpoint_manager(tf.train.Checkpoint(model=model), best=True)
        selection = ModelSelection(model, validation, config.validation.patience, best)
    checkpoint = trainer.checkpoint(**({"selection": selection.state} if selection else {}))
    checkpoints = run_directory.checkpoint_manager(checkpoint)
    if checkpoints.latest_checkpoint:
        checkpoint.restore(checkpoints.latest_checkpoint).assert_consumed()
        logger.info("resuming from step %d (%s)", int(trainer.step.numpy()),
                    checkpoints.latest_checkpoint)

    first_step = int(trainer.step.numpy())
    validating = (None if selection is None else
                  ValidationPoints(selection, config.validation.every, config.trainer.steps))
    console = ConsoleProgress(config.trainer.steps, first_step, validating)
    after_each_call = [TrainingScalars(), *([validating] if validating else []),
                       console, PeriodicCheckpoints(checkpoints, config.trainer.checkpoint_every)]
    with run_directory.summary_writer().as_default(), stop_on_signals() as signals:
        logs = trainer.fit(lambda log: [step(log) for step in after_each_call],
                           stop_requested=lambda: bool(signals) or (
                               selection is not None and selection.should_stop()))
    train_seconds = time.perf_counter() - console.started
    step = int(trainer.step.numpy())
    if checkpoints.latest_checkpoint is None or not checkpoints.latest_checkpoint.endswith(
            f"-{step}"):
        checkpoints.save(checkpoint_number=step)
    if signals or trainer.stopped_by_another_worker:  # a Ctrl-C on any worker stops all
        raise TrainingInterrupted(
            f"interrupted at step {step} of {config.trainer.steps}; checkpoint saved. Run the same "
            f"command with hydra.run.dir={run_directory.path} to resume")
    fields = {
        "objective": config.model.objective,
        "estimator": config.model.estimator,
        "noise": config.model.noise,
        "steps": step,
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
        restored = selection.restore_best()  # the best validated weights make the final codes
        fields.update(_selection_fields(selection, restored, validating.seconds, step, config))
    # The encoder that made the final codes, for sgh-encode and TF Serving (sgh.model.export).
    export_encoder(model, run_directory.encoder)
    return EncodedSplit(database=encode_packed(model, split.database),
                        query=encode_packed(model, split.query), fields=fields)


def _selection_fields(selection: ModelSelection, restored: bool, validation_seconds: float,
                      step: int, config: Config) -> dict:
    """What metrics.json reports about the selection (`restored`: best weights were loaded)."""
    metric = selection.validation.metric
    stopped_early = selection.should_stop() and step < config.trainer.steps
    if stopped_early:
        logger.info("stopped early at step %d: no better validation %s in %d validation points",
                    step, metric, config.validation.patience)
    if restored:
        logger.info("final codes from step %d (best validation %s %.4f)", selection.best_step,
                    metric, selection.best_score)
    return {
        "validation_metric": metric,
        "validation_convention": selection.validation.convention,
        "best_step": selection.best_step if restored else step,
        f"best_validation_{metric}": selection.best_score if restored else float("nan"),
        "stopped_early": stopped_early,
        "validation_seconds": validation_seconds,  # this process's part
        "codes_from": ("the best validated weights (checkpoints/best)" if restored
                       else "the last step (no validation point reached)"),
    }
