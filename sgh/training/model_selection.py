"""Keeping the best weights by validation score, and stopping early when they stop improving.

The selection's state (best score, its step, validation points since it) lives in TF variables
that ride in the training checkpoint, so a resumed run makes exactly the decisions an
uninterrupted one makes. The best weights are a separate one-slot checkpoint,
`<run>/checkpoints/best/`; they give the run's final codes.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    """`best`: a one-slot manager of `tf.train.Checkpoint(model=model)` for the best weights
    (`RunDirectory.checkpoint_manager(..., best=True)`)."""

    def __init__(self, model: SGH, validation: ValidationSet, patience: int,
                 best: tf.train.CheckpointManager):
        self.model, self.validation, self.patience = model, validation, patience
        self.state = SelectionState()
        self._best = best

    def evaluate(self, step: int) -> ValidationPoint:
        """Encode the validation split with the current weights, score it, keep the best."""
        database_bits = encode_bit_matrix(self.model, self.validation.database)
        score = self.validation.score(encode_packed(self.model, self.validation.query),
                                      np.packbits(database_bits, axis=1), self.model.bits)
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
        return self.patience > 0 and int(self.state.points_since_best.numpy()) >= self.patience

    def restore_best(self) -> bool:
        """Load the best weights into the model; False if no validation point was reached."""
        if self.best_step < 0 or self._best.latest_checkpoint is None:
            return False
        tf.train.Checkpoint(model=self.model).restore(
            self._best.latest_checkpoint).assert_existing_objects_matched()
        return True
