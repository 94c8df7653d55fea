"""Running a Hydra command: a run composed once, a sweep checked whole before its first job, and
every mistake on the command line one line with exit status 2.

A run (`sgh-train KEY=VALUE ...`) is composed here, once, with Hydra's Compose API, converted
once to the typed dataclasses, and handed to Hydra's own `run_job`, which makes the run
directory, configures the logs and writes `.hydra/` as under `@hydra.main`. `@hydra.main`
itself would compose it twice (`Hydra.get_mode`, then the run) and report a mistake in several
lines, after making the run directory. The rest goes to `@hydra.main`, with `HYDRA_FULL_ERROR=1`
so that its errors reach `sgh.cli.boundary` as exceptions (one line): a sweep (`-m`), once each
of its jobs is composed and checked here, so that a bad value late in a sweep is refused before
the first job runs; `--help`, `--hydra-help`, `--cfg`, `--info`, `--shell-completion` and other
config directories (`-cp`, `-cd`), unchecked.

Refused here though Hydra accepts them: `+key` for a key the schema lacks (the conversion would
drop it), `dataset.path` with a named dataset (the run would carry that dataset's name), and
`--experimental-rerun` (it unpickles a file). Quoted here though Hydra's grammar refuses them:
letters beyond ASCII (`dataset.path=/tmp/dätä/x.npz` works as typed).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import os
import sys
from collections.abc import Callable
from contextlib import contextmanager

from hydra import compose, initialize_config_dir

# Hydra's own command-line parser and callbacks, private but the ones `@hydra.main` uses: the
# overrides found here are those Hydra would read, and a run's callbacks are Hydra's.
from hydra._internal.callbacks import Callbacks
from hydra._internal.utils import get_args_parser
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, ValueType
from hydra.core.utils import run_job
from hydra.errors import HydraException, OverrideParseException
from hydra.types import HydraContext, RunMode
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from sgh.cli.boundary import exit_on_failure
from sgh.cli.hydra_errors import hydra_error_line, override_parse_line, unknown_key_line
from sgh.cli.schemas import CONFIG_PATH
from sgh.errors import UserInputError

# A run's task, given its composed configuration (with its `hydra` node) and the typed one,
# made once the command has claimed where it writes; and the check of a sweep's typed jobs.
Prepare = Callable[[DictConfig, object], Callable[[], object]]
CheckSweep = Callable[[list, DictConfig], None]


def run_hydra_command(program: str, config_name: str, hydra_main: Callable[[], object],
                      prepare: Prepare, check_sweep: CheckSweep,
                      output_key: str | None = None) -> None:
    """Run the command line (module doc): a run through `prepare`'s task, a sweep through
    `hydra_main` (an `@hydra.main` function) once `check_sweep` passed it. `output_key`: the
    setting of where the command writes, for a disk error's line."""
    with exit_on_failure(program, output_key=output_key):
        args = _arguments(sys.argv[1:])
        texts = [_quoted_beyond_ascii(text) for text in args.overrides]
        sys.argv[1:] = _with_overrides(sys.argv[1:], args.overrides, texts)  # @hydra.main's
        if not (args.help or args.hydra_help or args.cfg or args.info or args.shell_completion
                or args.config_path or args.config_dir):
            overrides = [_parsed_or_refused(text) for text in texts]
            with initialize_config_dir(config_dir=CONFIG_PATH, job_name=config_name,
                                       version_base="1.3"):
                jobs = [_composed(args.config_name or config_name, job, overrides, swept)
                        for job, swept in _jobs(overrides, args.multirun)]
                if not args.multirun and jobs[0][0].hydra.mode != RunMode.MULTIRUN:
                    return _run(*jobs[0], prepare)
                check_sweep([typed for _, typed in jobs], jobs[0][0])
        with _hydra_errors_raised():
            hydra_main()


