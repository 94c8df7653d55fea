"""Training checkpoints whose state file never names a checkpoint that is gone.

TensorFlow's `CheckpointManager.save` deletes the checkpoints beyond `max_to_keep` before it
writes the state file without them, so a process killed meanwhile leaves a state file naming
missing files; `StateFirstCheckpointManager` deletes them only after that write.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import tensorflow as tf

from sgh.artifacts.checkpoint_integrity import checkpoint_files


class StateFirstCheckpointManager(tf.train.CheckpointManager):
    """`tf.train.CheckpointManager` without `keep_checkpoint_every_n_hours`. `before_save` runs
    before each save: the run's check that its directory, which TensorFlow would silently make
    again, is still there."""

    def __init__(self, *args, before_save: Callable[[], None] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._superseded: list[str] = []
        self._before_save = before_save

    def _sweep(self) -> None:  # called by save() between its two writes of the state file
        while self._max_to_keep and len(self._maybe_delete) > self._max_to_keep:
            prefix, _ = self._maybe_delete.popitem(last=False)
            self._superseded.append(prefix)

    def save(self, *args, **kwargs):
        if self._before_save is not None:
            self._before_save()
        path = super().save(*args, **kwargs)
        while self._superseded:
            self._delete_files(self._superseded.pop(0))
        return path

    @staticmethod
    def _delete_files(prefix: str) -> None:
        for path in checkpoint_files(Path(prefix)):
            path.unlink(missing_ok=True)
