"""The command-line boundary: how errors become one line on stderr and an exit status.

    0    success
    2    bad input (`UserInputError`): one line naming the file, key or value, and what is accepted;
         also Hydra's own errors (`sgh.cli.hydra_errors`) and a full, read-only or forbidden
         place to write (`OSError` ENOSPC, EDQUOT, EROFS, EACCES, ...), named by its path;
         and a process limit reached (too many open files, too little memory or address space,
         TensorFlow's load included): which limit, its value, and what to do
    3    training diverged (`TrainingDiverged`): the step and what to change
    130  interrupted (SIGINT or SIGTERM, as for Ctrl-C in a shell), at any phase: the line says
         how to resume; files are written whole or not at all (`sgh.artifacts.atomic`)

`SGH_DEBUG=1` (any value but empty or 0) prints the traceback above the line too. Every other
exception is a bug and keeps its traceback. The library's Python warnings (`warnings.warn`, for
Python callers) reach a command's user through the `sgh` logger, as every other warning does:
`PROGRAM: warning: message` on the console, and into a run's train.log.
"""

from __future__ import annotations

import atexit
import errno
import gc
import logging
import os
import signal
import sys
import threading
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path

from sgh.artifacts.atomic import ANY_FILE, refuse_to_replace
from sgh.errors import TrainingDiverged, TrainingInterrupted, UserInputError, one_line

# Ending a process that has imported TensorFlow is slow, and almost all of it is the
# interpreter's final garbage collections (walking TensorFlow's millions of objects).
# By the time atexit runs a command's files are whole (atomic renames, closed writers), so the
# objects still alive are frozen out of those collections; the interpreter still runs the other
# atexit handlers, flushes the standard streams and tears down its modules.
atexit.register(gc.freeze)

USAGE_ERROR_EXIT_CODE = 2
DIVERGED_EXIT_CODE = 3
INTERRUPTED_EXIT_CODE = 130

# The errors of a place to write (or read) that are the user's to fix, not bugs: what each
# means and what to do ("write elsewhere" gets the command's output setting appended).
_DISK_ERRORS = {
    errno.ENOSPC: "no space left on device; free some space, or write elsewhere",
    errno.EDQUOT: "disk quota exceeded; free some space, or write elsewhere",
    errno.EROFS: "read-only file system; write elsewhere",
    # Reading or writing: no "write elsewhere" (and no output setting) for these.
    errno.EACCES: "permission denied; change its permissions, or use another path",
    errno.EPERM: "operation not permitted; change its permissions, or use another path",
    errno.ENOTDIR: "a part of this path is a file, not a directory; choose another path",
}
# TensorFlow's file system raises its own errors (tf.errors.*), which carry only the text.
_DISK_ERROR_TEXTS = {
    "No space left on device": errno.ENOSPC,
    "Disk quota exceeded": errno.EDQUOT,
    "Read-only file system": errno.EROFS,
    "Permission denied": errno.EACCES,
}


def _limit_text(limit: str, unit: str) -> str:
    """The soft value of the process limit `resource.<limit>`, as `ulimit` states it."""
    try:
        import resource

        soft = resource.getrlimit(getattr(resource, limit))[0]
    except (ImportError, AttributeError, OSError, ValueError):  # no such limit here (Windows)
        return "unknown"
    if soft == resource.RLIM_INFINITY:
        return "unlimited"
    return f"{soft // 1024} KiB" if unit == "KiB" else str(soft)


def _too_many_open_files(cause: BaseException) -> bool:
    if isinstance(cause, OSError) and cause.errno in (errno.EMFILE, errno.ENFILE):
        return True
    # TensorFlow's file system raises tf.errors.* with the text only.
    return type(cause).__module__.startswith("tensorflow") and "Too many open files" in str(
        cause)


def _out_of_memory(cause: BaseException) -> bool:
    return isinstance(cause, MemoryError) or (isinstance(cause, OSError)
                                             and cause.errno == errno.ENOMEM)


