"""Atomic writes: a file or a directory appears complete under its name, or not at all.

Everything is written under a temporary name beside the target (so the rename never crosses file
systems), then renamed onto it: a crash, a full disk or a Ctrl-C leaves the previous version, or
nothing. Temporaries (`staging`) are named `.<name>.XXXXXXXX.tmp` and locked (`flock`) by their
writer while it fills them; the kernel drops a killed writer's lock, so the next writer of the
same target removes the temporaries nobody holds (`remove_abandoned_staging`). What may be
replaced is decided in one place, `refuse_to_replace`.
"""

from __future__ import annotations

import errno
import fcntl
import fnmatch
import json
import math
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sgh.errors import UserInputError, first_few


def _umask_mode(mode: int) -> int:
    # mkstemp/mkdtemp create 0600/0700 (private); results are ordinary files: honour the umask.
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


@dataclass(frozen=True)
class FileKind:
    """What a file written whole is: only a file that `recognises(path)` accepts is replaced."""

    what: str  # for messages: "sgh-compare's own output"
    recognises: Callable[[Path], bool] = lambda path: True


# The kind of a writer that replaces any file at its name, as `np.save` does.
ANY_FILE = FileKind("a file")


@dataclass(frozen=True)
class DirectoryKind:
    """What a directory written whole holds: every name in `required`, and nothing but those and
    `optional`; exact, so a user's folder that merely holds one of the names is not taken for it."""

    what: str  # for messages: "a SavedModel (saved_model.pb, variables/)"
    required: frozenset[str]
    optional: frozenset[str] = frozenset()
    optional_patterns: tuple[str, ...] = ()  # shell patterns of optional names (event files)
    # A file `atomic_directory` puts in every one it writes: the writer's mark, where names
    # alone could be a user's (a folder of files named index.npz and scores.npz, say).
    marker: str | None = None

    def holds(self, directory: Path) -> bool:
        names = {entry.name for entry in directory.iterdir()}
        marked = {self.marker} if self.marker else set()
        extra = {name for name in names - self.required - self.optional - marked
                 if not any(fnmatch.fnmatchcase(name, pattern)
                            for pattern in self.optional_patterns)}
        return self.required | marked <= names and not extra


def refuse_to_replace(path: str | os.PathLike, kind: FileKind | DirectoryKind,
                      setting: str | None = None, elsewhere: str | None = None) -> None:
    """Refuse (`UserInputError`, one line naming `path`) unless a `kind` written at `path` would
    replace nothing but an earlier one of its kind, or an empty directory. A symbolic link (the
    link would be replaced, not its target) or anything else is the user's. `setting`: the key
    that chose `path` (`out`); `elsewhere`: what to suggest instead of another `setting=...`."""
    path = Path(path)
    named = f"{setting}={path}" if setting else str(path)
    elsewhere = elsewhere or (f"write elsewhere ({setting}=...)" if setting else "write elsewhere")
    if path.is_symlink():
        raise UserInputError(
            f"{named} is a symbolic link (to {os.readlink(path)}), and writing {kind.what} "
            f"there would replace the link itself; accepted: a path that is not a link: "
            f"{elsewhere}, or name the link's target itself")
    if not path.exists():
        return
    if isinstance(kind, FileKind):
        if path.is_dir():
            raise UserInputError(f"{named} is a directory, and a directory is never replaced "
                                 "by a file; accepted: a file name")
        if not path.is_file():
            raise UserInputError(f"{named} is not a regular file (a pipe, a device or a "
                                 f"socket), which is never replaced; {elsewhere}")
        if not kind.recognises(path):
            raise UserInputError(f"{named} is not {kind.what}, and sgh never replaces a file it "
                                 f"did not write; accepted: {elsewhere}, or move the file away")
        return
    accepted = f"accepted: a path that does not exist, an empty directory, or {kind.what}"
    if not path.is_dir():
        raise UserInputError(f"{named} is a file, and {kind.what} is a directory: a file is "
                             f"never replaced by a directory; {accepted}")
    try:
        entries = sorted(entry.name for entry in path.iterdir())
        ours = not entries or kind.holds(path)
    except FileNotFoundError:  # moved aside this instant by another writer: nothing to replace
        return
    if not ours:
        unmarked = (f"; no {kind.marker}, the mark of one, is there" if kind.marker
                    and kind.marker not in entries else "")
        raise UserInputError(
            f"{named} holds files that are not {kind.what} ({first_few(entries)}{unmarked}), "
            f"which writing there would delete; {accepted}")


def staging_names_of(path: Path) -> str:
    """The shell pattern of the temporaries of `path` (`.<name>.*.tmp*`)."""
    return f".{path.name}.*.tmp*"


def lock_or_none(path: Path, blocking: bool) -> int | None:
    """An open descriptor of `path` holding its exclusive `flock`; None when another process
    holds it (not `blocking`) or `path` cannot be opened (gone, not ours to open)."""
    try:  # O_NONBLOCK: opening a named pipe must not wait for a writer
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except OSError:  # BlockingIOError: its writer is alive
        os.close(descriptor)
        return None
    return descriptor


