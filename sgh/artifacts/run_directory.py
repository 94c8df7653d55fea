"""The run directory: the only module that knows what a run writes, and under which names.

    <run_dir>/config.yaml         the resolved configuration of this run
    <run_dir>/train.log           Hydra's log of the run: progress lines, results table, warnings
    <run_dir>/tensorboard/        TensorBoard event files (losses, rate, validation, code health)
    <run_dir>/checkpoints/        TF checkpoints: model (with its normaliser), optimizer, step
    <run_dir>/checkpoints/best/   the best validated weights (they make codes.npz)
    <run_dir>/encoder/            the trained encoder as a SavedModel (sgh.model.export)
    <run_dir>/codes.npz           packed codes + relevance data (sgh.artifacts.codes_file)
    <run_dir>/asymmetric.npz      the method's asymmetric score, if any (sgh.search.asymmetric)
    <run_dir>/metrics.json        one flat JSON object of results and their conventions
    <run_dir>/eval.json           `sgh-eval run=<run_dir>`: the codes re-scored

Every file is written atomically (`sgh.artifacts.atomic`): a crash never leaves a half-written
file that looks complete.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from omegaconf import OmegaConf

from sgh.artifacts.atomic import atomic_file, write_json
from sgh.artifacts.codes_file import write_codes
from sgh.errors import UserInputError

if TYPE_CHECKING:
    import tensorflow as tf

CHECKPOINTS_KEPT = 2
CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.json"
CODES_FILE = "codes.npz"
ASYMMETRIC_FILE = "asymmetric.npz"
EVAL_FILE = "eval.json"
LOG_FILE = "train.log"  # written by Hydra (configs/hydra/default.yaml names it after the job)
TENSORBOARD_DIR = "tensorboard"
CHECKPOINTS_DIR = "checkpoints"
BEST_DIR = "best"
ENCODER_DIR = "encoder"


class RunDirectory:
    """One run's directory. `RunDirectory(path)` creates it for writing; `RunDirectory.existing`
    opens a finished (or interrupted) one for reading, with one-line errors for anything else."""

    def __init__(self, path: str | os.PathLike, create: bool = True):
        self.path = Path(path)
        if create:
            self.path.mkdir(parents=True, exist_ok=True)

    @classmethod
    def existing(cls, path: str | os.PathLike, key: str = "run") -> RunDirectory:
        run = cls(path, create=False)
        if not (run.path / CONFIG_FILE).is_file():
            raise UserInputError(f"{key}={run.path}: no {CONFIG_FILE} there; expected an "
                                 "sgh-train run directory")
        return run

    # ---- names ------------------------------------------------------------------------------
    @property
    def config_file(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def codes(self) -> Path:
        return self.path / CODES_FILE

    @property
    def asymmetric_score(self) -> Path:
        return self.path / ASYMMETRIC_FILE

    @property
    def metrics(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def eval_file(self) -> Path:
        return self.path / EVAL_FILE

    @property
    def log_file(self) -> Path:
        return self.path / LOG_FILE

    @property
    def tensorboard(self) -> Path:
        return self.path / TENSORBOARD_DIR

    @property
    def checkpoints(self) -> Path:
        return self.path / CHECKPOINTS_DIR

    @property
    def best_checkpoints(self) -> Path:
        return self.checkpoints / BEST_DIR

    @property
    def encoder(self) -> Path:
        return self.path / ENCODER_DIR

    # ---- reading ----------------------------------------------------------------------------
    def previous_config(self) -> dict | None:
        """The configuration a run in this directory was started with, if any."""
        if not self.config_file.is_file():
            return None
        return OmegaConf.to_container(OmegaConf.load(self.config_file))

    def has_checkpoint(self) -> bool:
        # TF writes a checkpoint's data files first and its index ("checkpoint") last, so a
        # checkpoint is only listed once it is complete.
        return (self.checkpoints / "checkpoint").is_file()

    def model_section(self) -> dict:
        """The `model` section of the run's configuration."""
        return (OmegaConf.load(self.config_file).get("model") or {}) \
            if self.config_file.is_file() else {}

    def read_metrics(self) -> dict:
        if not self.metrics.is_file():
            raise UserInputError(f"run={self.path} has not finished (no {METRICS_FILE}); "
                                 "resume it with sgh-train first")
        return json.loads(self.metrics.read_text())

    # ---- writing ----------------------------------------------------------------------------
    def write_config(self, config) -> None:
        with atomic_file(self.config_file) as temporary:
            temporary.write_text(OmegaConf.to_yaml(OmegaConf.structured(config)))

    def write_metrics(self, metrics: dict) -> None:
        write_json(self.metrics, metrics)

    def write_codes(self, **arrays: np.ndarray) -> None:
        write_codes(self.codes, **arrays)

    def write_asymmetric_score(self, score) -> None:
        """`score.save(path)` (an `sgh.search.asymmetric.AsymmetricScore`), atomically."""
        with atomic_file(self.asymmetric_score, suffix=".npz") as temporary:
            score.save(temporary)

    # TensorFlow is imported where it is needed, so that sgh-eval (numpy only) starts fast.
    def summary_writer(self):
        import tensorflow as tf

        return tf.summary.create_file_writer(str(self.tensorboard))

    def checkpoint_manager(self, checkpoint: tf.train.Checkpoint,
                           best: bool = False) -> tf.train.CheckpointManager:
        """The run's training checkpoints (the last `CHECKPOINTS_KEPT`), or with `best` the
        one-slot checkpoint of the best validated weights."""
        import tensorflow as tf  # noqa: F811  (the runtime import of the type-checking name)

        directory = self.best_checkpoints if best else self.checkpoints
        return tf.train.CheckpointManager(checkpoint, str(directory),
                                          max_to_keep=1 if best else CHECKPOINTS_KEPT)

    def final_checkpoint(self) -> str:
        """The checkpoint whose weights gave the run's `codes.npz`.

        With validation, the best validated weights (`checkpoints/best/`, step `best_step` in
        metrics.json); otherwise, or when no validation point was reached, the last step's.
        """
        import tensorflow as tf

        metrics = self.read_metrics()
        best = tf.train.latest_checkpoint(str(self.best_checkpoints))
        if best is not None and "best_step" in metrics and best.endswith(
                f"-{metrics['best_step']}"):
            return best
        last = tf.train.latest_checkpoint(str(self.checkpoints))
        if last is None or not last.endswith(f"-{metrics.get('steps')}"):
            raise UserInputError(f"run={self.path}: no checkpoint of the run's final step "
                                 f"({metrics.get('steps')}) in {self.checkpoints}")
        return last
