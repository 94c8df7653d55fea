"""Hydra's and OmegaConf's errors, which span several lines, as one line: the override or key at
fault and what is accepted (the section's keys, the value's type, the group's options)."""

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
)

# Lines of Hydra's and OmegaConf's messages that locate rather than explain.
_NOISE = ("full_key:", "object_type=", "reference_type=", "See https://hydra.cc",
          "Config search path", "provider=", "Set the environment variable HYDRA_FULL_ERROR")


def hydra_error_line(error: BaseException, overrides: typing.Sequence[str] = ()) -> str | None:
    """One line for an exception of Hydra or OmegaConf, None for any other (a bug);
    `overrides`: the command line's, to quote the one at fault as typed."""
    if isinstance(error, MissingConfigException) and "/" in (error.missing_cfg_file or ""):
        group, option = error.missing_cfg_file.rsplit("/", 1)
        # The schemas registered with Hydra (sgh.cli.schemas) are not options a user picks.
        options = [name for name in error.options or () if not name.endswith("_schema")]
        return f"{group}={option} is not a known option; accepted: {', '.join(options)}"
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


def override_parse_line(override: str, message: str) -> str:
    """An override Hydra's grammar cannot read: which one, where, and how to quote it."""
    lines = [line for line in message.splitlines() if line.strip()]
    reason = next((line for line in lines
                   if not line.startswith(("Error parsing override", "See https://"))), "")
    if reason.startswith("LexerNoViableAltException"):
        # Hydra's lexer marks the character it stopped at with a caret on the next line.
        caret = next((line.index("^") for line in lines if line.strip() == "^"), None)
        position = None if caret is None else caret - len("LexerNoViableAltException: ")
        reason = (f"it cannot read {override[position]!r} at position {position}"
                  if position is not None and 0 <= position < len(override)
                  else "it cannot read a character")
    if not override.isascii() and override.partition("=")[2]:  # left unquoted by sgh.cli
        quoting = ("letters beyond ASCII must be quoted: each value that has them in \"...\" "
                   "for Hydra, the whole override in '...' for the shell")
    else:
        quoting = ("write key=value, and quote a value holding spaces, commas, brackets, "
                   "quotes or other special characters: 'key=\"...\"' "
                   "(https://hydra.cc/docs/advanced/override_grammar/basic/)")
    return f"cannot read the override {override!r}: {reason}; {quoting}"


def _override_naming(full_key: str, overrides: typing.Sequence[str], message: str) -> str | None:
    """The override (as typed) that set `full_key`, an item below it or a section above it."""
    for override in reversed(overrides):
        key = override.partition("=")[0].lstrip("+~").partition("@")[0]
        if full_key == key or full_key.startswith((f"{key}.", f"{key}[")) \
                or key.startswith(f"{full_key}."):
            return override
    match = re.search(r"Error merging override (\S+)", message)
    return match.group(1) if match else None


def _key_line(cause: OmegaConfBaseException, override: str | None) -> str:
    full_key, key, schema = cause.full_key, cause.key, cause.object_type
    if isinstance(cause, MissingMandatoryValue):  # `???` in the YAML, not given
        if full_key == "dataset.path":
            from sgh.data.vector_files import ACCEPTED_SUFFIXES

            return ("dataset.path is missing: dataset=file reads your own file; add "
                    f"dataset.path=FILE ({', '.join(ACCEPTED_SUFFIXES)})")
        return f"{full_key} is missing (it has no default); add {full_key}=VALUE"
    stated = override or (full_key if cause.value is None else f"{full_key}={cause.value}")
    first = (_meaningful_lines(str(cause.msg or cause)) or [type(cause).__name__])[0]
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and " not in " in first:
        try:
            keys = ([field.name for field in dataclasses.fields(schema)]
                    if dataclasses.is_dataclass(schema) else list(map(str, cause.parent_node)))
        except Exception:  # noqa: BLE001  no parent, or one that cannot list its keys: say less
            keys = []
        return unknown_key_line(stated, full_key.rpartition(".")[0] or "the configuration", key,
                                keys, schema=schema)
    # OmegaConf's own line names the type the key accepts ("could not be converted to Integer").
    return f"{stated}: {first}"


# Keys that are gone, and what does their work now, by the schema that held them: their
# refusal says so (another command's key of the same name is merely unknown).
RETIRED_KEYS = {
    ("EvalConfig", "shortlist_by"): "eval.ranking=two_stage shortlists by the encoder score, "
                                    "as SGHIndex does",
    ("EvalConfig", "shortlist_radius"): "eval.ranking=two_stage shortlists the encoder score's "
                                        "top eval.shortlist, as SGHIndex does",
    ("EvalConfig", "rescore"): "eval.ranking=two_stage rescores by eval.score, as SGHIndex "
                               "does; exact distances on your own vectors: the search guide's "
                               "rescoring recipe",
    ("IndexBuildConfig", "decoder"): "the byte decoder's index is mode=bytes",
}


def unknown_key_line(stated: str, section: str, key, keys: typing.Sequence[str],
                     added: bool = False, schema=None) -> str:
    """A key its section (typed by ``schema``) does not have (misspelt, or added with `+`): the
    keys it has; or, for a key `RETIRED_KEYS` names, what does its work now."""
    if retired := RETIRED_KEYS.get((getattr(schema, "__name__", ""), key)):
        return f"{stated}: {section} has no key {key!r} any more; {retired}"
    accepted = f"accepted keys: {', '.join(keys)}" if keys else "accepted: its keys"
    adding = "; a key added with + would be ignored" if added else ""
    return (f"{stated}: {section} has no key {key!r}{adding}; {accepted} (--cfg job prints "
            "every key with its value)")