def delete_path(path: Path) -> None:
    """Delete a file or directory (not what a link points to); one already gone is fine."""
    with suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def remove_abandoned_staging(path: str | os.PathLike) -> list[Path]:
    """Delete, and return, the temporaries of `path` nobody holds the lock of (their writer was
    killed). Each is deleted under its lock, so a new writer can never take one that is going."""
    path = Path(path)
    removed = []
    for candidate in sorted(path.parent.glob(staging_names_of(path))):
        descriptor = lock_or_none(candidate, blocking=False)
        if descriptor is None:
            continue
        try:
            delete_path(candidate)
        finally:
            os.close(descriptor)
        removed.append(candidate)
    return removed


def _new_locked_temporary(path: Path, suffix: str, directory: bool) -> tuple[int, Path]:
    """A new temporary for `path` and the descriptor holding its lock. Another writer's clean-up
    may take it for abandoned before it is locked: then it is made again."""
    prefix, end = f".{path.name}.", ".tmp" + suffix
    while True:
        if directory:  # private (0700) until the caller has filled it: atomic_directory
            temporary = Path(tempfile.mkdtemp(prefix=prefix, suffix=end, dir=path.parent))
            descriptor = os.open(temporary, os.O_RDONLY | os.O_DIRECTORY)
        else:
            descriptor, name = tempfile.mkstemp(prefix=prefix, suffix=end, dir=path.parent)
            temporary = Path(name)
            os.chmod(temporary, _umask_mode(0o666))
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        with suppress(FileNotFoundError):
            if os.path.samestat(os.fstat(descriptor), os.lstat(temporary)):
                return descriptor, temporary
        os.close(descriptor)


@contextmanager
def staging(path: str | os.PathLike, suffix: str = "", directory: bool = False) -> Iterator[Path]:
    """Yield a new temporary file (or `directory`) beside `path`, locked while the block runs, for
    the block to rename into place; earlier writers' abandoned temporaries are removed first."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned_staging(path)
    descriptor, temporary = _new_locked_temporary(path, suffix, directory)
    try:
        yield temporary
    finally:
        try:
            delete_path(temporary)
        finally:
            os.close(descriptor)


@contextmanager
def atomic_file(path: str | os.PathLike, suffix: str = "", replaces: FileKind = ANY_FILE):
    """Yield a temporary path next to `path`; rename it onto `path` if the block succeeds.
    `suffix` ends the temporary name (`np.savez` appends `.npz` to a name without it). Only a file
    `replaces` recognises is replaced (`refuse_to_replace`, before and after the block)."""
    path = Path(path)
    refuse_to_replace(path, replaces)
    with staging(path, suffix) as temporary:
        yield temporary
        refuse_to_replace(path, replaces)  # again: something may have been put there meanwhile
        os.replace(temporary, path)


@contextmanager
def atomic_directory(path: str | os.PathLike, replaces: DirectoryKind | None = None):
    """Yield an empty temporary directory next to `path`; swap it in for `path` on success (an old
    one is moved aside, then deleted). With `replaces`, only an empty directory or one of that
    kind is replaced; without it the caller vouches that `path` holds only its own files."""
    path = Path(path)
    if replaces is not None:
        refuse_to_replace(path, replaces)
    with staging(path, directory=True) as temporary:
        yield temporary
        if replaces is not None and replaces.marker:
            (temporary / replaces.marker).write_text(f"written by sgh: {replaces.what}\n")
        os.chmod(temporary, _umask_mode(0o777))
        if replaces is not None:  # again: something may have been put there while writing
            refuse_to_replace(path, replaces)
        _swap_in(temporary, path)


def _swap_in(new: Path, path: Path) -> None:
    """Rename `new` onto `path`, an old version moved aside first. Another writer of `path` at
    the same moment: the one whose rename comes first wins; this one gets one line."""
    while True:
        if not path.exists() and not path.is_symlink():
            _rename_unless_taken(new, path)
            return
        # The old version, moved aside under a temporary's name, stays locked until it is
        # deleted: another writer's clean-up takes only an abandoned one.
        descriptor = lock_or_none(path, blocking=True)
        aside = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:8]}.tmp")
        try:
            try:
                os.replace(path, aside)
            except FileNotFoundError:  # another writer moved it aside this instant: look again
                continue
            try:
                _rename_unless_taken(new, path)
            finally:
                delete_path(aside)
            return
        finally:
            if descriptor is not None:
                os.close(descriptor)


def _rename_unless_taken(new: Path, path: Path) -> None:
    try:
        os.replace(new, path)
    except OSError as error:  # another writer's directory took the name since it was free
        if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        raise UserInputError(f"{path} was written by another process while this one was "
                             "writing it (two writers of one output at once); it is left as "
                             "that one wrote it and this result is dropped; run this again to "
                             "replace it, or write elsewhere") from None


def write_bytes(path: str | os.PathLike, data: bytes, replaces: FileKind = ANY_FILE) -> None:
    with atomic_file(path, replaces=replaces) as temporary:
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
