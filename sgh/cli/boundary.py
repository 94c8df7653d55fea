"""How a command ends early: one line on stderr and an exit status: 2 for bad input
(`UserInputError`, Hydra's errors, a place that cannot be written, a process limit), 3 for a
diverged training, 130 for SIGINT or SIGTERM (the line says how to resume). `SGH_DEBUG=1` prints
the traceback too; any other exception is a bug and keeps its traceback."""

from __future__ import annotations

import atexit
import gc
import logging
import os
import signal
import sys
import threading
import traceback
import warnings
from contextlib import contextmanager

from sgh.artifacts.output_places import disk_error_line
from sgh.errors import TrainingDiverged, TrainingInterrupted, UserInputError, resource_limit_line

# Ending a process that imported TensorFlow is mostly final garbage collections: skip them.
atexit.register(gc.freeze)

USAGE_ERROR_EXIT_CODE, DIVERGED_EXIT_CODE, INTERRUPTED_EXIT_CODE = 2, 3, 130


def _report(program: str, line: str, status: int):
    if os.environ.get("SGH_DEBUG", "") not in ("", "0"):
        traceback.print_exc()
    print(f"{program}: {line}", file=sys.stderr, flush=True)
    sys.exit(status)


@contextmanager
def exit_on_failure(program: str, *, output_key: str | None = None,
                    output_path: str | os.PathLike | None = None,
                    interrupted: str = "interrupted; nothing was left half-written: run the "
                                       "same command again"):
    """Every way a command ends early (module doc). `output_key` / `output_path`: what the
    command writes, for a disk error that names no file; `interrupted`: the line of an
    interruption outside training."""
    shown = warnings.showwarning  # the library's warnings.warn: a warning of the `sgh` logger
    warnings.showwarning = lambda message, *_args, **_kwargs: logging.getLogger(
        "sgh").warning("%s", message)
    # SIGTERM ends a command as SIGINT does; a handler someone else installed is kept.
    sigterm = threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    if sigterm:
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    except UserInputError as error:
        # Raised while handling a limit reached: the limit is what to fix, not the file.
        line = resource_limit_line(error) if error.__context__ is not None else None
        _report(program, f"error: {line or error}", USAGE_ERROR_EXIT_CODE)
    except TrainingDiverged as divergence:
        _report(program, f"error: {divergence}", DIVERGED_EXIT_CODE)
    except TrainingInterrupted as interruption:
        _report(program, str(interruption), INTERRUPTED_EXIT_CODE)
    except KeyboardInterrupt:
        _report(program, interrupted, INTERRUPTED_EXIT_CODE)
    except BrokenPipeError:
        # The reader of stdout has gone (`--help | head`): exit as SIGPIPE would, and keep
        # Python's final flush from failing again.
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
    finally:
        warnings.showwarning = shown
        if sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
