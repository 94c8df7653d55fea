"""How the library's log records look on a terminal (the run's `train.log` keeps full records).

Library code logs through `logging` (loggers named `sgh.<module>`); only the command line
decides where the records go. `sgh-train` routes them through Hydra's job logging
(`configs/hydra/default.yaml`): progress lines to stdout as `[sgh] <message>`, the results
table as it is, warnings to stderr as `warning: <message>`, and every record, with its time and
logger, to `<run_dir>/train.log`.
"""

from __future__ import annotations

import logging

# `logger.info(table, extra=PLAIN)`: a record shown without the "[sgh] " prefix.
PLAIN = {"plain": True}


class ConsoleFormatter(logging.Formatter):
    """`[sgh] message` for progress, the bare message for PLAIN records, `warning: message`
    (or `error: ...`) for warnings and worse; `program` prefixes the last (`sgh-compare: ...`)."""

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