def resource_limit_line(error: BaseException) -> str | None:
    """One line for a process limit reached anywhere in `error`'s chain (too many open files,
    out of memory or address space), naming the limit and its value; else None."""
    for cause in _causes(error):
        if _too_many_open_files(cause):
            system = isinstance(cause, OSError) and cause.errno == errno.ENFILE
            which = ("the system's limit on open files" if system else
                     "the limit on open files of this process (ulimit -n: "
                     f"{_limit_text('RLIMIT_NOFILE', 'files')})")
            return (f"too many open files: {which} was reached; raise it (e.g. ulimit -n 4096 "
                    "in the shell that runs the command) and run the same command again")
        if _out_of_memory(cause):
            space = _limit_text("RLIMIT_AS", "KiB")
            what = one_line(cause) if str(cause) else "an allocation failed"
            if space == "unlimited":
                return (f"out of memory ({what}): no address-space limit is set (ulimit -v: "
                        "unlimited), so the machine has too little free memory for it; free "
                        "some, or use less (dataset.streaming=always, a smaller "
                        "trainer.batch_size), and run the same command again")
            return (f"out of memory ({what}): the address-space limit of this process (ulimit "
                    f"-v: {space}) was reached; raise it (e.g. ulimit -v unlimited; TensorFlow "
                    "alone reserves several GiB of address space) and run the same command "
                    "again")
    return None


def debug_requested() -> bool:
    return os.environ.get("SGH_DEBUG", "") not in ("", "0")


def _report(program: str, line: str, status: int):
    if debug_requested():
        traceback.print_exc()
    print(f"{program}: {line}", file=sys.stderr, flush=True)
    sys.exit(status)


def _causes(error: BaseException):
    """The error and what it was raised from or during, innermost last (a bounded walk)."""
    seen = []
    while error is not None and len(seen) < 16 and all(error is not e for e in seen):
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


def disk_error_line(error: BaseException, output_key: str | None = None,
                    output_path: str | os.PathLike | None = None) -> str | None:
    """One line for a full, read-only or forbidden place anywhere in `error`'s chain, else None.

    The path is the error's own file name, or `output_path` (where the command writes) when the
    error has none (a `write` that hits a full disk names no file); `output_key` is the setting
    that chooses another place (`hydra.run.dir`, `out`, `--out`).
    """
    for cause in _causes(error):
        code, path = None, None
        if isinstance(cause, OSError) and cause.errno == errno.ENAMETOOLONG:
            named = cause.filename or output_path
            problem = path_length_problem(named) if named else None
            return (f"{_shortened(named) if named else 'a path'}: "
                    f"{problem or 'a file name or the path is too long; choose a shorter one'}"
                    + (f" ({output_key}=...)" if output_key else ""))
        if isinstance(cause, OSError) and cause.errno in _DISK_ERRORS:
            code, path = cause.errno, cause.filename
        elif isinstance(cause, OSError) and cause.errno == errno.EEXIST and cause.filename \
                and Path(cause.filename).is_file():  # os.makedirs onto a file
            return (f"{cause.filename}: is a file, where a directory is needed; choose another "
                    "path" + (f" ({output_key}=...)" if output_key else ""))
        elif type(cause).__module__.startswith("tensorflow"):
            code = next((value for text, value in _DISK_ERROR_TEXTS.items()
                         if text in str(cause)), None)
        if code is None:
            continue
        advice = _DISK_ERRORS[code]
        if output_key is not None and advice.endswith("write elsewhere"):
            advice += f" ({output_key}=...)"
        return f"{path or output_path or 'the output'}: {advice}"
    return None


def _path_limit(path: Path, name: str, usual: int) -> int:
    """`os.pathconf`'s limit `name` on the file system of `path`'s nearest existing part."""
    existing = Path(os.path.abspath(path))
    # os.path.exists, not Path.exists: a path too long to look up is not there, not an error.
    while not os.path.exists(existing) and existing != existing.parent:
        existing = existing.parent
    try:
        return os.pathconf(existing, name)
    except (OSError, ValueError):  # not answered here: the usual value (Linux's)
        return usual


