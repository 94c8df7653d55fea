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
    <run_dir>/asymmetric.npz      the method's asymmetric score, if any (sgh.scores.asymmetric)
    <run_dir>/metrics.json        one flat JSON object of results and their conventions
    <run_dir>/eval.json           `sgh-eval run=<run_dir>`: the codes re-scored

Every file is written atomically; checkpoints are read back whole before use; a run writes only
into its own directory (`refuse_unless_ours`), and no other command's output replaces its files.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import yaml
from omegaconf import OmegaConf

from sgh.artifacts import tensorboard_events
from sgh.artifacts.atomic import (
    atomic_file,
    delete_path,
    remove_abandoned_staging,
    write_bytes,
    write_json,
)
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
# What a run writes atomically (the lock: its write probe), so may leave as `.<name>.*.tmp*`. Not
# eval.json: sgh-eval writes it without owning the directory, and clears what a killed one left.
ATOMICALLY_WRITTEN = (CONFIG_FILE, INPUTS_FILE, CODES_FILE, METRICS_FILE, ASYMMETRIC_FILE,
                      ENCODER_DIR, LOCK_FILE, RUN_MARKER)
# Every name a run directory may hold: what a run, Hydra, sgh-export and sgh-eval put there.
RUN_ENTRIES = frozenset({*ATOMICALLY_WRITTEN, HYDRA_DIR, LOG_FILE, TENSORBOARD_DIR, CHECKPOINTS_DIR,
                         EVAL_FILE})
# What a directory holds before its run's first write, so that it still counts as new: Hydra's
# record and log, written before sgh-train's code runs, and the lock, taken next.
_BEFORE_THE_RUN = frozenset({HYDRA_DIR, LOG_FILE, LOCK_FILE})
_MARKER_TEXT = "an sgh-train run directory: sgh writes and replaces the files in it\n"
# TensorFlow's own: a checkpoint's shards before their merge, the state file before its rename.
_TF_TEMPORARY = re.compile(rf"^({CHECKPOINT_PREFIX}-\d+_temp|{CHECKPOINT_STATE}\.tmp[0-9a-f]+)$")
_START_OVER = "delete {checkpoints} to train the run again, or choose a new hydra.run.dir"


def _run_path(name: str) -> property:
    return property(lambda run: run.path / name)


