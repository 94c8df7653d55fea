"""A Hydra command's command line (every `sgh-*`), every mistake one line.

A run is composed once here and run by Hydra's own `run_job` (`@hydra.main` would compose it
twice, and report a mistake in several lines after making the run directory). A sweep goes to
`@hydra.main` once each job is composed and checked here; `--help`, `--cfg` and such go unchecked.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import itertools
import os
import sys
import warnings
from collections.abc import Callable

import hydra
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.utils import run_job
from hydra.errors import HydraException
from hydra.types import HydraContext, RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from sgh.cli.boundary import exit_on_failure
from sgh.cli.hydra_errors import hydra_error_line, override_parse_line, unknown_key_line
from sgh.cli.schemas import CONFIG_PATH, register_configs
from sgh.errors import UserInputError


def run_hydra_command(program: str, config_name: str, sweep_job: Callable[[object], object],
                      prepare: Callable[[DictConfig, object], Callable[[], object]],
                      check_sweep: Callable[[list, DictConfig], None],
                      output_key: str | None = None, positional: str | None = None) -> None:
    """A run through the task `prepare` makes of its composed and typed configurations; a sweep
    through `@hydra.main`, `sweep_job` of each typed configuration, once `check_sweep` passed them.
    `positional`: the key a bare word would mean (`sgh-export DIR`), which the refusal names."""
    with exit_on_failure(program, output_key=output_key):
        register_configs()
        args = _arguments(sys.argv[1:])
        bare = [text for text in args.overrides if "=" not in text and text[:1] != "~"]
        if positional and bare:
            raise UserInputError(f"{bare[0]} is not key=value; write {positional}={bare[0]}")
        quoted = {text: _quoted_beyond_ascii(text) for text in args.overrides}
        sys.argv[1:] = [quoted.get(argument, argument) for argument in sys.argv[1:]]
        if not (args.help or args.hydra_help or args.version or args.cfg or args.info
                or args.shell_completion or args.config_path or args.config_dir):
            overrides = [_parsed(quoted[text]) for text in args.overrides]
            with initialize_config_dir(config_dir=CONFIG_PATH, job_name=config_name,
                                       version_base="1.3"):
                jobs = [_composed(args.config_name or config_name, job, overrides)
                        for job in _jobs(overrides, args.multirun)]
                if not args.multirun and jobs[0][0].hydra.mode != RunMode.MULTIRUN:
                    return _run(*jobs[0], prepare)
                check_sweep([typed for _, typed in jobs], jobs[0][0])
        os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises its errors, told in one line above
        # Hydra names the jobs after `sweep_job`'s module: it unwraps what `functools.wraps` wraps.
        hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name=config_name)(
            functools.wraps(sweep_job)(lambda cfg: sweep_job(OmegaConf.to_object(cfg))))()


def _arguments(arguments: list[str]):
    """The command line read as Hydra reads it, what it refuses (or should) in one line."""
    parser = _hydra_arguments()

    def refuse(message: str):  # argparse would print the usage and this in two lines
        raise UserInputError(f"{message} (--help lists the options)")

    parser.error = refuse
    args = parser.parse_args(arguments)
    if args.experimental_rerun:
        raise UserInputError(f"--experimental-rerun {args.experimental_rerun}: not accepted (it "
                             "loads a pickle); run the same command again: a run resumes from "
                             "its checkpoints")
    commands = [f"--{flag.replace('_', '-')}" for flag in
                ("run", "multirun", "cfg", "info", "shell_completion") if getattr(args, flag)]
    if len(commands) > 1:
        raise UserInputError(f"{' and '.join(commands)} cannot be combined; accepted: one of "
                             "--run, --multirun (-m), --cfg, --info, --shell-completion")
    if args.resolve and not (args.cfg or args.help):
        raise UserInputError("--resolve applies to --cfg only (e.g. --cfg job --resolve)")
    return args


def _hydra_arguments() -> argparse.ArgumentParser:
    """The options `@hydra.main` reads (its parser is private): the overrides read here are those
    Hydra reads; what is not a run (`--help`, `--version`, `--cfg` ...) goes to `@hydra.main`."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("overrides", nargs="*")
    for flags in (["--help", "-h"], ["--hydra-help"], ["--version"], ["--resolve"],
                  ["--run", "-r"], ["--multirun", "-m"], ["--shell-completion", "-sc"]):
        parser.add_argument(*flags, action="store_true")
    for flags in (["--package", "-p"], ["--config-path", "-cp"], ["--config-name", "-cn"],
                  ["--config-dir", "-cd"], ["--experimental-rerun"]):
        parser.add_argument(*flags)
    parser.add_argument("--cfg", "-c", choices=["job", "hydra", "all"])
    parser.add_argument("--info", "-i", const="all", nargs="?", choices=[
        "all", "config", "defaults", "defaults-tree", "plugins", "searchpath"])
    return parser


def _quoted_beyond_ascii(text: str) -> str:
    """`key=value` with letters beyond ASCII, which Hydra refuses unquoted, as `key='value'`
    (`a,b` as `'a','b'`); a value with quotes or brackets is left to the error line."""
    key, _, value = text.partition("=")
    if value.isascii() or any(mark in value for mark in "'\"\\[]{}()"):
        return text
    return f"{key}=" + ",".join(f"'{item}'" for item in value.split(","))


