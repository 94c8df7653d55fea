"""Who owns a run directory: one writer at a time, taken atomically, released when it dies.

`run_lock(run_dir)` holds an exclusive `flock` on `<run_dir>/.lock` for as long as the block
runs. The kernel drops the lock when its process exits in any way, `kill -9` included, so a lock
whose process is gone is simply taken by the next run; nothing has to be cleaned up by hand. The
holder writes its pid, host and start time into the file, so that a second writer is refused in
one line saying who holds the directory and what to do.

`flock` locks an open file, not a process: a second `run_lock` on the same directory is refused
inside one process too (a sweep runs its jobs one after the other, each in its own directory).
On NFS, Linux emulates `flock` with byte-range locks, which the server arbitrates between hosts.

`sgh-train` takes the lock before Hydra writes its `.hydra/` and log into the directory
(`take_before_hydra`), and its run goes on holding that same lock (`run_lock` adopts it): of two
commands started in the same instant on one directory, the refused one writes nothing there.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from sgh.artifacts.run_directory import LOCK_FILE, RunDirectory
from sgh.errors import UserInputError

TRAIN_IF_BUSY = "wait for it to finish, or choose another hydra.run.dir"
TRAIN_IF_READ_ONLY = "make it writable, or choose another hydra.run.dir"

# The holder writes its details right after taking the lock: a refused writer that reads the
# file in between waits this long for them before saying they are unknown.
_HOLDER_WAIT_SECONDS = 0.5

# Locks taken before Hydra ran (`take_before_hydra`), by the directory's (device, inode): the
# path Hydra hands the run may be spelt otherwise (relative, through `..` or a link).
_taken_before_hydra: dict[tuple[int, int], int] = {}


@contextmanager
def run_lock(run_dir: str | os.PathLike, program: str = "sgh-train",
             if_busy: str = TRAIN_IF_BUSY, if_read_only: str = TRAIN_IF_READ_ONLY
             ) -> Iterator[Path]:
    """Own `run_dir` (created if missing) for the block; yield its lock file.

    Args:
        run_dir: the run directory to write.
        program: who holds it, for the message a second writer gets (`sgh-train`, `sgh-export`).
        if_busy: what the refused writer should do, ending the one-line refusal.
        if_read_only: what to do when the directory cannot be written.

    Raises:
        UserInputError: another process holds the directory (the message names its pid, host
            and start time), or the directory cannot be created or written.
    """
    run_dir = Path(run_dir)
    lock_file = run_dir / LOCK_FILE
    descriptor = _adopted(run_dir)
    adopted = descriptor is not None
    if not adopted:
        descriptor = _open_lock_file(run_dir, program, if_read_only)
    try:
        if not adopted:
            _take_or_refuse(descriptor, run_dir, if_busy)
            _write_holder(descriptor, program)
        _require_writable(run_dir, if_read_only)  # the lock file may predate a chmod
        try:
            yield lock_file
        finally:
            # No stale details for the next reader; the lock itself goes with the descriptor.
            os.ftruncate(descriptor, 0)
    finally:
        os.close(descriptor)


def take_before_hydra(run_dir: str | os.PathLike, program: str = "sgh-train",
                      if_busy: str = TRAIN_IF_BUSY,
                      if_read_only: str = TRAIN_IF_READ_ONLY) -> None:
    """Take `run_dir`'s lock now (the directory and its lock file created if missing), for
    this process's `run_lock` of the same directory to go on holding; refuse, as `run_lock`
    would, when another process holds it. `sgh-train` calls it before Hydra writes `.hydra/`
    and `train.log` there, so a refused command leaves the running one's files untouched."""
    run_dir = Path(run_dir)
    descriptor = _adopted(run_dir)  # an earlier command of this process took it already
    if descriptor is not None:
        _taken_before_hydra[_identity(run_dir)] = descriptor
        return
    descriptor = _open_lock_file(run_dir, program, if_read_only)
    try:
        _take_or_refuse(descriptor, run_dir, if_busy)
        _write_holder(descriptor, program)
    except BaseException:
        os.close(descriptor)
        raise
    _taken_before_hydra[_identity(run_dir)] = descriptor


def _adopted(run_dir: Path) -> int | None:
    """This process's lock of `run_dir` taken before Hydra, if its lock file is still that
    directory's (not one of a deleted directory whose inode a new one reuses)."""
    descriptor = _taken_before_hydra.pop(_identity(run_dir), None)
    if descriptor is not None and _identity(run_dir / LOCK_FILE) != _identity(descriptor):
        os.close(descriptor)
        return None
    return descriptor


def _identity(place: Path | int) -> tuple[int, int] | None:
    """(device, inode) of a path or an open descriptor; None when it is gone."""
    try:
        status = os.fstat(place) if isinstance(place, int) else os.stat(place)
    except OSError:
        return None
    return status.st_dev, status.st_ino


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
        descriptor, probe = tempfile.mkstemp(prefix=f".{LOCK_FILE}.", suffix=".tmp",
                                             dir=run_dir)
    except OSError as error:
        raise _not_writable(run_dir, error, if_read_only) from None
    os.close(descriptor)
    os.unlink(probe)


def _not_writable(run_dir: Path, error: OSError, if_read_only: str) -> UserInputError:
    return UserInputError(f"cannot write the run directory {run_dir} "
                          f"({error.strerror or error}); {if_read_only}")


def existing_paths(run_dir: str | os.PathLike) -> frozenset[Path]:
    """What exists now of `run_dir` (absolute): the directory, its parents and its entries;
    what a start refused later must leave as it found it (`remove_a_refused_start`)."""
    path = Path(os.path.abspath(run_dir))
    existing = {part for part in (path, *path.parents) if part.exists()}
    if path.is_dir():
        existing.update(path / name for name in os.listdir(path))
    return frozenset(existing)


def remove_a_refused_start(run_dir: str | os.PathLike, existed: frozenset[Path]) -> None:
    """Remove what a run refused at its start made of `run_dir`: the entries Hydra and the lock
    put there, the directory and the parents made for it (a directory without a run would be
    taken for one: `sgh-compare` counts it as a job without results). Only while the run wrote
    nothing of its own there (`RunDirectory.holds_nothing_of_a_run`) and no other process holds
    the directory; what `existed` before the command (`existing_paths`) stays."""
    path = Path(os.path.abspath(run_dir))
    if not path.is_dir() or not RunDirectory(path, create=False).holds_nothing_of_a_run():
        return
    # This process's own lock, when the run was refused before it adopted it.
    descriptor = _adopted(path)
    if descriptor is None and (path / LOCK_FILE).is_file():
        try:
            descriptor = os.open(path / LOCK_FILE, os.O_RDONLY)
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held (another run starting there: its directory), or unreadable
            if descriptor is not None:
                os.close(descriptor)
            return
    try:
        for entry in path.iterdir():
            if entry not in existed:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
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
        raise UserInputError(f"{run_dir} is in use by {_holder(descriptor)}; {if_busy}") \
            from None