def path_length_problem(path: str | os.PathLike) -> str | None:
    """What makes `path` too long for its file system, in words, or None: a name beyond the
    file system's limit of bytes a name (NAME_MAX, 255 on most), or the whole path, absolute,
    beyond the system's limit of bytes a path (PATH_MAX, 4096 on Linux, the final NUL
    included) even when every name in it is short."""
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


def _shortened(path: str | os.PathLike) -> str:
    """A path for a one-line message: a very long one by its start and its end."""
    text = str(path)
    return text if len(text) <= 160 else f"{text[:80]}...{text[-60:]}"


def check_writable_place(setting: str, path: str | os.PathLike, directory_wanted: bool) -> None:
    """Refuse, before any work, a place a command could not write: a file where a directory is
    wanted (or the reverse), a file that is not the command's to replace (a symbolic link, a
    pipe: `refuse_to_replace`), a path through a file, a read-only or forbidden directory, a
    name or a path beyond the file system's limits (`path_length_problem`). `setting` is the
    key that chose it (`hydra.run.dir`, `out`)."""
    path = Path(path)
    too_long = path_length_problem(path)
    if too_long:
        raise UserInputError(f"{setting}={_shortened(path)}: {too_long}")
    if path.exists():
        if directory_wanted and not path.is_dir():
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


@contextmanager
def _sigterm_as_interrupt():
    """SIGTERM raises KeyboardInterrupt, as SIGINT does, so that both end the same way (130 and
    the resume line) at any phase, not only inside training (which handles both itself,
    `sgh.training.signals`). A handler someone else installed is left alone."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def interrupt(_number, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def _warnings_as_log_records():
    """`warnings.warn` of the library as a warning of the `sgh` logger (module doc), not
    Python's ``file:line: UserWarning:`` text; restored after the command."""
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        logging.getLogger("sgh").warning("%s", message)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


@contextmanager
def exit_on_failure(program: str, *, output_key: str | None = None,
                    output_path: str | os.PathLike | None = None,
                    interrupted: str = "interrupted; nothing was left half-written: run the "
                                       "same command again"):
    """Every way a command ends early, as one line on stderr and an exit status (module doc).

    `output_key` / `output_path`: the setting and the place the command writes, named by a
    disk error without a file name of its own; `interrupted`: the line of an interruption
    outside training (what to run to go on).
    """
    try:
        with _sigterm_as_interrupt(), _warnings_as_log_records():
            yield
    except UserInputError as error:
        # Raised while handling a limit reached (a file that could not be opened for lack of
        # descriptors): the limit is what to fix, not the file.
        line = resource_limit_line(error) if error.__context__ is not None else None
        _report(program, f"error: {line or error}", USAGE_ERROR_EXIT_CODE)
    except TrainingDiverged as divergence:
        _report(program, f"error: {divergence}", DIVERGED_EXIT_CODE)
    except TrainingInterrupted as interruption:
        _report(program, str(interruption), INTERRUPTED_EXIT_CODE)
    except KeyboardInterrupt:
        _report(program, interrupted, INTERRUPTED_EXIT_CODE)
    except BrokenPipeError:
        # The reader of stdout has gone (`sgh-train --help | head`): nothing to tell it, and
        # Python's final flush would fail again. Exit as a process ended by SIGPIPE reads.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(128 + signal.SIGPIPE) from None
    except Exception as error:  # noqa: BLE001  only the user's kinds are reported, bugs re-raised
        line = resource_limit_line(error) or disk_error_line(error, output_key, output_path)
        if line is None and type(error).__module__.split(".")[0] in ("hydra", "omegaconf"):
            from sgh.cli.hydra_errors import hydra_error_line

            line = hydra_error_line(error)
        if line is None:
            raise
        _report(program, f"error: {line}", USAGE_ERROR_EXIT_CODE)
