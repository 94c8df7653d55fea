"""`SGHHasher(verbose=True)`: training's progress lines on stderr, in `sgh-train`'s shape."""

from __future__ import annotations

import contextlib
import logging
import sys

_PROGRESS_LOGGER, _CHATTER = "sgh.training", ("tensorflow", "absl")


class ProgressFormatter(logging.Formatter):
    """sgh-train's console lines (`sgh.cli.logs.ConsoleFormatter`)."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        return (f"{record.levelname.lower()}: {message}" if record.levelno >= logging.WARNING
                else f"[sgh] {message}")


@contextlib.contextmanager
def progress_on_stderr(verbose: object):
    """If `verbose`: the training's records go to stderr only, TensorFlow's chatter is held back."""
    if not verbose:
        yield
        return
    progress = logging.getLogger(_PROGRESS_LOGGER)
    chatter = {name: logging.getLogger(name).level for name in _CHATTER}
    level, propagate = progress.level, progress.propagate
    handler = logging.StreamHandler(sys.stderr)  # the stderr of now (pytest's, a notebook's)
    handler.setFormatter(ProgressFormatter())
    for name in _CHATTER:
        if logging.getLogger(name).getEffectiveLevel() < logging.WARNING:
            logging.getLogger(name).setLevel(logging.WARNING)
    if progress.getEffectiveLevel() > logging.INFO:
        progress.setLevel(logging.INFO)
    progress.addHandler(handler)
    progress.propagate = False
    try:
        yield
    finally:
        progress.removeHandler(handler)
        progress.setLevel(level)
        progress.propagate = propagate
        for name, saved in chatter.items():
            logging.getLogger(name).setLevel(saved)
