"""The run directory: the only module that knows what a run writes, and under which names.

    <run_dir>/.sgh-run            the marker: an sgh run's directory (with the run's first file)
    <run_dir>/.lock               who writes the run now (sgh.artifacts.run_lock): pid, host, since
    <run_dir>/config.yaml         the resolved configuration of this run
    <run_dir>/inputs.json         its dataset files: path, size, mtime (sgh.artifacts.run_inputs)
    <run_dir>/train.log           Hydra's log of the run: progress lines, results table, warnings
    <run_dir>/tensorboard/        TensorBoard event files (losses, rate, validation, code health)
    <run_dir>/checkpoints/        TF checkpoints: model (with its normaliser), optimizer, step
    <run_dir>/checkpoints/best/   the best validated weights (they make codes.npz)
    <run_dir>/checkpoints/candidates/<name>/, <run_dir>/tensorboard/<name>/
                                  validation.candidates: each candidate recipe's (metrics.json)
    <run_dir>/encoder/            the trained encoder as a SavedModel (sgh.model.export)
    <run_dir>/codes.npz           packed codes + relevance data (sgh.artifacts.codes_file)
    <run_dir>/asymmetric.npz      the method's asymmetric score, if any (sgh.search.asymmetric)
    <run_dir>/metrics.json        one flat JSON object of results and their conventions
    <run_dir>/eval.json           `sgh-eval run=<run_dir>`: the codes re-scored

Every file is written atomically (`sgh.artifacts.atomic`); checkpoints are read back whole
before use (`resume_checkpoint`, `weights_of_step`); a run writes only into a directory that is
its own (`refuse_unless_ours`), and no other command's output replaces a run's file
(`sgh.artifacts.run_outputs`).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import yaml
from omegaconf import OmegaConf

from sgh.artifacts import tensorboard_events
from sgh.artifacts.atomic import atomic_file, remove_abandoned_staging, write_bytes, write_json
from sgh.artifacts.checkpoint_integrity import (
    CHECKPOINT_PREFIX,
    CHECKPOINT_STATE,
    checkpoint_files,
    first_intact,
    rebuild_unreadable_state,
)
from sgh.artifacts.codes_file import write_codes
from sgh.artifacts.run_inputs import InputFile, inputs_from_json
from sgh.errors import UserInputError, first_few

if TYPE_CHECKING:
    import tensorflow as tf

logger = logging.getLogger(__name__)

CHECKPOINTS_KEPT = 2
RUN_MARKER = ".sgh-run"
LOCK_FILE = ".lock"
CONFIG_FILE = "config.yaml"
INPUTS_FILE = "inputs.json"
METRICS_FILE = "metrics.json"
CODES_FILE = "codes.npz"
ASYMMETRIC_FILE = "asymmetric.npz"
EVAL_FILE = "eval.json"
LOG_FILE = "train.log"  # written by Hydra (configs/hydra/default.yaml names it after the job)
HYDRA_DIR = ".hydra"  # Hydra's record of the job: its configuration and overrides
TENSORBOARD_DIR = "tensorboard"
CHECKPOINTS_DIR = "checkpoints"
BEST_DIR = "best"
CANDIDATES_DIR = "candidates"  # under checkpoints/: one folder per candidate recipe
CHOSEN_KEY = "recipe_chosen"  # metrics.json: the candidate whose weights made the codes
ENCODER_DIR = "encoder"
# What a run writes atomically (`sgh.artifacts.atomic`; the lock: its write probe), and so may
# leave as `.<name>.*.tmp*` when killed. Not eval.json: sgh-eval writes it without owning the
# directory, and its next write of eval.json clears what a killed one left
# (`sgh.artifacts.atomic.staging`).
ATOMICALLY_WRITTEN = (CONFIG_FILE, INPUTS_FILE, CODES_FILE, METRICS_FILE, ASYMMETRIC_FILE,
                      ENCODER_DIR, LOCK_FILE, RUN_MARKER)
# Every name a run directory may hold: what a run, Hydra, sgh-export and sgh-eval put there.
RUN_ENTRIES = frozenset({RUN_MARKER, LOCK_FILE, HYDRA_DIR, CONFIG_FILE, INPUTS_FILE, LOG_FILE,
                         TENSORBOARD_DIR, CHECKPOINTS_DIR, ENCODER_DIR, CODES_FILE,
                         ASYMMETRIC_FILE, METRICS_FILE, EVAL_FILE})
# What a directory holds before its run's first write, so that it still counts as new: Hydra
# creates it and writes its record and log there before sgh-train's code runs, and the lock is
# taken next (`sgh.artifacts.run_lock`).
_BEFORE_THE_RUN = frozenset({HYDRA_DIR, LOG_FILE, LOCK_FILE})
_MARKER_TEXT = "an sgh-train run directory: sgh writes and replaces the files in it\n"
# TensorFlow's own temporaries in a checkpoint directory: a checkpoint's shards before they are
# merged into place (`ckpt-<step>_temp/`), and the state file before its rename.
_TF_TEMPORARY = re.compile(rf"^({CHECKPOINT_PREFIX}-\d+_temp|{CHECKPOINT_STATE}\.tmp[0-9a-f]+)$")
_START_OVER = "delete {checkpoints} to train the run again, or choose a new hydra.run.dir"


def _run_path(name: str) -> property:
    """The path of the run's file or folder `name` (a read-only property)."""
    return property(lambda run: run.path / name)


