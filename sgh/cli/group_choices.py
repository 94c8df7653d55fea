"""Checking the config-group options on a command line (`dataset=X`, `model=X`, ...) up front.

Hydra reports an unknown option (`dataset=mnsit`) with a multi-line message and exit status 1,
before any code of ours runs. The entry points call `check_group_choices` first, so the user
gets our convention instead: one line naming the option and listing the accepted ones, exit 2.
Everything else on the command line is left to Hydra.
"""

from __future__ import annotations

from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser

from sgh.errors import UserInputError


def group_options(config_dir: Path, group: str) -> list[str]:
    """The options of a config group: the YAML files in `<config_dir>/<group>/`."""
    return sorted(path.stem for path in (config_dir / group).glob("*.yaml"))


def check_group_choices(arguments: list[str], config_dir: Path) -> None:
    """Raise UserInputError for a `group=option` override whose option has no YAML file.

    Sweeps (`model=sgh,itq`) are checked option by option; arguments Hydra parses itself (flags,
    other overrides, anything our parser cannot read) are left alone.
    """
    parser = OverridesParser.create()
    groups = {path.name for path in config_dir.iterdir() if path.is_dir()}
    for argument in arguments:
        if argument.startswith("-"):
            continue
        try:
            (override,) = parser.parse_overrides([argument])
        except Exception:  # noqa: BLE001  Hydra reports what it cannot parse, in its own words
            continue
        if override.key_or_group not in groups or override.is_delete():
            continue
        values = (list(override.sweep_string_iterator()) if override.is_sweep_override()
                  else [override.value()])
        accepted = group_options(config_dir, override.key_or_group)
        for value in values:
            if value is not None and str(value) not in accepted:
                raise UserInputError(f"{override.key_or_group}={value} is not a known option; "
                                     f"accepted: {', '.join(accepted)}")