def _arguments(arguments: list[str]):
    """The command line read by Hydra's parser, its errors one line; and what Hydra refuses with
    a bare ValueError (a traceback), or would run but should not, refused."""
    parser = get_args_parser()

    def refuse(message: str):
        raise UserInputError(f"{message} (--help lists the options)")

    parser.error = refuse  # argparse would print the usage and this in two lines
    args = parser.parse_args(arguments)
    if args.experimental_rerun:
        raise UserInputError(f"--experimental-rerun {args.experimental_rerun}: not accepted (it "
                             "loads a pickle); run the same command again: a run resumes from "
                             "its checkpoints")
    commands = [flag for flag, given in (("--run", args.run), ("--multirun", args.multirun),
                                         ("--cfg", args.cfg), ("--info", args.info),
                                         ("--shell-completion", args.shell_completion)) if given]
    if len(commands) > 1:
        raise UserInputError(f"{' and '.join(commands)} cannot be combined; accepted: one of "
                             "--run, --multirun (-m), --cfg, --info, --shell-completion")
    if args.resolve and not (args.cfg or args.help):
        raise UserInputError("--resolve applies to --cfg only (e.g. --cfg job --resolve)")
    return args


def _with_overrides(arguments: list[str], overrides: list[str], texts: list[str]) -> list[str]:
    """`arguments` with each of its `overrides` (in order, among the flags) replaced by its text."""
    result, pending = list(arguments), list(zip(overrides, texts, strict=True))
    for position, argument in enumerate(arguments):
        if pending and argument == pending[0][0]:
            result[position] = pending.pop(0)[1]
    return result


def _quoted_beyond_ascii(text: str) -> str:
    """`key=value` with letters beyond ASCII, which Hydra's grammar refuses unquoted, as
    `key='value'` (a sweep's `a,b` as `'a','b'`, as Hydra reads `a,b`); a value with quotes,
    backslashes or brackets is left for the error line, which says how to quote."""
    key, _, value = text.partition("=")
    if text.isascii() or not value or any(mark in value for mark in "'\"\\[]{}()"):
        return text
    try:
        OverridesParser.create().parse_overrides([text])
        return text
    except OverrideParseException:
        return f"{key}=" + ",".join(f"'{item}'" for item in value.split(","))


def _parsed_or_refused(text: str) -> Override:
    try:
        (parsed,) = OverridesParser.create().parse_overrides([text])
    except OverrideParseException as error:
        raise UserInputError(override_parse_line(text, error.message)) from error
    if not parsed.key_or_group:
        raise UserInputError(override_parse_line(text, "no key before the '='"))
    return parsed


def _jobs(overrides: list[Override], multirun: bool) -> list[tuple[list[str], list[str]]]:
    """The jobs the command line asks for: each one's overrides, and those of them that are a
    sweep's values. One job for a run; a sweep's as Hydra's basic sweeper makes them, the cross
    product of the swept values (an interval, which only a sweeper such as Optuna samples, left
    out)."""
    sweeps = [override for override in overrides if override.is_sweep_override()]
    if sweeps and not multirun:
        key, _, value = sweeps[0].input_line.partition("=")
        other_readings = (f"; or write {key}=[{value}] for a list, or quote it for a string "
                          f"('{key}=\"{value}\"')"
                          if sweeps[0].value_type == ValueType.SIMPLE_CHOICE_SWEEP else "")
        raise UserInputError(f"{sweeps[0].input_line} is a sweep (several values): add -m "
                             f"(--multirun) for one job per value{other_readings}")
    choices = []
    for override in overrides:
        if not override.is_sweep_override():
            choices.append([(override.input_line, False)])
            continue
        try:
            values = list(override.sweep_string_iterator())
        except (HydraException, AssertionError):  # interval(), tag()ged intervals, glob()
            continue
        choices.append([(f"{override.get_key_element()}={value}", True) for value in values])
    return [([text for text, _ in job], [text for text, swept in job if swept])
            for job in itertools.product(*choices)]


