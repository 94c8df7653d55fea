"""What happens after each compiled call of training, as small steps that each do one job:
TensorBoard's training scalars, validation points, periodic checkpoints and the console's lines.
`sgh.training.train_sgh` calls them in this order after every call; each is testable alone.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import tensorflow as tf

from sgh.artifacts import tensorboard_events as events
from sgh.reports import tensorboard_views as views
from sgh.training.loop import ChunkLog
from sgh.training.model_selection import ModelSelection

logger = logging.getLogger(__name__)

# Validation-database items whose logits and reconstructions TensorBoard shows.
VIEW_SAMPLE = 2000


def crossed_multiple(log: ChunkLog, every: int) -> bool:
    """Whether the steps of this compiled call reached a multiple of `every`."""
    return log.step % every < log.steps


class TrainingScalars:
    """Loss terms, learning rate, step time and gradient norms to TensorBoard."""

    def __call__(self, log: ChunkLog) -> None:
        for name, value in log.terms.items():
            events.scalar(f"loss/{name}", value, step=log.step)
        events.scalar("train/learning_rate", log.learning_rate, step=log.step)
        events.scalar("train/ms_per_step", log.ms_per_step, step=log.step)
        events.scalar("train/steps_per_second", 1e3 / log.ms_per_step, step=log.step)
        views.write_gradient_norms(log.gradient_norms, log.step)


class ValidationPoints:
    """Scores the weights at every `every` steps and at the last, in `seconds` all."""

    def __init__(self, selection: ModelSelection, every: int, total_steps: int):
        self.selection, self.every, self.total_steps = selection, every, total_steps
        self.seconds = 0.0
        self.last_score = ""  # for the console: "val recall10@100 0.7012 (best)"

    def __call__(self, log: ChunkLog) -> None:
        if not (crossed_multiple(log, self.every) or log.step == self.total_steps):
            return
        started = time.perf_counter()
        point = self.selection.evaluate(log.step)
        metric = self.selection.validation.metric
        events.scalar(f"validation/{metric}", point.score, step=log.step)
        events.scalar(f"validation/best_{metric}", self.selection.best_score, step=log.step)
        views.write_code_health(point.database_bits, log.step)
        sample = self.selection.validation.database[:VIEW_SAMPLE]
        views.write_encoder_histograms(self.selection.model, sample, log.step)
        views.write_byte_decoder_health(self.selection.model, sample, log.step)
        views.write_images(self.selection.model, sample, log.step)
        seconds = time.perf_counter() - started
        self.seconds += seconds
        events.scalar("validation/seconds", seconds, step=log.step)
        self.last_score = (f"  val {metric} {point.score:.4f}"
                           + (" (best)" if point.improved else ""))


class PeriodicCheckpoints:
    """`last_saved`: the step of the latest checkpoint saved here (None before the first)."""

    def __init__(self, checkpoints: tf.train.CheckpointManager, every: int):
        self.checkpoints, self.every = checkpoints, every
        self.last_saved: int | None = None

    def __call__(self, log: ChunkLog) -> None:
        if crossed_multiple(log, self.every):
            self.checkpoints.save(checkpoint_number=log.step)
            self.last_saved = log.step


class ConsoleProgress:
    """One line about every tenth of the run, and at its last step (early stopping's too)."""

    def __init__(self, total_steps: int, first_step: int,
                 validation: ValidationPoints | None = None):
        self.total, self.first_step, self.validation = total_steps, first_step, validation
        self.every = max(total_steps // 10, 1)
        self.next_line = (first_step // self.every + 1) * self.every
        self.started = time.perf_counter()

    def __call__(self, log: ChunkLog) -> None:
        # Called after ValidationPoints, so a point that exhausts the patience is already counted.
        stopping = self.validation is not None and self.validation.selection.should_stop()
        if log.step < self.next_line and log.step != self.total and not stopping:
            return
        self.next_line = (log.step // self.every + 1) * self.every
        terms = "  ".join(f"{name} {value:.4g}" for name, value in log.terms.items())
        elapsed = time.perf_counter() - self.started
        done = log.step - self.first_step
        remaining = 0 if stopping else self.total - log.step
        eta = elapsed / done * remaining if done else float("nan")
        score = self.validation.last_score if self.validation is not None else ""
        logger.info("step %6d/%d  %s  lr %.3g%s  %.0f steps/s  ETA %s", log.step, self.total,
                    terms, log.learning_rate, score, 1e3 / log.ms_per_step, duration(eta))


def duration(seconds: float) -> str:
    """`m:ss` or `h:mm:ss`; `?` when unknown."""
    if not np.isfinite(seconds):
        return "?"
    minutes, seconds = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"
