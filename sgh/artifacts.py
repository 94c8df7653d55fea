"""The run directory: the only module that decides what a run writes, where, and how.

    <run_dir>/config.yaml     the resolved configuration of this run
    <run_dir>/tensorboard/    TensorBoard event files (loss terms, learning rate, step time)
    <run_dir>/checkpoints/    TF checkpoints: model (with its normaliser), optimizer, step
    <run_dir>/checkpoints/best/  the best validated weights (they make codes.npz)
    <run_dir>/encoder/        the trained encoder as a SavedModel (sgh/export.py)
    <run_dir>/codes.npz       packed codes + relevance data (contract in the README)
    <run_dir>/metrics.json    one flat JSON object of results and their conventions

Files are written to a temporary name in the same directory and renamed, so a crash never
leaves a half-written file that looks complete.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from omegaconf import OmegaConf

if TYPE_CHECKING:
    import tensorflow as tf

CHECKPOINTS_KEPT = 2


@contextmanager
def atomic_path(path: Path, suffix: str = ""):
    """Yield a temporary path next to `path`; rename it onto `path` if the block succeeds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + suffix,
                                         dir=path.parent)
    os.close(handle)
    # mkstemp creates the file private (0600); results are ordinary files, so honour the umask.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temporary, 0o666 & ~umask)
    try:
        yield Path(temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def _json_ready(value):
    """Plain JSON: numpy scalars to Python, NaN/Inf to null (JSON has no NaN)."""
    if isinstance(value, dict):
        return {key: _json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(item) for item in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: Path, payload: dict) -> None:
    """One JSON object, written atomically (also used by sgh-eval for its out= file)."""
    with atomic_path(Path(path)) as temporary:
        temporary.write_text(json.dumps(_json_ready(payload), indent=2) + "\n")


class RunDirectory:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    @property
    def codes(self) -> Path:
        return self.path / "codes.npz"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.json"

    def previous_config(self) -> dict | None:
        """The configuration a run in this directory was started with, if any."""
        path = self.path / "config.yaml"
        return OmegaConf.to_container(OmegaConf.load(path)) if path.is_file() else None

    def write_config(self, config) -> None:
        with atomic_path(self.path / "config.yaml") as temporary:
            temporary.write_text(OmegaConf.to_yaml(OmegaConf.structured(config)))

    def write_metrics(self, metrics: dict) -> None:
        write_json(self.metrics, metrics)

    def write_codes(self, **arrays: np.ndarray) -> None:
        # np.savez appends ".npz" to names without it, so the temporary name must end in it.
        with atomic_path(self.codes, suffix=".npz") as temporary:
            np.savez(temporary, **arrays)

    # TensorFlow is imported where it is needed, so that sgh-eval (numpy only) starts fast.
    def summary_writer(self):
        import tensorflow as tf

        return tf.summary.create_file_writer(str(self.path / "tensorboard"))

    def write_final_summary(self, metrics: dict) -> None:
        """The final retrieval numbers as TensorBoard scalars (`eval/...`), for every method."""
        import tensorflow as tf

        step = int(metrics.get("steps", 0))
        with tf.summary.create_file_writer(str(self.path / "tensorboard")).as_default():
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and (
                        key.startswith(("map", "recall", "precision")) or key in (
                        "distinct_database_codes", "dead_bits", "mean_abs_bit_correlation")):
                    tf.summary.scalar(f"eval/{key}", value, step=step)

    def checkpoint_manager(self, checkpoint: tf.train.Checkpoint) -> tf.train.CheckpointManager:
        import tensorflow as tf  # noqa: F811  (the runtime import of the type-checking name)

        # TF writes checkpoint data files first and the index ("checkpoint") last, so a
        # checkpoint is only listed once it is complete.
        return tf.train.CheckpointManager(checkpoint, str(self.path / "checkpoints"),
                                          max_to_keep=CHECKPOINTS_KEPT)
