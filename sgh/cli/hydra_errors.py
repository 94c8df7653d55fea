"""Hydra's and OmegaConf's errors as one line: the override or key at fault and what is accepted.

Hydra prints these in several lines (the message, its OmegaConf cause, `full_key:` and
`object_type=` lines, the config search path); `hydra_error_line` keeps what names the mistake
and adds what would be accepted: the keys of the section, the type of the value, the options of
the group, how to quote a value.
"""

from __future__ import annotations

import dataclasses
import re
import typing

from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    MissingMandatoryValue,
    OmegaConfBaseException,
    ValidationError,
)

GRAMMAR = "https://hydra.cc/docs/advanced/override_grammar/basic/"
SHOW_KEYS = "--cfg job prints every key with its value"
# Lines of Hydra's and OmegaConf's messages that locate rather than explain.
_NOISE = ("full_key:", "object_type=", "reference_type=", "See https://hydra.cc",
          "Config search path", "provider=", "Set the environment variable HYDRA_FULL_ERROR")


def hydra_error_line(error: BaseException, overrides: typing.Sequence[str] = ()) -> str | None:
    """One line for an exception of Hydra or OmegaConf, None for any other (a bug).

    `overrides`: the command line's overrides, to quote the one at fault in full.
    """
    if isinstance(error, MissingConfigException):
        return _missing_option_line(error)
    if isinstance(error, OverrideParseException):
        return override_parse_line(error.override, error.message)
    cause = error.__cause__ if isinstance(error.__cause__, OmegaConfBaseException) else error
    if isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None):
        return _key_line(cause, _override_naming(cause.full_key, overrides, str(error)))
    if isinstance(error, (HydraException, OmegaConfBaseException)):
        return "; ".join(_meaningful_lines(str(error))) or type(error).__name__
    return None


def _meaningful_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.strip().startswith(_NOISE)]


def _missing_option_line(error: MissingConfigException) -> str:
    missing = error.missing_cfg_file or ""
    if "/" not in missing:
        return "; ".join(_meaningful_lines(str(error)))
    group, option = missing.rsplit("/", 1)
    # The schemas registered with Hydra (sgh.cli.schemas) are not options a user picks.
    options = [name for name in error.options or () if not name.endswith("_schema")]
    return f"{group}={option} is not a known option; accepted: {', '.join(options)}"


def override_parse_line(override: str, message: str) -> str:
    """An override Hydra's grammar cannot read: which one, where, and how to quote it."""
    lines = [line for line in message.splitlines() if line.strip()]
    reason = next((line for line in lines if not line.startswith(("Error parsing override",
                                                                   "See https://"))), "")
    if reason.startswith("LexerNoViableAltException"):
        # Hydra's lexer marks the character it stopped at with a caret on the next line.
        caret = next((line.index("^") for line in lines if line.strip() == "^"), None)
        start = len("LexerNoViableAltException: ")
        position = None if caret is None else caret - start
        reason = (f"it cannot read {override[position]!r} at position {position}"
                  if position is not None and 0 <= position < len(override)
                  else "it cannot read a character")
    key, _, value = override.partition("=")
    if not override.isascii() and value and any(mark in value for mark in "[]{}()'\""):
        quoting = ("letters beyond ASCII must be quoted: each value that has them in \"...\" "
                   "for Hydra, the whole override in '...' for the shell")
    elif not override.isascii() and value:
        # A sweep's values are quoted one by one: a,b -> "a","b".
        quoted = ",".join(f'"{part}"' for part in value.split(","))
        quoting = (f"letters beyond ASCII must be quoted: '{key}={quoted}' (the outer quotes "
                   "for the shell, the inner ones for Hydra)")
    else:
        quoting = ("write key=value, and quote a value holding spaces, commas, brackets, "
                   f"quotes or other special characters: 'key=\"...\"' ({GRAMMAR})")
    return f"cannot read the override {override!r}: {reason}; {quoting}"


