"""How the library's log records look on a terminal (the run's `train.log` keeps full records).

Library code logs through `logging` (`sgh.<module>`); `sgh-train` routes the records through
Hydra's job logging (`configs/hydra/default.yaml`): progress to stdout, warnings to stderr.
"""

from __future__ import annotations

import logging


class ConsoleFormatter(logging.Formatter):
    """`[sgh] message` for progress, the bare message for records logged with
    `extra={"plain": True}` (a results table), `warning: message` (or `error: ...`) for warnings
    and worse; `program` prefixes the last (`sgh-compare: ...`)."""

    def __init__(self, program: str | None = None):
        super().__init__()
        self.program = program

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.levelno >= logging.WARNING:
            text = f"{record.levelname.lower()}: {message}"
            return f"{self.program}: {text}" if self.program else text
        if getattr(record, "plain", False):
            return message
        return f"[sgh] {message}"


class BelowWarning(logging.Filter):
    """Passes debug and info records only: warnings go to stderr, through another handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.WARNING
