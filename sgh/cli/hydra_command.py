"""Running a Hydra entry point so that every mistake on its command line is one line, exit 2.

`@hydra.main` reports its own errors (a misspelt key, a wrong type, bad override syntax, an
unknown config option) in several lines with exit status 1, and in a sweep only when it reaches
the job at fault, after the jobs before it have run. So `run_hydra_command`, before handing the
command line to `@hydra.main`:

1. quotes a value Hydra's grammar refuses only for its letters beyond ASCII
   (`dataset.path=/tmp/dätä/x.npz` works as typed);
2. checks the config-group options (`sgh.cli.group_choices`);
3. composes the configuration once with Hydra's compose API, as Hydra will (cheap), and
   converts it to the typed dataclasses (a missing `dataset.path` shows there); in a sweep
   (`-m`) every other value of every swept key is checked too, before any job runs. Two things
   Hydra accepts are refused there: a key added with `+`/`++` that the schema lacks (Hydra
   adds it, the conversion drops it), and `dataset.path` with a named dataset (the run would
   carry that dataset's name);
4. runs `@hydra.main` with `HYDRA_FULL_ERROR=1`, so that what Hydra still raises (a run
   directory it cannot create, ...) reaches `sgh.cli.boundary` as an exception, not as
   Hydra's printout.

`@hydra.main` then composes the same configuration again: Hydra's public API gives it no way
to take a composed one (it reads `sys.argv`), and a Hydra callback, which does see Hydra's own
composition before the run directory is made, cannot refuse a run (Hydra turns a callback's
exception into a warning). So the checks run here, on a composition of their own.

Every failure becomes one line through `sgh.cli.boundary.exit_on_failure`. `--help`,
`--hydra-help`, `--version`, `--info`, `--shell-completion` and other config directories
(`-cp`, `-cd`) go to Hydra unchecked; `--experimental-rerun`, which unpickles a file, is
refused.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import re
import sys
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, ValueType
from hydra.errors import HydraException, OverrideParseException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from sgh.cli.boundary import exit_on_failure
from sgh.cli.group_choices import check_group_choices
from sgh.cli.hydra_errors import hydra_error_line, override_parse_line, unknown_key_line
from sgh.cli.resources import CONFIG_DIR
from sgh.cli.schemas import CONFIG_PATH, register_configs
from sgh.errors import UserInputError


@dataclass
class Composed:
    """The pre-flight's configuration (with its `hydra` node), whether Hydra will sweep, and
    the typed configuration (`sgh.config` dataclasses) of every job checked: one for a run;
    for a sweep, the first job and one per other value of each swept key."""

    config: DictConfig
    multirun: bool
    jobs: list
    runs: bool = True  # False for --cfg, which only prints the configuration


def run_hydra_command(program: str, config_name: str, hydra_main: Callable[[], object],
                      check: Callable[[Composed], None] | None = None,
                      output_key: str | None = None) -> None:
    """Check the command line (module doc), then run `hydra_main` (an `@hydra.main` function)
    on it; `check` sees the composed configuration first (the run directory, the values: a
    refusal there leaves nothing behind, not even Hydra's output directory). `output_key`: the
    setting of where the command writes, for a disk error's line."""
    with exit_on_failure(program, output_key=output_key):
        arguments = quote_beyond_ascii(sys.argv[1:])
        sys.argv[1:] = arguments  # what @hydra.main reads
        composed = preflight(config_name, arguments)
        if composed is not None and composed.runs and check is not None:
            check(composed)
        with _hydra_errors_raised():
            hydra_main()


def _arguments_parser() -> argparse.ArgumentParser:
    """The flags `@hydra.main` reads (Hydra's documented command line,
    https://hydra.cc/docs/advanced/hydra-command-line-flags/), read the same way, so that the
    overrides found here are the ones Hydra will apply. Hydra's own parser is not public API;
    tests/cli/test_help.py checks this one against the installed Hydra's `--help`."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=True)

    def refuse(message: str):
        raise UserInputError(f"{message} (--help lists the options)")

    parser.error = refuse  # argparse would print the usage and this in two lines
    parser.add_argument("overrides", nargs="*")
    for flags in (("--help", "-h"), ("--hydra-help",), ("--resolve",), ("--run", "-r"),
                  ("--multirun", "-m"), ("--shell-completion", "-sc")):
        parser.add_argument(*flags, action="store_true")
    parser.add_argument("--version", action="store_true")
    parser.add_argument("--cfg", "-c", choices=["job", "hydra", "all"])
    for flags in (("--package", "-p"), ("--config-path", "-cp"), ("--config-name", "-cn"),
                  ("--config-dir", "-cd"), ("--experimental-rerun",)):
        parser.add_argument(*flags)
    parser.add_argument("--info", "-i", const="all", nargs="?",
                        choices=["all", "config", "defaults", "defaults-tree", "plugins",
                                 "searchpath"])
    return parser


def _override_arguments(arguments: list[str]) -> list[int]:
    """The positions of the overrides among `arguments` (the rest are flags and their values)."""
    pending = list(_arguments_parser().parse_args(arguments).overrides)
    positions = []
    for position, argument in enumerate(arguments):
        if pending and argument == pending[0]:
            pending.pop(0)
            positions.append(position)
    return positions


def _parses(override: str) -> Override | None:
    try:
        (parsed,) = OverridesParser.create().parse_overrides([override])
    except (OverrideParseException, HydraException):
        return None
    return parsed


def quote_beyond_ascii(arguments: list[str]) -> list[str]:
    """`key=value` with letters beyond ASCII, which Hydra's grammar refuses unquoted, as
    `key='value'` (a sweep `key=a,b` as `key='a','b'`): only when the same override with ASCII
    letters would read as plain strings, so that quoting changes nothing else; a list, or a
    value with quotes or backslashes, is left for the error line, which says how to quote."""
    quoted = list(arguments)
    for position in _override_arguments(arguments):
        argument = arguments[position]
        if argument.isascii() or "=" not in argument or _parses(argument) is not None:
            continue
        key, _, value = argument.partition("=")
        as_ascii = _parses(re.sub(r"[^\x00-\x7f]", "a", argument))
        if as_ascii is None or any(mark in value for mark in "'\"\\"):
            continue
        if as_ascii.value_type == ValueType.ELEMENT and isinstance(as_ascii.value(), str):
            quoted[position] = f"{key}='{value}'"
        elif as_ascii.value_type == ValueType.SIMPLE_CHOICE_SWEEP and all(
                isinstance(item, str) for item in as_ascii.value().list) and len(
                as_ascii.value().list) == len(value.split(",")):
            quoted[position] = f"{key}=" + ",".join(f"'{item}'" for item in value.split(","))
    return quoted


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


def preflight(config_name: str, arguments: list[str]) -> Composed | None:
    """Compose the configuration `arguments` ask for, as `@hydra.main` will; raise
    UserInputError (one line) for any mistake. None when Hydra is left to it (module doc)."""
    args = _arguments_parser().parse_args(arguments)
    if args.experimental_rerun:
        # Hydra's rerun unpickles the file it is given; this product loads no pickles.
        raise UserInputError(f"--experimental-rerun {args.experimental_rerun}: not accepted (it "
                             "loads a pickle); run the same command again: a run resumes from "
                             "its checkpoints")
    if args.help or args.hydra_help or args.version:
        return None
    # Hydra raises these two as bare ValueErrors, outside its own error report (a traceback).
    commands = [flag for flag, given in (("--run", args.run), ("--multirun", args.multirun),
                                         ("--cfg", args.cfg), ("--info", args.info),
                                         ("--shell-completion", args.shell_completion)) if given]
    if len(commands) > 1:
        raise UserInputError(f"{' and '.join(commands)} cannot be combined; accepted: one of "
                             "--run, --multirun (-m), --cfg, --info, --shell-completion")
    if args.resolve and not args.cfg:
        raise UserInputError("--resolve applies to --cfg only (e.g. --cfg job --resolve)")
    if args.info or args.shell_completion or args.config_path or args.config_dir:
        return None
    register_configs()  # the schemas the YAML options extend (the commands do it on import)
    texts = list(args.overrides)
    overrides = [_parsed_or_refused(text) for text in texts]
    check_group_choices(texts, CONFIG_DIR)
    sweeps = [override for override in overrides if override.is_sweep_override()]
    # One job's overrides: each sweep at its first value (an interval, which only a sweeper
    # such as Optuna can sample, is left out).
    first = {id(o): _first_value(o) for o in sweeps}
    job = [o.input_line if not o.is_sweep_override() else first[id(o)] for o in overrides]
    job = [text for text in job if text is not None]
    with initialize_config_dir(config_dir=CONFIG_PATH, version_base="1.3"):
        config_name = args.config_name or config_name  # -cn NAME, as Hydra reads it
        config, typed = _composed(config_name, job, texts)
        jobs = [typed]
        multirun = args.multirun or config.hydra.mode == RunMode.MULTIRUN
        if sweeps and not multirun:
            text = sweeps[0].input_line
            key, _, value = text.partition("=")
            other_readings = (f"; or write {key}=[{value}] for a list, or quote it for a "
                              f"string ('{key}=\"{value}\"')"
                              if sweeps[0].value_type == ValueType.SIMPLE_CHOICE_SWEEP else "")
            raise UserInputError(f"{text} is a sweep (several values): add -m (--multirun) for "
                                 f"one job per value{other_readings}")
        if multirun:
            jobs += _check_every_swept_value(config_name, config, sweeps, job, first, texts)
    return Composed(config, multirun, jobs, runs=not args.cfg)


def _parsed_or_refused(text: str) -> Override:
    try:
        (parsed,) = OverridesParser.create().parse_overrides([text])
    except OverrideParseException as error:
        raise UserInputError(override_parse_line(text, error.message)) from error
    if not parsed.key_or_group:
        raise UserInputError(override_parse_line(text, "no key before the '='"))
    return parsed


def _first_value(override: Override) -> str | None:
    values = _values(override)
    return None if not values else f"{override.get_key_element()}={values[0]}"


def _values(override: Override) -> list[str]:
    """A discrete sweep's values as override text; [] for what cannot be enumerated here."""
    try:
        return list(override.sweep_string_iterator())
    except (HydraException, AssertionError):  # interval() and tag()ged intervals, glob()
        return []


def _composed(config_name: str, job: list[str], texts: list[str],
              context: str = "") -> tuple[DictConfig, object]:
    """The configuration of one job (with its `hydra` node), and typed, which finds what
    Hydra leaves to the conversion (a missing mandatory value)."""
    try:
        config = compose(config_name, overrides=job, return_hydra_config=True)
        parsed = OverridesParser.create().parse_overrides(job)  # as compose read them
        _refuse_added_keys_the_schema_lacks(config, parsed, context)
        _refuse_a_dataset_file_for_a_named_dataset(config, parsed, context)
        return config, _typed(config)
    except (HydraException, OmegaConfBaseException, ValueError) as error:
        if isinstance(error, UserInputError):
            raise
        raise UserInputError(context + (hydra_error_line(error, texts)
                                        or str(error).splitlines()[0])) from error


def _refuse_added_keys_the_schema_lacks(config: DictConfig, overrides: list[Override],
                                        context: str = "") -> None:
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
            if dataclasses.is_dataclass(schema):
                keys = [field.name for field in dataclasses.fields(schema)]
                if part not in keys:
                    raise UserInputError(context + unknown_key_line(
                        override.input_line, section or "the configuration", part, keys,
                        added=True))
            if not isinstance(node, DictConfig) or part not in node:
                break
            node, section = node[part], part if section is None else f"{section}.{part}"


# The dataset options that read the user's own file (`dataset.path`); every other one with a
# path reads its own, under `data_dir`.
_OWN_FILE_OPTIONS = ("file", "npz")


def _refuse_a_dataset_file_for_a_named_dataset(config: DictConfig, overrides: list[Override],
                                               context: str = "") -> None:
    """`dataset.path=F` with a named dataset (the default `mnist`, `cifar10_gist`, ...) would
    train on F under the named dataset's name and settings (its run directory, its metrics, the
    comparison tables): refused; your own file is `dataset=file`, a named dataset elsewhere
    is `data_dir=DIR`."""
    choice = config.hydra.runtime.choices.get("dataset")
    if choice is None or choice in _OWN_FILE_OPTIONS:
        return
    for override in overrides:
        if override.key_or_group == "dataset.path" and not override.is_delete():
            raise UserInputError(
                f"{context}{override.input_line} names your own file, which dataset=file reads; "
                f"dataset={choice} reads its own (under data_dir) and would label the run "
                f"{choice}; accepted: add dataset=file (dataset.name=NAME names the run), or "
                f"data_dir=DIR for a copy of {choice} elsewhere")


def _typed(config: DictConfig):
    """The job's configuration as `sgh.config` dataclasses, what `@hydra.main` hands over."""
    without_hydra = copy.deepcopy(config)
    with open_dict(without_hydra):
        del without_hydra["hydra"]
    return OmegaConf.to_object(without_hydra)


def _check_every_swept_value(config_name: str, config: DictConfig, sweeps: list[Override],
                             job: list[str], first: dict, texts: list[str]) -> list:
    """Every value of every sweep, with the other sweeps at their first value: a config group
    (`model=sgh,itq`) by composing again, since it changes which keys exist; a value by
    assigning it as Hydra would (types are checked on assignment). Returns those jobs typed."""
    groups = set(config.hydra.runtime.choices)
    jobs = []
    for override in sweeps:
        values = _values(override)[1:]
        plain = override.package is None and not (override.is_add() or override.is_delete()
                                                  or override.is_force_add())
        for value in values:
            text = f"{override.get_key_element()}={value}"
            if override.key_or_group in groups:
                others = [t for t in job if t != first[id(override)]]
                jobs.append(_composed(config_name, [*others, text], texts,
                                      context=f"in the sweep's job with {text}: ")[1])
            elif plain and not override.is_hydra_override():
                try:
                    OmegaConf.update(config, override.key_or_group,
                                     _parses(text).value(), merge=True)
                    jobs.append(_typed(config))
                except OmegaConfBaseException as error:
                    raise UserInputError(hydra_error_line(error, [text])) from error
    return jobs