class RunDirectory:
    """One run's directory: `RunDirectory(path)` claims it for writing; `RunDirectory.existing`
    opens a finished (or interrupted) one for reading."""

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
    def existing(cls, path: str | os.PathLike) -> RunDirectory:
        run = cls(path, create=False)
        if not run.config_file.is_file():
            raise UserInputError(f"run={run.path}: no {CONFIG_FILE} there; expected an "
                                 "sgh-train run directory")
        return run

    def claim(self) -> None:
        """Take the directory for this run to write (created if missing), or refuse, writing
        nothing (`refuse_unless_ours`). The marker goes in with the run's first file (`_mark`)."""
        self.refuse_unless_ours()
        self.path.mkdir(parents=True, exist_ok=True)
        self._identity = file_identity(self.path)

    def require_in_place(self) -> None:
        """UserInputError when the claimed directory is gone (or made again: another inode), as
        writing on would make a run that looks finished without its config, inputs and log."""
        if self._identity is None or file_identity(self.path) == self._identity:
            return
        raise UserInputError(
            f"the run directory {self.path} was deleted while the run was writing it (its "
            "config.yaml, inputs.json, train.log and checkpoints with it); the run stops here "
            "rather than leave a run without them; run the command again to train it anew")

    def _mark(self) -> None:
        """Called by every writer of the run's files, so a directory with any file of a run has
        the marker. Not in `claim`: a finished run opened again changes no file."""
        self.require_in_place()
        if not self.marker.is_file():
            write_bytes(self.marker, _MARKER_TEXT.encode())

    def refuse_unless_ours(self, key: str | None = None) -> None:
        """UserInputError, one line, unless this is a path that does not exist, a new directory
        (holding only what Hydra and the lock write before a run) or a run's (with the marker);
        also for an unreadable config.yaml. `key`: the setting that chose it, for the message."""
        named = f"{key}={self.path}" if key else str(self.path)
        if not self.path.is_dir():
            if self.path.exists():
                raise UserInputError(f"{named} is a file; accepted: a directory (a new one, or "
                                     "an earlier run's to resume it)")
            return
        self.previous_config()  # a damaged config.yaml: its own line, "restore it"
        held = sorted(name for name in os.listdir(self.path)
                      if not _named_in(name, _BEFORE_THE_RUN))
        if held and not self.marker.is_file():
            raise UserInputError(
                f"{named} is not an sgh run directory (no {RUN_MARKER}; it holds "
                f"{first_few(held)}), and sgh never writes over what it did not write; accepted: "
                "a new or empty directory, or an sgh-train run directory (holding only a run's "
                "files) to resume it")

    def holds_nothing_of_a_run(self) -> bool:
        """Whether the directory holds only what comes before a run's first write."""
        try:
            return all(_named_in(name, _BEFORE_THE_RUN) for name in os.listdir(self.path))
        except OSError:
            return False

    def holds_a_run(self) -> bool:
        """Whether the directory is a run: it carries the marker."""
        try:
            return self.marker.is_file()
        except OSError:  # an unreadable directory: not recognisably a run
            return False

    marker = _run_path(RUN_MARKER)
    config_file = _run_path(CONFIG_FILE)
    inputs_file = _run_path(INPUTS_FILE)
    codes = _run_path(CODES_FILE)
    asymmetric_score = _run_path(ASYMMETRIC_FILE)
    metrics = _run_path(METRICS_FILE)
    eval_file = _run_path(EVAL_FILE)
    encoder = _run_path(ENCODER_DIR)

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
        # TF writes the state file ("checkpoint") after the data: it lists only complete ones.
        return any((folder / CHECKPOINT_STATE).is_file() for folder in self._training_folders())

    def _training_folders(self) -> list[Path]:
        """The folders of training checkpoints: this one's, and each candidate recipe's."""
        candidates = self.path / CHECKPOINTS_DIR / CANDIDATES_DIR
        return [self.checkpoints, *(sorted(candidates.iterdir()) if candidates.is_dir() else [])]

    def model_section(self) -> dict:
        """The `model` section of the run's configuration, and a candidate's (`candidate`)."""
        settings = self.previous_config() or {}
        candidates = (settings.get("validation") or {}).get("candidates") or {}
        return {**(settings.get("model") or {}),
                **((candidates.get(self._candidate) or {}).get("model") or {})}

    def chosen(self) -> RunDirectory:
        """The candidate recipe whose weights made the finished run's codes, else the run."""
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

    def recorded_metrics(self) -> dict | None:
        """metrics.json, or None where there is no readable one (not finished yet, damaged)."""
        try:
            metrics = json.loads(self.metrics.read_text())
        except (OSError, ValueError):
            return None
        return metrics if isinstance(metrics, dict) else None

    @property
    def feature_conversion(self) -> str | None:
        """How the run's training features became float32 (e.g. 'uint8 / 255'), which new ones
        must match; None where unrecorded, and for an angular run (its rows are normalised)."""
        recorded = self.recorded_metrics() or {}
        conversion = recorded.get("feature_conversion")
        return (conversion if isinstance(conversion, str)
                and recorded.get("similarity") != "angular" else None)

    def write_config(self, config) -> None:
        self._mark()
        write_bytes(self.config_file, OmegaConf.to_yaml(OmegaConf.structured(config)).encode())

    def write_inputs(self, inputs: list[InputFile]) -> None:
        self._mark()
        write_json(self.inputs_file, {"files": [asdict(item) for item in inputs]})

    def remove_stray_temporaries(self) -> list[Path]:
        """Delete, and return, the temporaries of the run's files and checkpoints a killed writer
        left. Only for the directory's owner (`sgh.artifacts.run_lock`): others' are in flight."""
        stray = [path for name in ATOMICALLY_WRITTEN
                 for path in remove_abandoned_staging(self.path / name)]
        for directory in [folder for training in self._training_folders()
                          for folder in (training, training / BEST_DIR) if folder.is_dir()]:
            temporaries = [path for path in directory.iterdir() if _TF_TEMPORARY.match(path.name)]
            for path in temporaries:
                delete_path(path)
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
        """`score.save(path)` (an `sgh.scores.asymmetric.AsymmetricScore`), atomically."""
        self._mark()
        with atomic_file(self.asymmetric_score, suffix=".npz") as temporary:
            score.save(temporary)

    def summary_writer(self):
        """Record TensorBoard's summaries into the run's event files for the block; closed, so
        flushed, on exit, which a process ending without its final garbage collection needs."""
        self._mark()
        return tensorboard_events.recording_to(self.tensorboard, if_lost=self._tensorboard_lost)

    def _tensorboard_lost(self, lost: Path, step: int) -> None:
        """The event file being written was deleted: the run stops if its directory went with
        it; otherwise recording goes on in a new event file, and the lost curves are said."""
        self.require_in_place()
        logger.warning("%s was deleted while the run was recording it: TensorBoard's curves "
                       "before step %d went with it; recording goes on from step %d in a new "
                       "event file in %s", lost, step, step, self.tensorboard)

    def checkpoint_manager(self, checkpoint: tf.train.Checkpoint,
                           best: bool = False) -> tf.train.CheckpointManager:
        """The run's training checkpoints (the last `CHECKPOINTS_KEPT`), or with `best` the
        one-slot checkpoint of the best validated weights."""
        # Imported here, as TensorFlow is, so that sgh-eval (numpy only) starts fast.
        from sgh.artifacts.checkpoint_manager import StateFirstCheckpointManager

        self._mark()
        directory = self.best_checkpoints if best else self.checkpoints
        kept = 1 if best else CHECKPOINTS_KEPT
        rebuild_unreadable_state(directory, kept)
        return StateFirstCheckpointManager(checkpoint, str(directory), max_to_keep=kept,
                                           checkpoint_name=CHECKPOINT_PREFIX,
                                           before_save=self.require_in_place)

    def resume_checkpoint(self, checkpoints: tf.train.CheckpointManager) -> str | None:
        """The newest kept checkpoint that reads back whole (damaged ones skipped, with a warning);
        None when there is none; UserInputError when checkpoints are listed and none is intact."""
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
        """An intact checkpoint with the weights of `step`: `checkpoints/best/ckpt-<step>`, else
        the training checkpoint of that step (saved after the same compiled call, so the same
        weights); a damaged one is skipped with a warning. UserInputError: neither is intact."""
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
        """The checkpoint whose weights gave the run's (or candidate's, `chosen`) `codes.npz`:
        metrics.json's `best_step`, or its `steps` without validation."""
        metrics = self.read_metrics()
        step = metrics.get("best_step", metrics.get("steps"))
        if isinstance(step, bool) or not isinstance(step, int):
            raise UserInputError(f"run={self.path}: {METRICS_FILE} has no integer 'steps'; "
                                 "expected the metrics of an SGH run")
        return self.weights_of_step(step)


def file_identity(place: Path | int) -> tuple[int, int] | None:
    """(device, inode) of a path or an open descriptor; None when it is gone."""
    try:
        status = os.fstat(place) if isinstance(place, int) else os.stat(place)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def _named_in(name: str, names: frozenset[str]) -> bool:
    """`name` is one of `names`, or an atomic write's temporary of one (`.<name>.*.tmp*`)."""
    return name in names or (name.startswith(".") and ".tmp" in name and any(
        name.startswith(f".{known}.") for known in names))
