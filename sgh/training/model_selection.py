"""Keeping the best weights by validation score, and stopping early when they stop improving.

The selection's state rides in the training checkpoint, so a resumed run decides exactly as an
uninterrupted one. The best weights, which give the final codes, are a one-slot checkpoint
(`<run>/checkpoints/best/`; `RunDirectory.weights_of_step` when it is damaged).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tensorflow as tf

from sgh.model.encoding import encode_bit_matrix, encode_packed
from sgh.model.sgh_model import SGH
from sgh.training.holdout import ValidationSet


class SelectionState(tf.Module):
    """What an exact resume needs to continue the selection (checkpointed with the trainer)."""

    def __init__(self):
        super().__init__(name="model_selection")
        self.best_score = tf.Variable(-np.inf, dtype=tf.float64, trainable=False)
        self.best_step = tf.Variable(-1, dtype=tf.int64, trainable=False)
        self.points_since_best = tf.Variable(0, dtype=tf.int64, trainable=False)


@dataclass
class ValidationPoint:
    step: int
    score: float
    improved: bool
    database_bits: np.ndarray  # (n, bits) 0/1 codes of the validation database, for code health


class ModelSelection:
    """`best`: a one-slot checkpoint manager of the best weights; `weights_of_step`:
    `RunDirectory.weights_of_step` in a run directory, None in memory (`best`, unverified)."""

    def __init__(self, model: SGH, validation: ValidationSet, patience: int,
                 best: tf.train.CheckpointManager,
                 weights_of_step: Callable[[int], str] | None = None):
        self.model, self.validation, self.patience = model, validation, patience
        self.state = SelectionState()
        self._best, self._weights_of_step = best, weights_of_step

    def evaluate(self, step: int) -> ValidationPoint:
        """Encode the validation split with the current weights, score it, keep the best."""
        database_bits = encode_bit_matrix(self.model, self.validation.database)
        encoder = self.model.encoder_score() if self.validation.by_encoder else None
        score = self.validation.score(encode_packed(self.model, self.validation.query),
                                      np.packbits(database_bits, axis=1), self.model.bits, encoder)
        # A NaN score (e.g. no scorable query) never counts as an improvement.
        improved = bool(score > float(self.state.best_score.numpy()))
        if improved:
            self.state.best_score.assign(score)
            self.state.best_step.assign(step)
            self.state.points_since_best.assign(0)
            self._best.save(checkpoint_number=step)
        else:
            self.state.points_since_best.assign_add(1)
        return ValidationPoint(step, score, improved, database_bits)

    @property
    def best_score(self) -> float:
        return float(self.state.best_score.numpy())

    @property
    def best_step(self) -> int:
        return int(self.state.best_step.numpy())

    def should_stop(self) -> bool:
        """Whether `patience` (> 0) validation points in a row were no better than the best."""
        return self.patience > 0 and int(self.state.points_since_best.numpy()) >= self.patience

    def require_best_weights(self) -> None:
        """On resume: fail now, not after training, if the best weights so far are lost (unless
        `best` holds a later step's, the run having stopped before its training checkpoint)."""
        saved = self._best.latest_checkpoint
        if self._weights_of_step is None or self.best_step < 0 or (
                saved is not None and int(saved.rsplit("-", 1)[1]) > self.best_step):
            return
        self._weights_of_step(self.best_step)

    def restore_best(self) -> bool:
        """Load the best weights into the model; False if no validation point was reached."""
        if self.best_step < 0:
            return False
        source = (self._best.latest_checkpoint if self._weights_of_step is None
                  else self._weights_of_step(self.best_step))
        if source is None:
            return False
        # A training checkpoint holds the model too, beside the optimizer and step: partial.
        tf.train.Checkpoint(model=self.model).restore(source).expect_partial() \
            .assert_existing_objects_matched()
        if Path(source).parent != Path(self._best.directory):
            self._best.save(checkpoint_number=self.best_step)  # checkpoints/best/ whole again
        return True
