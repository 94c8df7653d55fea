"""Training SGH inside a run directory: resume, progress, checkpoints, interruption.

`train_sgh` is what `sgh.train.run` calls for `model=sgh`; it returns the encoded split and the
SGH-specific fields of `metrics.json`.
"""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf

from sgh import tensorboard_views as views
from sgh.artifacts import RunDirectory
from sgh.config import Config
from sgh.data import RetrievalSplit
from sgh.data.streamed_features import StreamedFeatures
from sgh.distribute import strategy_for
from sgh.errors import TrainingInterrupted, UserInputError
from sgh.export import ENCODER_DIRNAME, export_encoder
from sgh.input_pipeline import BLOCKS_IN_MEMORY, block_bytes
from sgh.model import SGH, encode_packed
from sgh.model_selection import ModelSelection
from sgh.trainer import ChunkLog, Trainer, median_ms_per_step
from sgh.validation import carve


@dataclass
class EncodedSplit:
    """A trained method's codes for the split, and what it reports about its training."""

    database: np.ndarray  # packed uint8
    query: np.ndarray
    fields: dict = field(default_factory=dict)


@contextmanager
def _stop_on_signals():
    """Turn SIGINT/SIGTERM into a request to stop after the current compiled call."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received  # signals can only be handled in the main thread
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda number, _frame: received.append(number))
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def train_sgh(config: Config, split: RetrievalSplit, run_directory: RunDirectory) -> EncodedSplit:
    """Train (or resume) SGH as configured, checkpointing into the run directory; encode.

    With validation on (`validation.every > 0`), training runs on the training set minus the
    held-out validation queries, and the final codes come from the best validated weights.
    """
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
    strategy = strategy_for(config.trainer)  # created by sgh.train.run before TF started
    if isinstance(train_items, StreamedFeatures):
        block_mib = block_bytes(config.trainer, train_items.shape[1]) / 2**20
        print(f"[sgh] streaming {len(train_items)} training items from {train_items.path}: "
              f"{BLOCKS_IN_MEMORY} blocks of {block_mib:.0f} MiB of batches in memory at most",
              flush=True)
    with strategy.scope():  # several replicas: the model's variables are mirrored on each
        model = SGH.from_training_data(config.model, train_items, seed=config.trainer.seed)
    trainer = Trainer(model, train_items, config.trainer, strategy)
    selection = None
    if validation is not None:
        selection = ModelSelection(model, validation, config.validation.patience,
                                   run_directory.path / "checkpoints" / "best")
    checkpoint = trainer.checkpoint(**({"selection": selection.state} if selection else {}))
    checkpoints = run_directory.checkpoint_manager(checkpoint)
    if checkpoints.latest_checkpoint:
        checkpoint.restore(checkpoints.latest_checkpoint).assert_consumed()
        print(f"[sgh] resuming from step {int(trainer.step.numpy())} "
              f"({checkpoints.latest_checkpoint})", flush=True)

    progress = _Progress(config, checkpoints, selection, int(trainer.step.numpy()))
    with run_directory.summary_writer().as_default(), _stop_on_signals() as signals:
        logs = trainer.fit(progress.on_chunk, stop_requested=lambda: bool(signals) or (
            selection is not None and selection.should_stop()))
    train_seconds = time.perf_counter() - progress.started
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
        "replicas": trainer.replicas,  # devices the global batch was split over (sgh.distribute)
        "n_train": len(train_items),
        "train_seconds": train_seconds,  # this process's training (a resumed run: its part)
        "ms_per_step": median_ms_per_step(logs),
        "ms_per_step_convention": ("median over compiled calls of wall time / steps, first "
                                   "call (compilation) excluded"),
        "final_loss_terms_per_item": logs[-1].terms if logs else {},
    }
    if selection is not None:
        restored = selection.restore_best()  # the best validated weights make the final codes
        fields.update(_selection_fields(selection, restored, progress, step, config))
    # The encoder that made the final codes, for sgh-encode and TF Serving (sgh/export.py).
    export_encoder(model, run_directory.path / ENCODER_DIRNAME)
    return EncodedSplit(database=encode_packed(model, split.database),
                        query=encode_packed(model, split.query), fields=fields)


def _selection_fields(selection: ModelSelection, restored: bool, progress: _Progress,
                      step: int, config: Config) -> dict:
    """What metrics.json reports about the selection (`restored`: best weights were loaded)."""
    metric = selection.validation.metric
    stopped_early = selection.should_stop() and step < config.trainer.steps
    if stopped_early:
        print(f"[sgh] stopped early at step {step}: no better validation {metric} in "
              f"{config.validation.patience} validation points", flush=True)
    if restored:
        print(f"[sgh] final codes from step {selection.best_step} (best validation {metric} "
              f"{selection.best_score:.4f})", flush=True)
    return {
        "validation_metric": metric,
        "validation_convention": selection.validation.convention,
        "best_step": selection.best_step if restored else step,
        f"best_validation_{metric}": selection.best_score if restored else float("nan"),
        "stopped_early": stopped_early,
        "validation_seconds": progress.validation_seconds,  # this process's part
        "codes_from": ("the best validated weights (checkpoints/best)" if restored
                       else "the last step (no validation point reached)"),
    }


# Validation-database items whose logits and reconstructions TensorBoard shows.
VIEW_SAMPLE = 2000


class _Progress:
    """Per compiled call: TensorBoard scalars, validation, checkpoints, a console line.

    The console prints about every tenth of the run, with the latest validation score,
    steps/s and an ETA that includes the time validation takes.
    """

    def __init__(self, config: Config, checkpoints: tf.train.CheckpointManager,
                 selection: ModelSelection | None, first_step: int):
        self.config, self.checkpoints, self.selection = config, checkpoints, selection
        self.total = config.trainer.steps
        self.print_every = max(self.total // 10, 1)
        self.next_print = (first_step // self.print_every + 1) * self.print_every
        self.first_step = first_step
        self.started = time.perf_counter()
        self.validation_seconds = 0.0
        self.last_score: str = ""


    def on_chunk(self, log: ChunkLog) -> None:
        for name, value in log.terms.items():
            tf.summary.scalar(f"loss/{name}", value, step=log.step)
        tf.summary.scalar("train/learning_rate", log.learning_rate, step=log.step)
        tf.summary.scalar("train/ms_per_step", log.ms_per_step, step=log.step)
        tf.summary.scalar("train/steps_per_second", 1e3 / log.ms_per_step, step=log.step)
        views.write_gradient_norms(log.gradient_norms, log.step)
        if self.selection is not None and (
                _crossed_multiple(log, self.config.validation.every) or log.step == self.total):
            self._validate(log.step)
        if log.step >= self.next_print or log.step == self.total:
            self.next_print = (log.step // self.print_every + 1) * self.print_every
            self._print(log)
        if _crossed_multiple(log, self.config.trainer.checkpoint_every):
            self.checkpoints.save(checkpoint_number=log.step)

    def _validate(self, step: int) -> None:
        """Score the current weights, and show their codes and outputs (all in its time)."""
        started = time.perf_counter()
        point = self.selection.evaluate(step)
        metric = self.selection.validation.metric
        tf.summary.scalar(f"validation/{metric}", point.score, step=step)
        tf.summary.scalar(f"validation/best_{metric}", self.selection.best_score, step=step)
        views.write_code_health(point.database_bits, step)
        sample = self.selection.validation.database[:VIEW_SAMPLE]
        views.write_encoder_histograms(self.selection.model, sample, step)
        views.write_images(self.selection.model, sample, step)
        seconds = time.perf_counter() - started
        self.validation_seconds += seconds
        tf.summary.scalar("validation/seconds", seconds, step=step)
        self.last_score = (f"  val {metric} {point.score:.4f}"
                           + (" (best)" if point.improved else ""))

    def _print(self, log: ChunkLog) -> None:
        terms = "  ".join(f"{name} {value:.4g}" for name, value in log.terms.items())
        elapsed = time.perf_counter() - self.started
        done = log.step - self.first_step
        eta = elapsed / done * (self.total - log.step) if done else float("nan")
        print(f"[sgh] step {log.step:>6}/{self.total}  {terms}  lr {log.learning_rate:.3g}"
              f"{self.last_score}  {1e3 / log.ms_per_step:.0f} steps/s  "
              f"ETA {_duration(eta)}", flush=True)


def _crossed_multiple(log: ChunkLog, every: int) -> bool:
    """Whether the steps of this compiled call reached a multiple of `every`."""
    return log.step % every < log.steps


def _duration(seconds: float) -> str:
    if not np.isfinite(seconds):
        return "?"
    minutes, seconds = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"
