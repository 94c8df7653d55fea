"""`sgh-train`: the Hydra boundary of `sgh.pipeline.run`.

    sgh-train                                   SGH, 32 bits, on the bundled MNIST
    sgh-train dataset=cifar10_gist model.bits=64
    sgh-train -m model=sgh,itq model.bits=16,32,64     a sweep, one directory per job

`sgh.cli.hydra_command` reads the command line (every mistake one line, exit 2), composes the
configuration (once for a run) and converts it to the typed dataclasses, which `run` gets:
Hydra is not seen below this module.

A run directory is named by its recipe and the second the command started
(`runs/<dataset>/<method>[-<experiment>]-<bits>b/<time>`, configs/hydra/default.yaml). It is
made here, before Hydra writes into it, so that two commands started in the same second get two
(`<time>` and `<time>_2`), and its lock is taken then too; a sweep's directory likewise.
"""

from __future__ import annotations

import itertools
import logging
from datetime import datetime
from functools import partial
from pathlib import Path

import hydra
import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from sgh.artifacts.run_directory import RunDirectory, are_sgh_train_settings
from sgh.artifacts.run_lock import existing_paths, remove_a_refused_start, take_before_hydra
from sgh.cli.boundary import check_writable_place, exit_on_failure
from sgh.cli.hydra_command import run_hydra_command
from sgh.cli.schemas import CONFIG_PATH, register_configs
from sgh.config import Config, validate
from sgh.errors import TrainingInterrupted, UserInputError, first_few
from sgh.pipeline import run
from sgh.reports.comparison import written_by_compare

register_configs()
logger = logging.getLogger(__name__)

# The second this command started, as its run (or sweep) directory names it, with `_2`, `_3`
# ... once `_directory` found the name taken: one value for the whole command, read by its
# composition here and by Hydra's of a sweep alike (Hydra's `now` is read again at each one).
_start_time: str | None = None


def _started() -> str:
    global _start_time
    if _start_time is None:
        _start_time = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    return _start_time


def recipe_name(method: str, experiment: str | None) -> str:
    """`sgh`, or `sgh-search` for `experiment=search`: what a run directory's name says of how
    the run was made, so that two recipes never share a directory pattern."""
    return method if experiment is None else f"{method}-{str(experiment).replace('/', '-')}"


if not OmegaConf.has_resolver("sgh_start_time"):
    OmegaConf.register_new_resolver("sgh_start_time", _started)
    OmegaConf.register_new_resolver("sgh_recipe", recipe_name)


def _train(config: Config | DictConfig, existed: frozenset[Path] | None = None) -> float | None:
    """One run, a command's own or a sweep's job; returns its `optimized_metric` (what a sweeper
    such as Optuna maximises). `existed`: what a run's directory held before the command
    (`existing_paths`): a start refused inside the run removes the rest."""
    hydra_config = HydraConfig.get()
    run_dir = hydra_config.runtime.output_dir
    swept = hydra_config.mode == RunMode.MULTIRUN
    # Only a sweeper such as Optuna reads the returned value; Hydra's basic one discards it.
    optimizing = swept and hydra_config.runtime.choices.get("hydra/sweeper") != "basic"
    # TensorFlow's absl INFO lines and collective all-reduce INFO lines are noise here.
    logging.getLogger("absl").setLevel(logging.WARNING)
    logging.getLogger("tensorflow").setLevel(logging.WARNING)
    # Interrupted outside the training loop (loading the data, evaluating, writing): what was
    # written is whole (sgh.artifacts.atomic) and the same command picks the run up again.
    sweep_dir = hydra_config.sweep.dir if swept else None
    interrupted = (f"interrupted in the job {run_dir} of the sweep; run the same command with "
                   f"hydra.sweep.dir={sweep_dir} to resume the sweep" if swept
                   else "interrupted before the run finished; run the same command with "
                        f"hydra.run.dir={run_dir} to resume")
    resume = (f"run the same command with hydra.sweep.dir={sweep_dir} to resume the sweep (its "
              "finished jobs are not trained again)" if swept else
              f"Run the same command with hydra.run.dir={run_dir} to resume")
    with exit_on_failure("sgh-train", output_key="hydra.sweep.dir" if swept else "hydra.run.dir",
                         output_path=run_dir, interrupted=interrupted):
        try:
            if isinstance(config, DictConfig):  # a sweep's job, composed by Hydra
                config = OmegaConf.to_object(config)
            metrics = run(config, run_dir)
        except TrainingInterrupted as stop:
            where = f" in the job {run_dir} of the sweep;" if swept else "."
            raise TrainingInterrupted(f"{stop}{where} {resume}") from None
        except UserInputError as error:
            if not swept:
                remove_a_refused_start(run_dir, existed)
                raise
            # Hydra's launcher stops the sweep at the first failing job: say so, and how on.
            raise UserInputError(
                f"{error} (job {hydra_config.job.num} of the sweep, {run_dir}; the sweep "
                "stopped there, its earlier jobs are finished and kept: fix that value or leave "
                f"it out, then {resume})") from None
        return optimized_value(metrics, config.optimized_metric, warn=optimizing)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="train")
def _hydra_main(cfg: DictConfig) -> float | None:
    """A sweep's job (`sgh.cli.hydra_command` runs a plain run itself)."""
    return _train(cfg)


