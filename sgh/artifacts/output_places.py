"""The places a command writes: refused before any work when they cannot be written
(`check_writable_place`, `refuse_a_folder_that_holds_no_sweep`), and an error met while writing
told in one line (`disk_error_line`)."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import yaml

from sgh.artifacts.atomic import ANY_FILE, refuse_to_replace
from sgh.artifacts.run_directory import RunDirectory
from sgh.errors import UserInputError, causes, first_few

# A place's errors the user can fix, and what to do ("write elsewhere" gets the output setting).
_DISK_ERRORS = {
    errno.ENOSPC: "no space left on device; free some space, or write elsewhere",
    errno.EDQUOT: "disk quota exceeded; free some space, or write elsewhere",
    errno.EROFS: "read-only file system; write elsewhere",
    errno.EACCES: "permission denied; change its permissions, or use another path",
    errno.EPERM: "operation not permitted; change its permissions, or use another path",
    errno.ENOTDIR: "a part of this path is a file, not a directory; choose another path",
}
# TensorFlow's file system raises its own errors (tf.errors.*), which carry only the text.
_DISK_ERROR_TEXTS = {"No space left on device": errno.ENOSPC, "Disk quota exceeded": errno.EDQUOT,
                     "Read-only file system": errno.EROFS, "Permission denied": errno.EACCES}


def disk_error_line(error: BaseException, output_key: str | None = None,
                    output_path: str | os.PathLike | None = None) -> str | None:
    """One line for a full, read-only or forbidden place, or a path too long, anywhere in
    `error`'s chain, else None. `output_path`: where the command writes, named when the error
    names no file (a `write` to a full disk); `output_key`: the setting that moves it (`out`)."""
    elsewhere = f" ({output_key}=...)" if output_key else ""
    for cause in causes(error):
        code = cause.errno if isinstance(cause, OSError) else None
        if code == errno.ENAMETOOLONG:
            named = cause.filename or output_path
            problem = path_length_problem(named) if named else None
            return (f"{shortened(named) if named else 'a path'}: "
                    f"{problem or 'a file name or the path is too long; choose a shorter one'}"
                    f"{elsewhere}")
        if code == errno.EEXIST and cause.filename and Path(cause.filename).is_file():
            return (f"{cause.filename}: is a file, where a directory is needed; choose another "
                    f"path{elsewhere}")  # os.makedirs onto a file
        if code not in _DISK_ERRORS and type(cause).__module__.startswith("tensorflow"):
            code = next((value for text, value in _DISK_ERROR_TEXTS.items()
                         if text in str(cause)), None)
        if code in _DISK_ERRORS:
            advice = _DISK_ERRORS[code]
            path = cause.filename if isinstance(cause, OSError) else None
            return (f"{path or output_path or 'the output'}: {advice}"
                    f"{elsewhere if advice.endswith('write elsewhere') else ''}")
    return None


def _path_limit(path: Path, name: str, usual: int) -> int:
    """`os.pathconf`'s limit `name` on the file system of `path`'s nearest existing part."""
    existing = Path(os.path.abspath(path))
    # os.path.exists, not Path.exists: a path too long to look up is not there, not an error.
    while not os.path.exists(existing) and existing != existing.parent:
        existing = existing.parent
    try:
        return os.pathconf(existing, name)
    except (OSError, ValueError):  # not answered here: Linux's
        return usual


def path_length_problem(path: str | os.PathLike) -> str | None:
    """What makes `path` too long for its file system, in words, or None: a name beyond
    NAME_MAX bytes, or the absolute path beyond PATH_MAX (the final NUL included)."""
    path = Path(path)
    name_max = _path_limit(path, "PC_NAME_MAX", 255)
    for part in path.parts:
        size = len(os.fsencode(part))
        if size > name_max:
            return (f"the name {part[:24]!r}... is {size} bytes; a file name may have at most "
                    f"{name_max} bytes, choose a shorter one")
    path_max = _path_limit(path, "PC_PATH_MAX", 4096)
    size = len(os.fsencode(os.path.abspath(path)))
    if size >= path_max:
        return (f"the path is {size} bytes (absolute); a path may have at most {path_max - 1} "
                f"bytes, whatever its names (each at most {name_max}), choose a shorter one")
    return None


def shortened(path: str | os.PathLike) -> str:
    """A path for a one-line message: a very long one by its start and its end."""
    text = str(path)
    return text if len(text) <= 160 else f"{text[:80]}...{text[-60:]}"


def check_writable_place(setting: str, path: str | os.PathLike, directory_wanted: bool) -> None:
    """Refuse, before any work, a place `setting` chose that the command could not write (the
    wrong kind, not its to replace, read-only or forbidden, a name or a path too long)."""
    path = Path(path)
    too_long = path_length_problem(path)
    if too_long:
        raise UserInputError(f"{setting}={shortened(path)}: {too_long}")
    if directory_wanted and path.exists() and not path.is_dir():
        raise UserInputError(f"{setting}={path} is a file; accepted: a directory (a new one, "
                             "or an earlier run's to resume it)")
    if not directory_wanted and path.is_dir():
        raise UserInputError(f"{setting}={path} is a directory; accepted: a file name")
    if not directory_wanted:
        refuse_to_replace(path, ANY_FILE, setting)
    existing = path if directory_wanted and path.is_dir() else path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise UserInputError(f"{setting}={path}: {existing} is a file, so nothing can be made "
                             "below it; choose another path")
    # access() answers for the real user and read-only mounts (root included: EROFS).
    if existing.is_dir() and not os.access(existing, os.W_OK | os.X_OK):
        raise UserInputError(f"{setting}={path}: {existing} is not writable (read-only or "
                             f"permission denied); choose a place you can write ({setting}=...)")


def _hydras_record_of_an_sgh_sweep(entry: Path) -> bool:
    """`multirun.yaml` recording an sgh-train sweep, or the Optuna sweeper's
    `optimization_results.yaml`; another tool's file of that name is not."""
    if entry.name not in ("multirun.yaml", "optimization_results.yaml") or entry.is_symlink() \
            or not entry.is_file():
        return False
    try:
        recorded = yaml.safe_load(entry.read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return False
    if entry.name == "optimization_results.yaml":
        return isinstance(recorded, dict) and recorded.get("name") == "optuna"
    # sgh-train's settings: a `model` with its `name` and `bits`, `dataset`, `trainer`, `hydra`.
    model = recorded.get("model") if isinstance(recorded, dict) else None
    return (isinstance(model, dict) and isinstance(model.get("name"), str)
            and isinstance(model.get("bits"), int) and not isinstance(model.get("bits"), bool)
            and all(isinstance(recorded.get(section), dict)
                    for section in ("dataset", "trainer", "hydra")))


def refuse_a_folder_that_holds_no_sweep(directory: Path,
                                        also_a_sweeps: Callable[[Path], bool]) -> None:
    """A sweep writes into a new or empty directory, or an earlier sgh sweep's: one holding only
    Hydra's record of the sweep, job directories and what `also_a_sweeps` accepts (sgh-compare's
    outputs). Anything else is the user's, which Hydra would write over or beside."""
    if not directory.is_dir():
        return

    def of_a_sweep(entry: Path) -> bool:
        if _hydras_record_of_an_sgh_sweep(entry) or also_a_sweeps(entry):
            return True
        return entry.is_dir() and not entry.is_symlink() and (
            (entry / ".hydra").is_dir() or RunDirectory(entry, create=False).holds_a_run())

    entries = sorted(entry.name for entry in directory.iterdir() if not of_a_sweep(entry))
    if entries:
        raise UserInputError(
            f"hydra.sweep.dir={directory} is not a sweep directory (it holds "
            f"{first_few(entries)}), and sgh never writes over what it did not write; accepted: "
            "a new or empty directory, or an earlier sweep's to resume it")
