"""Atomic writes: a file or a directory appears complete under its name, or not at all.

Everything is first written under a hidden temporary name in the target's own directory (so the
final rename never crosses file systems), then renamed onto the target. A crash, a full disk or a
Ctrl-C leaves the previous version, or nothing, never a half-written file that looks complete.
Temporary names start with `.<name>.` and end in `.tmp`.

Nothing is replaced that is not of the kind being written: a file never replaces a directory, and
a directory replaces only an empty one or one of its own `DirectoryKind` (a SavedModel, a saved
hasher), never a file or a folder of the user's (`UserInputError`, one line naming the path).
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sgh.errors import UserInputError, first_few


def _umask_mode(mode: int) -> int:
    # mkstemp/mkdtemp create 0600/0700 (private); results are ordinary files: honour the umask.
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


@contextmanager
def atomic_file(path: str | os.PathLike, suffix: str = ""):
    """Yield a temporary path next to `path`; rename it onto `path` if the block succeeds.

    `suffix` ends the temporary name, for writers that insist on an extension (`np.savez`
    appends `.npz` to a name without it). An existing file is replaced, as `np.save` replaces
    one; a directory is refused (`UserInputError`): a file never takes a directory's place.
    """
    path = Path(path)
    if path.is_dir():
        raise UserInputError(f"{path} is a directory, and a directory is never replaced by a "
                             "file; accepted: a file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + suffix,
                                         dir=path.parent)
    os.close(handle)
    os.chmod(temporary, _umask_mode(0o666))
    try:
        yield Path(temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


@dataclass(frozen=True)
class DirectoryKind:
    """What a directory written whole holds, so that only one of the same kind is replaced:
    every name in `required` is there, and nothing but those and `optional`. Recognised by its
    exact contents, so a user's folder that merely holds one of the names is not taken for it."""

    what: str  # for messages: "a SavedModel (saved_model.pb, variables/)"
    required: frozenset[str]
    optional: frozenset[str] = frozenset()
    optional_patterns: tuple[str, ...] = ()  # shell patterns of optional names (event files)

    def holds(self, directory: Path) -> bool:
        names = {entry.name for entry in directory.iterdir()}
        extra = {name for name in names - self.required - self.optional
                 if not any(fnmatch.fnmatchcase(name, pattern)
                            for pattern in self.optional_patterns)}
        return self.required <= names and not extra


def refuse_to_replace(path: str | os.PathLike, kind: DirectoryKind) -> None:
    """Refuse (`UserInputError`, one line naming `path`) unless a directory of `kind` may take
    `path`'s place: nothing is there, an empty directory, or a directory of the same `kind`.
    A file, a symbolic link (the link itself would be replaced) or any other folder is the
    user's, and the product never deletes what it did not write."""
    path = Path(path)
    accepted = f"accepted: a path that does not exist, an empty directory, or {kind.what}"
    if path.is_symlink():
        raise UserInputError(f"{path} is a symbolic link, which writing {kind.what} there would "
                             f"replace; {accepted}")
    if not path.exists():
        return
    if not path.is_dir():
        raise UserInputError(f"{path} is a file, and {kind.what} is a directory: a file is never "
                             f"replaced by a directory; {accepted}")
    entries = sorted(entry.name for entry in path.iterdir())
    if entries and not kind.holds(path):
        raise UserInputError(f"{path} holds files that are not {kind.what} "
                             f"({first_few(entries)}), which "
                             f"writing there would delete; {accepted}")


@contextmanager
def atomic_directory(path: str | os.PathLike, replaces: DirectoryKind | None = None):
    """Yield an empty temporary directory next to `path`; swap it in for `path` on success.

    A directory cannot be renamed over a non-empty one, so an existing `path` is first moved
    aside and deleted after the swap: at every instant `path` is absent, the old one, or the
    new one, complete. With `replaces`, what is at `path` is checked first
    (`refuse_to_replace`): only an empty directory or one of that kind is deleted. Without it
    the caller vouches that `path` holds only what it wrote itself.
    """
    path = Path(path)
    if replaces is not None:
        refuse_to_replace(path, replaces)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield temporary
        os.chmod(temporary, _umask_mode(0o777))
        if replaces is not None:  # again: something may have been put there while writing
            refuse_to_replace(path, replaces)
        _swap_in(temporary, path)
    finally:
        if temporary.exists():
            shutil.rmtree(temporary)


def _swap_in(new: Path, path: Path) -> None:
    if not path.exists() and not path.is_symlink():
        os.replace(new, path)
        return
    aside = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:8]}.tmp")
    os.replace(path, aside)
    os.replace(new, path)
    if aside.is_dir() and not aside.is_symlink():
        shutil.rmtree(aside)
    else:
        aside.unlink()


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_file(path) as temporary:
        temporary.write_bytes(data)


def _json_ready(value):
    """Plain JSON: numpy scalars to Python, NaN/Inf to null (JSON has no NaN)."""
    if isinstance(value, dict):
        return {key: _json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(item) for item in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: str | os.PathLike, payload: dict) -> None:
    """One JSON object (NaN/Inf written as null), atomically."""
    write_bytes(path, (json.dumps(_json_ready(payload), indent=2) + "\n").encode())