def _claim_run_directory(config: DictConfig, typed: Config):
    """Before Hydra writes `.hydra/` and `train.log` there: the run directory can be made and
    written (`_directory`), and is new or an sgh run's (`RunDirectory.refuse_unless_ours`: no
    Hydra files in a user's folder; an earlier run's config.yaml there is readable); its lock is
    taken. Returns the run's task."""
    directory, existed = _directory(config, "hydra.run.dir")
    RunDirectory(directory, create=False).refuse_unless_ours("hydra.run.dir")
    take_before_hydra(directory)
    return partial(_train, typed, existed)


def _check_sweep(jobs: list[Config], config: DictConfig) -> None:
    """Before the first job: every job's values (`validate`, which each run applies again), and
    the sweep's directory can be made and written, and holds nothing but an sgh sweep's."""
    for job in jobs:
        validate(job)
    directory, _ = _directory(config, "hydra.sweep.dir")
    _refuse_a_folder_that_holds_no_sweep(Path(directory))


def _directory(config: DictConfig, key: str) -> tuple[str, frozenset[Path]]:
    """The directory `key` names, checked (`check_writable_place`), and what existed of its path
    before (`existing_paths`). Named by the start time (`${sgh_start_time:}`, as the default ones
    are), a new one is wanted, not an earlier run's to resume: it is made here, its start time
    given `_2`, `_3`, ... while another command started in the same second has the name."""
    global _start_time
    HydraConfig.instance().set_config(config)  # for a name made with `${hydra:...}`
    directory = OmegaConf.select(config, key)
    check_writable_place(key, directory, directory_wanted=True)
    section, _, name = key.rpartition(".")
    raw = OmegaConf.to_container(OmegaConf.select(config, section), resolve=False)[name]
    if "sgh_start_time" not in str(raw):
        return directory, existing_paths(directory)
    second = _started()
    for count in itertools.count(1):
        _start_time = second if count == 1 else f"{second}_{count}"
        directory = OmegaConf.select(config, key)
        existed = existing_paths(directory)
        Path(directory).parent.mkdir(parents=True, exist_ok=True)
        try:
            Path(directory).mkdir()  # atomic: of two commands, one makes it
        except FileExistsError:
            continue
        return directory, existed


# What Hydra writes into a sweep's directory besides its jobs: its record of the sweep
# (`multirun.yaml`, the basic sweeper) and the Optuna sweeper's result.
_SWEEP_RECORD, _OPTUNA_RESULT = "multirun.yaml", "optimization_results.yaml"


def _written_by_hydra_for_sgh(entry: Path) -> bool:
    """`multirun.yaml` recording an sgh-train sweep (sgh's settings beside Hydra's), or the
    Optuna sweeper's `optimization_results.yaml`; a file of that name of anyone else's is not."""
    if entry.name not in (_SWEEP_RECORD, _OPTUNA_RESULT) or entry.is_symlink() \
            or not entry.is_file():
        return False
    try:
        recorded = yaml.safe_load(entry.read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return False
    if entry.name == _OPTUNA_RESULT:
        return isinstance(recorded, dict) and recorded.get("name") == "optuna"
    return are_sgh_train_settings(recorded) and isinstance(recorded.get("hydra"), dict)


def _refuse_a_folder_that_holds_no_sweep(directory: Path) -> None:
    """A sweep writes into a new or empty directory, or into an earlier sgh sweep's to resume
    it: one that holds nothing but what a sweep puts there, Hydra's record of it
    (`_written_by_hydra_for_sgh`), job directories (Hydra's `.hydra/` in them, or a run's files;
    each is checked as a run's when its job starts) and sgh-compare's own outputs. Anything
    else is the user's, which Hydra would write over (its multirun.yaml) or beside."""
    if not directory.is_dir():
        return

    def of_a_sweep(entry: Path) -> bool:
        if _written_by_hydra_for_sgh(entry) or written_by_compare(entry):
            return True
        return entry.is_dir() and not entry.is_symlink() and (
            (entry / ".hydra").is_dir() or RunDirectory(entry, create=False).holds_a_run())

    entries = sorted(entry.name for entry in directory.iterdir() if not of_a_sweep(entry))
    if entries:
        raise UserInputError(
            f"hydra.sweep.dir={directory} is not a sweep directory (it holds "
            f"{first_few(entries)}), and sgh never writes over what it did not write; accepted: "
            "a new or empty directory, or an earlier sweep's to resume it")


def optimized_value(metrics: dict, key: str, warn: bool = True) -> float | None:
    """The run's `optimized_metric`; None (with a warning to a sweeper that optimises it) when
    the run has no such score, e.g. a baseline or validation off: nothing validated to optimise."""
    value = metrics.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        if warn:
            logger.warning("optimized_metric=%s is not in this run's metrics (validation off, "
                           "or a baseline): nothing to return to the sweeper", key)
        return None
    return float(value)


def main() -> None:
    global _start_time
    _start_time = None  # this command's: a process may run several (tests)
    run_hydra_command("sgh-train", "train", _hydra_main, _claim_run_directory, _check_sweep,
                      output_key="hydra.run.dir")


if __name__ == "__main__":
    main()