def _parsed(text: str) -> Override:
    (parsed,) = OverridesParser.create().parse_overrides([text])  # unreadable: the boundary's line
    if not parsed.key_or_group:
        raise UserInputError(override_parse_line(text, "no key before the '='"))
    return parsed


def _jobs(overrides: list[Override], multirun: bool) -> list[list[str]]:
    """Each job's overrides: one for a run; for a sweep, the cross product of its values, as
    Hydra's basic sweeper makes them (an interval, which only Optuna samples, left out)."""
    if not multirun:
        return [[override.input_line for override in overrides]]
    choices = []
    for override in overrides:
        try:
            choices.append([f"{override.get_key_element()}={value}"
                            for value in override.sweep_string_iterator()]
                           if override.is_sweep_override() else [override.input_line])
        except (HydraException, AssertionError):  # interval(), tag()ged intervals, glob()
            continue
    return [list(job) for job in itertools.product(*choices)]


def _composed(config_name: str, job: list[str],
              overrides: list[Override]) -> tuple[DictConfig, object]:
    """One job's configuration (with its `hydra` node) and its typed dataclasses; an error
    names a sweep's job by its swept values."""
    try:
        config = compose(config_name, overrides=job, return_hydra_config=True)
        _refuse_what_the_run_would_misread(config, overrides)
        with open_dict(without_hydra := copy.deepcopy(config)):
            del without_hydra["hydra"]
        return config, OmegaConf.to_object(without_hydra)
    except (HydraException, OmegaConfBaseException, ValueError) as error:
        line = str(error) if isinstance(error, UserInputError) else (
            hydra_error_line(error, job) or str(error).splitlines()[0])
        swept = set(job) - {override.input_line for override in overrides}  # a sweep's values
        named = [text for text in job if text in swept and not line.startswith(text)]
        raise UserInputError(f"in the sweep's job with {', '.join(named)}: {line}" if named
                             else line) from error


def _refuse_what_the_run_would_misread(config: DictConfig, overrides: list[Override]) -> None:
    """`+key` adding a key to the typed schema (the run would ignore it) is refused as a
    misspelt key is; so is `dataset.path=F` with a named dataset (the run would carry its name)."""
    choices = config.hydra.runtime.choices
    for override in overrides:
        if override.key_or_group == "dataset.path" and not override.is_delete() \
                and choices.get("dataset") not in (None, "file", "npz"):  # named datasets
            raise UserInputError(
                f"{override.input_line} names your own file, which dataset=file reads; "
                f"dataset={choices.dataset} reads its own (under data_dir) and would label the "
                f"run {choices.dataset}; accepted: add dataset=file (dataset.name=NAME names the "
                f"run), or data_dir=DIR for a copy of {choices.dataset} elsewhere")
        if not (override.is_add() or override.is_force_add()) or override.is_hydra_override() \
                or override.package is not None or override.key_or_group in choices:
            continue
        node, path = config, []
        for part in override.key_or_group.split("."):
            schema = OmegaConf.get_type(node) if isinstance(node, DictConfig) else None
            if not dataclasses.is_dataclass(schema):
                break
            keys = [field.name for field in dataclasses.fields(schema)]
            if part not in keys:
                raise UserInputError(unknown_key_line(override.input_line, ".".join(path)
                                                      or "the configuration", part, keys, True,
                                                      schema))
            node, path = node[part], [*path, part]


def _run(config: DictConfig, typed, prepare) -> None:
    """One run as `@hydra.main` runs it (`Hydra.run`), on the configuration composed here."""
    config.hydra.mode = RunMode.RUN
    task = prepare(config, typed)
    callbacks = _Callbacks(config)
    callbacks.on_run_start(config=config, config_name=config.hydra.job.config_name)
    done = run_job(task_function=lambda _: task(), config=config, job_dir_key="hydra.run.dir",
                   job_subdir_key=None, hydra_context=HydraContext(
                       config_loader=GlobalHydra.instance().config_loader(), callbacks=callbacks))
    callbacks.on_run_end(config=config, config_name=config.hydra.job.config_name, job_return=done)
    done.return_value  # noqa: B018  raises the task's exception (a bug: it reports the user's)


class _Callbacks:
    """The run's `hydra.callbacks`, told of the run and its job as `@hydra.main` tells them (its
    own notifier is private): `on_run_start`, `on_job_start` in order, the `_end`s in reverse; a
    callback's failure is a warning, not the run's."""

    def __init__(self, config: DictConfig) -> None:
        self._callbacks = [instantiate(spec) for spec in
                           (OmegaConf.select(config, "hydra.callbacks") or {}).values()]

    def __getattr__(self, event: str):
        if not event.startswith("on_"):
            raise AttributeError(event)

        def notify(**arguments) -> None:
            for callback in self._callbacks[::-1 if event.endswith("_end") else 1]:
                try:
                    getattr(callback, event)(**arguments)
                except Exception as error:  # noqa: BLE001  as Hydra does
                    warnings.warn(f"Callback {type(callback).__name__}.{event} raised "
                                  f"{type(error).__name__}: {error}", stacklevel=2)
        return notify
