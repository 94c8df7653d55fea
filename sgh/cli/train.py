"""`sgh-train`: the Hydra boundary of `sgh.pipeline.run` (the guide: docs/guide/training.md).

A run's directory (configs/hydra/default.yaml) is made and locked before Hydra writes into it:
two commands started in the same second get two (`<time>`, `<time>_2`); a sweep's likewise.
"""

from __future__ import annotations

import itertools
import logging
from contextlib import suppress
from datetime import datetime
from functools import partial
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from sgh.artifacts.output_places import check_writable_place, refuse_a_folder_that_holds_no_sweep
from sgh.artifacts.run_directory import RunDirectory
from sgh.artifacts.run_lock import existing_paths, remove_a_refused_start, take_before_hydra
from sgh.cli.boundary import exit_on_failure
from sgh.cli.hydra_command import run_hydra_command
from sgh.config import Config, validate
from sgh.errors import TrainingInterrupted, UserInputError
from sgh.pipeline import run
from sgh.reports.comparison import written_by_compare

logger = logging.getLogger(__name__)

# The second this command started (`_2`, `_3` ... once `_directory` found the name taken), one
# value for the whole command: Hydra's `now` is read again at each composition.
_start_time = ""
OmegaConf.register_new_resolver("sgh_start_time", lambda: _start_time, replace=True)


def _train(config: Config, existed: frozenset[Path] | None = None) -> float | None:
    """One run; returns its `optimized_metric` (for a sweeper such as Optuna). `existed`: what
    the run's path held before the command."""
    hydra_config = HydraConfig.get()
    run_dir = hydra_config.runtime.output_dir
    swept = hydra_config.mode == RunMode.MULTIRUN
    for noisy in ("absl", "tensorflow"):  # TensorFlow's INFO lines
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if swept:
        resume = (f"run the same command with hydra.sweep.dir={hydra_config.sweep.dir} to "
                  "resume the sweep (its finished jobs are not trained again)")
        where = f" in the job {run_dir} of the sweep; {resume}"
        interrupted = f"interrupted{where}"
    else:
        resume = f"run the same command with hydra.run.dir={run_dir} to resume"
        where, interrupted = f". R{resume[1:]}", f"interrupted before the run finished; {resume}"
    with exit_on_failure("sgh-train", output_key="hydra.sweep.dir" if swept else "hydra.run.dir",
                         output_path=run_dir, interrupted=interrupted):
        try:
            metrics = run(config, run_dir)
        except TrainingInterrupted as stop:
            raise TrainingInterrupted(f"{stop}{where}") from None
        except UserInputError as error:
            if not swept:
                remove_a_refused_start(run_dir, existed)
                raise
            # Hydra's launcher stops the sweep at the first failing job: say so, and how on.
            raise UserInputError(
                f"{error} (job {hydra_config.job.num} of the sweep, {run_dir}; the sweep "
                "stopped there, its earlier jobs are finished and kept: fix that value or leave "
                f"it out, then {resume})") from None
        # Only a sweeper such as Optuna reads the value; Hydra's basic one discards it.
        optimizing = swept and hydra_config.runtime.choices.get("hydra/sweeper") != "basic"
        return optimized_value(metrics, config.optimized_metric, warn=optimizing)


def _claim_run_directory(config: DictConfig, typed: Config):
    """The run's task, once its directory is checked and locked, before Hydra writes there."""
    directory, existed = _directory(config, "hydra.run.dir")
    RunDirectory(directory, create=False).refuse_unless_ours("hydra.run.dir")
    take_before_hydra(directory)
    return partial(_train, typed, existed)


def _check_sweep(jobs: list[Config], config: DictConfig) -> None:
    """Before the first job: every job's values (each run validates again), and the directory."""
    for job in jobs:
        validate(job)
    directory, _ = _directory(config, "hydra.sweep.dir")
    refuse_a_folder_that_holds_no_sweep(Path(directory), also_a_sweeps=written_by_compare)


def _directory(config: DictConfig, key: str) -> tuple[str, frozenset[Path]]:
    """The directory `key` names, checked, and what existed of its path before; one named by the
    start time (the default) made new, with `_2`, `_3` ... while the name is taken."""
    global _start_time
    HydraConfig.instance().set_config(config)  # for a name made with `${hydra:...}`
    directory = OmegaConf.select(config, key)
    check_writable_place(key, directory, directory_wanted=True)
    section, _, name = key.rpartition(".")
    if "sgh_start_time" not in str(OmegaConf.to_container(OmegaConf.select(config, section),
                                                          resolve=False)[name]):
        return directory, existing_paths(directory)
    second = _start_time
    for count in itertools.count(1):
        _start_time = second if count == 1 else f"{second}_{count}"
        directory = OmegaConf.select(config, key)
        existed = existing_paths(directory)
        Path(directory).parent.mkdir(parents=True, exist_ok=True)
        with suppress(FileExistsError):
            Path(directory).mkdir()  # atomic: of two commands, one makes it
            return directory, existed


def optimized_value(metrics: dict, key: str, warn: bool = True) -> float | None:
    """The run's `optimized_metric`, or None (and a warning to a sweeper) when it has none."""
    value = metrics.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        if warn:
            logger.warning("optimized_metric=%s is not in this run's metrics (validation off, "
                           "or a baseline): nothing to return to the sweeper", key)
        return None
    return float(value)


def main() -> None:
    global _start_time
    _start_time = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")  # a process may run several
    run_hydra_command("sgh-train", "train", _train, _claim_run_directory, _check_sweep,
                      output_key="hydra.run.dir")


if __name__ == "__main__":
    main()
