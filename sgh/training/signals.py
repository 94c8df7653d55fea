"""Ctrl-C and SIGTERM during training: a request to stop after the current compiled call, at a
saved checkpoint from which the run resumes exactly (`sgh.training.train_sgh`)."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


@contextmanager
def stop_on_signals():
    """Yield a list that SIGINT/SIGTERM append to, instead of raising KeyboardInterrupt."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received  # signals can only be handled in the main thread
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda number, _frame: received.append(number))
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
