"""Who owns a run directory: one writer at a time, taken atomically, released when it dies.

`run_lock(run_dir)` holds an exclusive `flock` on `<run_dir>/.lock` while the block runs; the
kernel drops it when its process exits in any way, `kill -9` included. The holder writes its pid,
host and start time into the file, for the one-line refusal of a second writer. `flock` locks an
open file, not a process, so a second `run_lock` is refused inside one process too; on NFS, the
server arbitrates the byte-range locks Linux emulates it with.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from sgh.artifacts.atomic import delete_path, lock_or_none
from sgh.artifacts.run_directory import LOCK_FILE, RunDirectory, file_identity
from sgh.errors import UserInputError

TRAIN_IF_BUSY = "wait for it to finish, or choose another hydra.run.dir"
TRAIN_IF_READ_ONLY = "make it writable, or choose another hydra.run.dir"

# How long a refused writer waits for the holder's details, written right after the lock.
_HOLDER_WAIT_SECONDS = 0.5

# Locks taken before Hydra ran, by the directory's (device, inode): the path Hydra hands the run
# may be spelt otherwise (relative, through `..` or a link).
_taken_before_hydra: dict[tuple[int, int], int] = {}


@contextmanager
def run_lock(run_dir: str | os.PathLike, program: str = "sgh-train",
             if_busy: str = TRAIN_IF_BUSY, if_read_only: str = TRAIN_IF_READ_ONLY
             ) -> Iterator[Path]:
    """Own `run_dir` (created if missing) for the block; yield its lock file. UserInputError,
    ending with `if_busy` or `if_read_only`, when another process holds it or it is unwritable."""
    run_dir = Path(run_dir)
    descriptor = _taken(run_dir, program, if_busy, if_read_only)
    try:
        _require_writable(run_dir, if_read_only)  # the lock file may predate a chmod
        try:
            yield run_dir / LOCK_FILE
        finally:
            # No stale details for the next reader; the lock itself goes with the descriptor.
            os.ftruncate(descriptor, 0)
    finally:
        os.close(descriptor)


def take_before_hydra(run_dir: str | os.PathLike) -> None:
    """Take `run_dir`'s lock before Hydra writes `.hydra/` and its log there, for this process's
    `run_lock` to go on holding: of two commands started at once, the refused one writes nothing."""
    run_dir = Path(run_dir)
    descriptor = _taken(run_dir, "sgh-train", TRAIN_IF_BUSY, TRAIN_IF_READ_ONLY)
    _taken_before_hydra[file_identity(run_dir)] = descriptor  # the directory exists now


def _taken(run_dir: Path, program: str, if_busy: str, if_read_only: str) -> int:
    """A descriptor holding `run_dir`'s lock: taken before Hydra by this process, or now."""
    descriptor = _adopted(run_dir)
    if descriptor is not None:
        return descriptor
    descriptor = _open_lock_file(run_dir, program, if_read_only)
    try:
        _take_or_refuse(descriptor, run_dir, if_busy)
        _write_holder(descriptor, program)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def _adopted(run_dir: Path) -> int | None:
    """This process's lock of `run_dir` taken before Hydra, if its lock file is still that
    directory's (not one of a deleted directory whose inode a new one reuses)."""
    descriptor = _taken_before_hydra.pop(file_identity(run_dir), None)
    if descriptor is not None and file_identity(run_dir / LOCK_FILE) != file_identity(descriptor):
        os.close(descriptor)
        return None
    return descriptor


def _open_lock_file(run_dir: Path, program: str, if_read_only: str) -> int:
    lock_file = run_dir / LOCK_FILE
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        return os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o666)
    except IsADirectoryError:  # not the directory's fault: the lock's own name is taken
        raise UserInputError(f"{lock_file} is a directory, where {program} keeps its lock file; "
                             "move it away, then run the command again") from None
    except OSError as error:
        if error.errno in (errno.EMFILE, errno.ENFILE):
            raise  # a limit of the process, not of the directory (sgh.cli.boundary says which)
        raise _not_writable(run_dir, error, if_read_only) from None


def _write_holder(descriptor: int, program: str) -> None:
    holder = {"program": program, "pid": os.getpid(), "host": socket.gethostname(),
              "since": datetime.now().astimezone().isoformat(timespec="seconds")}
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, (json.dumps(holder) + "\n").encode(), 0)