class RunDirectory:
    """One run's directory. `RunDirectory(path)` claims it for writing (`claim`);
    `RunDirectory.existing` opens a finished (or interrupted) one for reading, with one-line
    errors for anything else."""

    def __init__(self, path: str | os.PathLike, create: bool = True):
        self.path = Path(path)
        self._identity: tuple[int, int] | None = None  # (device, inode) once claimed
        self._candidate: str | None = None
        if create:
            self.claim()

    def candidate(self, name: str) -> RunDirectory:
        """The run, with candidate recipe `name`'s own checkpoint and TensorBoard folders."""
        part = copy.copy(self)
        part._candidate = name
        return part

    @classmethod
    def existing(cls, path: str | os.PathLike, key: str = "run") -> RunDirectory:
        run = cls(path, create=False)
        if not (run.path / CONFIG_FILE).is_file():
            raise UserInputError(f"{key}={run.path}: no {CONFIG_FILE} there; expected an "
                                 "sgh-train run directory")
        return run

    # ---- ownership --------------------------------------------------------------------------
    def claim(self) -> None:
        """Take the directory for this run to write: created if missing; the marker goes in
        with the run's first file (`_mark`).

        Raises:
            UserInputError: it is not the product's (`refuse_unless_ours`); nothing is written.
        """
        self.refuse_unless_ours()
        self.path.mkdir(parents=True, exist_ok=True)
        self._identity = _identity(self.path)

    def require_in_place(self) -> None:
        """UserInputError when the claimed directory is gone (deleted, or deleted and made
        again: another inode) while the run writes it: writing on would make a run that looks
        finished without its config, inputs, log and checkpoints. Every write of the run's
        files asks first (`_mark`, the checkpoints, TensorBoard's event file)."""
        if self._identity is None or _identity(self.path) == self._identity:
            return
        raise UserInputError(
            f"the run directory {self.path} was deleted while the run was writing it (its "
            "config.yaml, inputs.json, train.log and checkpoints with it); the run stops here "
            "rather than leave a run without them; run the command again to train it anew")

    def _mark(self) -> None:
        """Every writer of the run's files calls this first: once the run has a file, the
        marker is there, and later commands know the directory for a run's whatever it holds.
        Not in `claim`: a finished run opened again changes no file."""
        self.require_in_place()
        if not self.marker.is_file():
            write_bytes(self.marker, _MARKER_TEXT.encode())

    def refuse_unless_ours(self, key: str | None = None) -> None:
        """Refuse to write into a directory the product did not make: accepted are a path that
        does not exist, a new directory (empty, or holding only what Hydra and the lock write
        before a run starts) and one with the marker (`holds_a_run`). `key`: the setting that
        chose it, for the message (`hydra.run.dir`).

        Raises:
            UserInputError: one line naming the directory and what it holds; also for an
                unreadable config.yaml there (`previous_config`), which a resume compares.
        """
        named = f"{key}={self.path}" if key else str(self.path)
        if not self.path.is_dir():
            if self.path.exists():
                raise UserInputError(f"{named} is a file; accepted: a directory (a new one, or "
                                     "an earlier run's to resume it)")
            return
        self.previous_config()  # a damaged config.yaml: its own line, "restore it"
        names = _entries(self.path)
        if self.marker.is_file() or all(_named_in(name, _BEFORE_THE_RUN) for name in names):
            return
        held = sorted(name for name in names if not _named_in(name, _BEFORE_THE_RUN))
        raise UserInputError(
            f"{named} is not an sgh run directory (no {RUN_MARKER}; it holds "
            f"{first_few(held)}), and sgh never writes over what it did not write; accepted: a "
            "new or empty directory, or "
            "an sgh-train run directory (holding only a run's files) to resume it")

    def holds_nothing_of_a_run(self) -> bool:
        """Whether the directory holds only what comes before a run's first write (Hydra's
        record and log, the lock file), as a start refused before it wrote anything leaves it."""
        try:
            names = _entries(self.path)
        except OSError:
            return False
        return RUN_MARKER not in names and all(_named_in(name, _BEFORE_THE_RUN)
                                               for name in names)

    def holds_a_run(self) -> bool:
        """Whether the directory is a run: it carries the marker."""
        try:
            return self.marker.is_file()
        except OSError:  # an unreadable directory: not recognisably a run
            return False

    # ---- names ------------------------------------------------------------------------------
    marker = _run_path(RUN_MARKER)
    lock_file = _run_path(LOCK_FILE)
    config_file = _run_path(CONFIG_FILE)
    inputs_file = _run_path(INPUTS_FILE)
    codes = _run_path(CODES_FILE)
    asymmetric_score = _run_path(ASYMMETRIC_FILE)
    metrics = _run_path(METRICS_FILE)
    eval_file = _run_path(EVAL_FILE)
    log_file = _run_path(LOG_FILE)

    @property
    def tensorboard(self) -> Path:
        return self.path / TENSORBOARD_DIR / (self._candidate or "")

    @property
    def checkpoints(self) -> Path:
        if self._candidate:
            return self.path / CHECKPOINTS_DIR / CANDIDATES_DIR / self._candidate
        return self.path / CHECKPOINTS_DIR

    @property
    def best_checkpoints(self) -> Path:
        return self.checkpoints / BEST_DIR

    encoder = _run_path(ENCODER_DIR)

    # ---- reading ----------------------------------------------------------------------------
    def previous_config(self) -> dict | None:
        """The configuration a run in this directory was started with, if any."""
        if not self.config_file.is_file():
            return None
        try:  # a hand-edited or damaged file: one line naming it, not a YAML traceback
            loaded = OmegaConf.to_container(OmegaConf.load(self.config_file))
        except (yaml.YAMLError, UnicodeDecodeError) as error:
            reason = " ".join(str(error).split())
            raise UserInputError(f"{self.config_file}: not readable YAML ({reason}); it records "
                                 "the settings of the run in this directory: restore it, or "
                                 "choose another directory") from None
        if not isinstance(loaded, dict):
            raise UserInputError(f"{self.config_file}: holds a {type(loaded).__name__}, not the "
                                 "settings of a run (a mapping); restore it, or choose another "
                                 "directory")
        return loaded

    def previous_inputs(self) -> list[InputFile] | None:
        """The dataset files a run in this directory started on (`write_inputs`), if recorded;
        None for a run from before the record, or one whose record is unreadable (warned)."""
        if not self.inputs_file.is_file():
            return None
        try:
            return inputs_from_json(json.loads(self.inputs_file.read_text()))
        except ValueError as error:
            logger.warning("%s is unreadable (%s); the dataset files are not checked against "
                           "the run's start", self.inputs_file, error)
            return None

    def has_checkpoint(self) -> bool:
        # TF writes a checkpoint's data files first and its index ("checkpoint") last, so a
        # checkpoint is only listed once it is complete.
        return any((folder / CHECKPOINT_STATE).is_file() for folder in self._training_folders())

    def _training_folders(self) -> list[Path]:
        """The folders of training checkpoints: this one's, and each candidate recipe's."""
        candidates = self.path / CHECKPOINTS_DIR / CANDIDATES_DIR
        return [self.checkpoints, *(sorted(candidates.iterdir()) if candidates.is_dir() else [])]

    def model_section(self) -> dict:
        """The `model` section of the run's configuration, and a candidate's (`candidate`)."""
        if not self.config_file.is_file():
            return {}
        settings = OmegaConf.to_container(OmegaConf.load(self.config_file))
        candidates = (settings.get("validation") or {}).get("candidates") or {}
        return {**(settings.get("model") or {}),
                **((candidates.get(self._candidate) or {}).get("model") or {})}

    def chosen(self) -> RunDirectory:
        """The part of the finished run whose weights made its codes: with candidate recipes,
        the chosen one (metrics.json names it); otherwise the run itself."""
        chosen = self.read_metrics().get(CHOSEN_KEY)
        return self.candidate(chosen) if isinstance(chosen, str) else self

    def read_metrics(self) -> dict:
        if not self.metrics.is_file():
            if not self.holds_a_run():  # a data folder, say: not a run to resume
                raise UserInputError(f"run={self.path} is not an sgh-train run directory (no "
                                     f"{RUN_MARKER} or run files there); expected the "
                                     "directory of a finished run")
            raise UserInputError(f"run={self.path} has not finished (no {METRICS_FILE}); "
                                 "resume it with sgh-train first")
        return json.loads(self.metrics.read_text())

    @property
    def feature_conversion(self) -> str | None:
        """How the run's training features became float32 (metrics.json's
        `feature_conversion`, e.g. 'uint8 / 255'), which files of new features must match;
        None where nothing records it, and for an angular run, whose rows are unit-normalised
        before the model sees them (no scale to mismatch)."""
        try:
            recorded = json.loads(self.metrics.read_text())
            conversion, similarity = recorded.get("feature_conversion"), recorded.get("similarity")
        except (OSError, ValueError, AttributeError):
            return None
        return conversion if isinstance(conversion, str) and similarity != "angular" else None

    # ---- writing ----------------------------------------------------------------------------
    def write_config(self, config) -> None:
        self._mark()
        with atomic_file(self.config_file) as temporary:
            temporary.write_text(OmegaConf.to_yaml(OmegaConf.structured(config)))

    def write_inputs(self, inputs: list[InputFile]) -> None:
        self._mark()
        write_json(self.inputs_file, {"files": [item.as_json() for item in inputs]})

    def remove_stray_temporaries(self) -> list[Path]:
        """Delete what a killed writer left half-written, and return it: the atomic writes'
        temporaries of the run's own files, and TensorFlow's checkpoint temporaries. Only for
        the directory's owner (`sgh.artifacts.run_lock`): another writer's are in flight."""
        stray = [path for name in ATOMICALLY_WRITTEN
                 for path in remove_abandoned_staging(self.path / name)]
        for directory in [folder for training in self._training_folders()
                          for folder in (training, training / BEST_DIR) if folder.is_dir()]:
            temporaries = [path for path in directory.iterdir() if _TF_TEMPORARY.match(path.name)]
            for path in temporaries:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)
            stray += temporaries
        if stray:
            logger.info("removed what an interrupted writer left half-written in %s: %s",
                        self.path, ", ".join(str(path.relative_to(self.path)) for path in stray))
        return stray

    def write_metrics(self, metrics: dict) -> None:
        self._mark()
        write_json(self.metrics, metrics)

    def write_codes(self, **arrays: np.ndarray) -> None:
        self._mark()
        write_codes(self.codes, **arrays)

    def write_asymmetric_score(self, score) -> None:
        """`score.save(path)` (an `sgh.search.asymmetric.AsymmetricScore`), atomically."""
        self._mark()
        with atomic_file(self.asymmetric_score, suffix=".npz") as temporary:
            score.save(temporary)

    # TensorFlow is imported where it is needed, so that sgh-eval (numpy only) starts fast.
    def summary_writer(self):
        """Record TensorBoard's summaries into the run's event files for the block
        (`sgh.artifacts.tensorboard_events`, no TensorFlow needed); closed, so flushed, on exit,
        which a process ending without its final garbage collection (`sgh.cli.boundary`)
        needs."""
        self._mark()
        return tensorboard_events.recording_to(self.tensorboard, if_lost=self._tensorboard_lost)

    def _tensorboard_lost(self, lost: Path, step: int) -> None:
        """The event file being written was deleted (`tensorboard/`, or the run directory
        with it): the run stops if its directory is gone; otherwise TensorBoard's record goes
        on in a new event file, and the loss of the curves before `step` is said."""
        self.require_in_place()
        logger.warning("%s was deleted while the run was recording it: TensorBoard's curves "
                       "before step %d went with it; recording goes on from step %d in a new "
                       "event file in %s", lost, step, step, self.tensorboard)

    def checkpoint_manager(self, checkpoint: tf.train.Checkpoint,
                           best: bool = False) -> tf.train.CheckpointManager:
        """The run's training checkpoints (the last `CHECKPOINTS_KEPT`), or with `best` the
        one-slot checkpoint of the best validated weights."""
        from sgh.artifacts.checkpoint_manager import StateFirstCheckpointManager

        self._mark()
        directory = self.best_checkpoints if best else self.checkpoints
        kept = 1 if best else CHECKPOINTS_KEPT
        rebuild_unreadable_state(directory, kept)
        # Its state file never names a deleted checkpoint, whenever the process is killed.
        return StateFirstCheckpointManager(checkpoint, str(directory), max_to_keep=kept,
                                           checkpoint_name=CHECKPOINT_PREFIX,
                                           before_save=self.require_in_place)

    def resume_checkpoint(self, checkpoints: tf.train.CheckpointManager) -> str | None:
        """The newest of the kept checkpoints that reads back whole; None when there is none.

        A damaged one (truncated, overwritten, a file missing) is skipped for the one before it,
        with a warning naming it: training resumes from there and makes the same steps again.

        Raises:
            UserInputError: checkpoints are listed, and none of them is intact.
        """
        listed = list(checkpoints.checkpoints)
        if checkpoints.latest_checkpoint and checkpoints.latest_checkpoint not in listed:
            listed.append(checkpoints.latest_checkpoint)
        prefix, damaged = first_intact(reversed(listed))  # newest first
        if prefix is not None:
            for name, why in damaged:
                logger.warning("checkpoint %s is damaged (%s); resuming from %s, the newest "
                               "intact one", name, why, prefix)
            return prefix
        if damaged:
            raise UserInputError(
                f"no intact checkpoint in {checkpoints.directory} ("
                + "; ".join(f"{Path(name).name}: {why}" for name, why in damaged) + "); "
                + _START_OVER.format(checkpoints=self.checkpoints))
        return None

    def weights_of_step(self, step: int) -> str:
        """An intact checkpoint with the model weights of `step`: `checkpoints/best/ckpt-<step>`,
        else the training checkpoint of the same step, which holds the same weights (both are
        saved after the same compiled call). A damaged one is skipped with a warning.

        Raises:
            UserInputError: neither is there intact.
        """
        candidates = [directory / f"{CHECKPOINT_PREFIX}-{step}"
                      for directory in (self.best_checkpoints, self.checkpoints)]
        prefix, damaged = first_intact(path for path in candidates if checkpoint_files(path))
        if prefix is not None:
            for name, why in damaged:
                logger.warning("checkpoint %s is damaged (%s); the weights of step %d come "
                               "from %s instead", name, why, step, prefix)
            return str(prefix)
        found = "; ".join(f"{name}: {why}" for name, why in damaged) or "none is kept"
        raise UserInputError(
            f"no intact checkpoint of step {step}, whose weights make the run's codes, in "
            f"{self.best_checkpoints} or {self.checkpoints} ({found}); "
            + _START_OVER.format(checkpoints=self.checkpoints))

    def final_checkpoint(self) -> str:
        """The checkpoint whose weights gave the run's `codes.npz` (`weights_of_step`).

        With validation, the best validated weights (step `best_step` in metrics.json, which is
        the last step when no validation point was reached); otherwise the last step's (of the
        candidate recipe this is, `chosen`).
        """
        metrics = self.read_metrics()
        step = metrics.get("best_step", metrics.get("steps"))
        if isinstance(step, bool) or not isinstance(step, int):
            raise UserInputError(f"run={self.path}: {METRICS_FILE} has no integer 'steps'; "
                                 "expected the metrics of an SGH run")
        return self.weights_of_step(step)


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of `path`, None when it is gone."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def _entries(directory: Path) -> list[str]:
    return [entry.name for entry in directory.iterdir()]


def _named_in(name: str, names: frozenset[str]) -> bool:
    """`name` is one of `names`, or an atomic write's temporary of one (`.<name>.*.tmp*`)."""
    return name in names or (name.startswith(".") and ".tmp" in name and any(
        name.startswith(f".{known}.") for known in names))