def _composed(config_name: str, job: list[str], overrides: list[Override],
              swept: list[str]) -> tuple[DictConfig, object]:
    """One job's configuration (with its `hydra` node) and its typed dataclasses, which find
    what Hydra leaves to the conversion (a missing mandatory value). A sweep's job is named by
    its swept values in the error line, unless the line starts with them."""
    try:
        try:
            config = compose(config_name, overrides=job, return_hydra_config=True)
            _refuse_added_keys_the_schema_lacks(config, overrides)
            _refuse_a_dataset_file_for_a_named_dataset(config, overrides)
            without_hydra = copy.deepcopy(config)
            with open_dict(without_hydra):
                del without_hydra["hydra"]
            return config, OmegaConf.to_object(without_hydra)
        except (HydraException, OmegaConfBaseException, ValueError) as error:
            if isinstance(error, UserInputError):
                raise
            raise UserInputError(hydra_error_line(error, job)
                                 or str(error).splitlines()[0]) from error
    except UserInputError as error:
        named = [text for text in swept if not str(error).startswith(text)]
        if not named:
            raise
        raise UserInputError(f"in the sweep's job with {', '.join(named)}: {error}") from error


def _refuse_added_keys_the_schema_lacks(config: DictConfig, overrides: list[Override]) -> None:
    """`+key=value` and `++key=value` add a key wherever Hydra is asked to, even to a section
    of the typed schema (`sgh.config`), and the conversion to the dataclasses then drops it:
    the setting would be accepted and ignored. Such a key is refused as a misspelt one is.
    Hydra's own settings (`+hydra.job.env_set.NAME=...`) and config groups are Hydra's."""
    groups = set(config.hydra.runtime.choices)
    for override in overrides:
        if not (override.is_add() or override.is_force_add()) or override.is_hydra_override() \
                or override.package is not None or override.key_or_group in groups:
            continue
        node, section = config, None
        for part in override.key_or_group.split("."):
            schema = OmegaConf.get_type(node) if isinstance(node, DictConfig) else None
            keys = [field.name for field in dataclasses.fields(schema)] \
                if dataclasses.is_dataclass(schema) else [part]
            if part not in keys:
                raise UserInputError(unknown_key_line(
                    override.input_line, section or "the configuration", part, keys, added=True))
            if not isinstance(node, DictConfig) or part not in node:
                break
            node, section = node[part], part if section is None else f"{section}.{part}"


def _refuse_a_dataset_file_for_a_named_dataset(config: DictConfig,
                                               overrides: list[Override]) -> None:
    """`dataset.path=F` with a named dataset (the default `mnist`, `cifar10_gist`, ...) would
    train on F under the named dataset's name and settings (its run directory, its metrics, the
    comparison tables): refused; your own file is `dataset=file` (or `npz`), a named dataset
    elsewhere is `data_dir=DIR`."""
    choice = config.hydra.runtime.choices.get("dataset")
    if choice is None or choice in ("file", "npz"):  # the options that read the user's file
        return
    for override in overrides:
        if override.key_or_group == "dataset.path" and not override.is_delete():
            raise UserInputError(
                f"{override.input_line} names your own file, which dataset=file reads; "
                f"dataset={choice} reads its own (under data_dir) and would label the run "
                f"{choice}; accepted: add dataset=file (dataset.name=NAME names the run), or "
                f"data_dir=DIR for a copy of {choice} elsewhere")


def _run(config: DictConfig, typed, prepare: Prepare) -> None:
    """One run, as `@hydra.main` runs it (`Hydra.run`), on the configuration composed here. The
    task reports its own errors (`sgh.cli.boundary.exit_on_failure`); another one is a bug,
    which `return_value` raises again."""
    config.hydra.mode = RunMode.RUN
    task = prepare(config, typed)
    callbacks = Callbacks(config)
    callbacks.on_run_start(config=config, config_name=config.hydra.job.config_name)
    done = run_job(task_function=lambda _: task(), config=config, job_dir_key="hydra.run.dir",
                   job_subdir_key=None, hydra_context=HydraContext(
                       config_loader=GlobalHydra.instance().config_loader(),
                       callbacks=callbacks))
    callbacks.on_run_end(config=config, config_name=config.hydra.job.config_name,
                         job_return=done)
    done.return_value  # noqa: B018  raises the task's exception, if any


@contextmanager
def _hydra_errors_raised():
    """Hydra raises its errors instead of printing them (its documented HYDRA_FULL_ERROR)."""
    previous = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = previous
