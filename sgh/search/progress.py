"""Progress lines on stderr, as `SGHIndex(verbose=True)` and `sgh-index` print them."""

from __future__ import annotations

import sys
import time


def say_progress(message: str) -> None:
    """A progress line on stderr in one write with its newline (an interruption cannot split)."""
    sys.stderr.write(f"[sgh] {message}\n")
    sys.stderr.flush()


def vectors_done(verb: str, done: int, total: int, started: float) -> str:
    """How far a pass over vectors is: ``verb done/total vectors, rate/s``."""
    rate = done / max(time.perf_counter() - started, 1e-9)
    return f"{verb} {done:,}/{total:,} vectors, {rate:,.0f}/s"
