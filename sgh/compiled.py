"""Compiling kernels with numba: one decorator for every compiled loop of the package, and how
many threads run them."""

from __future__ import annotations

import logging
import os

import numba

logger = logging.getLogger(__name__)


def compiled(function=None, *, fastmath: bool = False):
    """``njit(nogil=True, cache=True)`` (callers run kernels on several threads at once), or
    without the on-disk cache where numba can write none (it refuses ``cache=True`` then).
    ``@compiled(fastmath=True)``: sums may be reordered (vectorised), so a result can differ in
    its last bits from the loop as written, and between processors."""
    if function is None:
        return lambda inner: compiled(inner, fastmath=fastmath)
    try:
        return numba.njit(nogil=True, cache=True, fastmath=fastmath)(function)
    except RuntimeError as error:  # "cannot cache function ...: no locator available"
        logger.info("numba cannot cache %s (%s); compiling without a cache", function, error)
        return numba.njit(nogil=True, cache=False, fastmath=fastmath)(function)


def resolved_workers(workers: int | None) -> int:
    """Threads of a compiled scan: ``workers``, or one per core, at most 8 (the scans are
    memory-bound beyond that)."""
    return max(1, min(8, os.cpu_count() or 1)) if workers is None else max(1, int(workers))