def _override_naming(full_key: str, overrides: typing.Sequence[str], message: str) -> str | None:
    """The override (as typed) that set `full_key`, if one of `overrides` did."""
    for override in reversed(overrides):
        key = override.partition("=")[0].lstrip("+~").partition("@")[0]
        # The key itself, an item below it (eval.recall_n[1]), or a section above it (a
        # misspelt `trainr` of trainr.steps).
        if full_key == key or full_key.startswith((f"{key}.", f"{key}[")) \
                or key.startswith(f"{full_key}."):
            return override
    match = re.search(r"Error merging override (\S+)", message)
    return match.group(1) if match else None


def _key_line(cause: OmegaConfBaseException, override: str | None) -> str:
    full_key = cause.full_key
    stated = override or (full_key if cause.value is None else f"{full_key}={cause.value}")
    first = (_meaningful_lines(str(cause.msg or cause)) or [type(cause).__name__])[0]
    if isinstance(cause, MissingMandatoryValue):
        return missing_value_line(full_key)
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and " not in " in first:
        section = full_key.rpartition(".")[0] or "the configuration"
        return unknown_key_line(stated, section, cause.key, _section_keys(cause))
    if isinstance(cause, ValidationError):
        accepted = _accepted_value(cause)
        return f"{stated}: {first}" + (f"; accepted: {accepted}" if accepted else "")
    return f"{stated}: {first}"


def unknown_key_line(stated: str, section: str, key, keys: typing.Sequence[str],
                     added: bool = False) -> str:
    """A key its section does not have (misspelt, or added with `+`): the keys it has."""
    accepted = f"accepted keys: {', '.join(keys)}" if keys else "accepted: its keys"
    adding = "; a key added with + would be ignored" if added else ""
    return f"{stated}: {section} has no key {key!r}{adding}; {accepted} ({SHOW_KEYS})"


def missing_value_line(full_key: str) -> str:
    """A mandatory value (`???` in the YAML) the command line did not give."""
    if full_key == "dataset.path":
        from sgh.data.vector_files import ACCEPTED_SUFFIXES

        return ("dataset.path is missing: dataset=file reads your own file; add "
                f"dataset.path=FILE ({', '.join(ACCEPTED_SUFFIXES)})")
    return f"{full_key} is missing (it has no default); add {full_key}=VALUE"


def _section_keys(cause: OmegaConfBaseException) -> list[str]:
    if dataclasses.is_dataclass(cause.object_type):
        return [field.name for field in dataclasses.fields(cause.object_type)]
    parent = getattr(cause, "parent_node", None)
    try:
        return [str(key) for key in parent.keys()] if parent is not None else []
    except Exception:  # noqa: BLE001  a node that cannot list its keys: say less
        return []


def _accepted_value(cause: OmegaConfBaseException) -> str | None:
    """What the key's declared type accepts, in words (None when the schema does not say)."""
    hint = None
    if dataclasses.is_dataclass(cause.object_type) and isinstance(cause.key, str):
        hint = typing.get_type_hints(cause.object_type).get(cause.key)
    elif isinstance(cause.key, int):  # an item of a typed list, e.g. eval.recall_n[1]
        arguments = typing.get_args(getattr(cause, "ref_type", None))
        hint = arguments[0] if arguments else None
    return _describe(hint)


def _describe(hint) -> str | None:
    words = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    if hint in words:
        return words[hint]
    arguments = [argument for argument in typing.get_args(hint) if argument is not type(None)]
    if typing.get_origin(hint) is list and arguments:
        item = _describe(arguments[0])
        return f"a list of {item.split(' ', 1)[-1]}s, e.g. [1,2]" if item else "a list"
    if type(None) in typing.get_args(hint) and len(arguments) == 1:
        described = _describe(arguments[0])
        return f"{described} or null" if described else None
    return None