def _holder(descriptor: int) -> str:
    """`sgh-train (pid 123 on host, since 2026-12-01T11:19:03+00:00)`, as the holder wrote it."""
    deadline = time.monotonic() + _HOLDER_WAIT_SECONDS
    while True:
        try:
            holder = json.loads(os.pread(descriptor, 4096, 0) or b"null")
        except ValueError:  # being written this instant
            holder = None
        if isinstance(holder, dict) or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    if not isinstance(holder, dict):
        return "another process (its pid is not written yet)"
    return (f"{holder.get('program', 'another process')} (pid {holder.get('pid', '?')} on "
            f"{holder.get('host', '?')}, since {holder.get('since', '?')})")


def _require_writable(run_dir: Path, if_read_only: str) -> None:
    try:  # a real write: permission bits, ACLs and read-only mounts all answer the same way
        # Named as `sgh.artifacts.atomic` names temporaries: a killed run's is cleared.
        descriptor, probe = tempfile.mkstemp(prefix=f".{LOCK_FILE}.", suffix=".tmp", dir=run_dir)
    except OSError as error:
        raise _not_writable(run_dir, error, if_read_only) from None
    os.close(descriptor)
    os.unlink(probe)


def _not_writable(run_dir: Path, error: OSError, if_read_only: str) -> UserInputError:
    return UserInputError(f"cannot write the run directory {run_dir} "
                          f"({error.strerror or error}); {if_read_only}")


def existing_paths(run_dir: str | os.PathLike) -> frozenset[Path]:
    """What exists now of `run_dir` (absolute): the directory, its parents and its entries."""
    path = Path(os.path.abspath(run_dir))
    existing = {part for part in (path, *path.parents) if part.exists()}
    if path.is_dir():
        existing.update(path / name for name in os.listdir(path))
    return frozenset(existing)


def remove_a_refused_start(run_dir: str | os.PathLike, existed: frozenset[Path]) -> None:
    """Remove what a run refused at its start made of `run_dir` and its parents, but what
    `existed` (`sgh-compare` would count the directory as a job without results); only while the
    run wrote nothing of its own there and no other process holds it."""
    path = Path(os.path.abspath(run_dir))
    if not path.is_dir() or not RunDirectory(path, create=False).holds_nothing_of_a_run():
        return
    # This process's own lock, when the run was refused before it adopted it.
    descriptor = _adopted(path)
    if descriptor is None and (path / LOCK_FILE).is_file():
        descriptor = lock_or_none(path / LOCK_FILE, blocking=False)
        if descriptor is None:  # held (another run starting there: its directory), or unreadable
            return
    try:
        for entry in path.iterdir():
            if entry not in existed:
                delete_path(entry)
    finally:
        if descriptor is not None:
            os.close(descriptor)
    for directory in (path, *path.parents):
        if directory in existed:
            break
        try:
            directory.rmdir()
        except OSError:  # not empty: something else is there now
            break


def _take_or_refuse(descriptor: int, run_dir: Path, if_busy: str) -> None:
    """Take the exclusive lock on the open lock file, or refuse naming who holds it."""
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise UserInputError(f"{run_dir} is in use by {_holder(descriptor)}; {if_busy}") from None


def refuse_a_run_being_written(run_dir: str | os.PathLike, missing: str) -> None:
    """UserInputError when `run_dir` lacks `missing` (a file its run writes at the end) because
    a process holds its lock (a run still training): say so and who, not that the run is not
    one. Looked at only where the file is missing: a look takes the lock for an instant."""
    lock_file = Path(run_dir) / LOCK_FILE
    try:  # its holder writes its details after taking it, and empties the file on release
        descriptor = os.open(lock_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return
    try:
        if os.fstat(descriptor).st_size == 0:
            return
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return  # nobody holds it: the details of a killed holder
        except OSError:
            holder = _holder(descriptor)
    finally:
        os.close(descriptor)
    raise UserInputError(f"run={run_dir} is still being written by {holder}, which writes its "
                         f"{missing} when it finishes (a run still training); wait for it to "
                         "finish, then run this command again")
