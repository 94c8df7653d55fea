"""Compiling kernels with numba: one decorator for every compiled loop of the package."""

from __future__ import annotations

import logging

import numba

logger = logging.getLogger(__name__)


def compiled(function):
    """``njit(nogil=True, cache=True)``, or without the on-disk cache where none can be written.

    ``nogil``: the callers run kernels on several threads at once. numba caches next to the
    kernel's file, else in its per-user directory (``NUMBA_CACHE_DIR`` or ``~/.cache/numba``);
    when neither is writable it refuses ``cache=True`` at decoration time, so we compile on first
    use in every process instead (once per kernel and signature) rather than fail.
    """
    try:
        return numba.njit(nogil=True, cache=True)(function)
    except RuntimeError as error:  # "cannot cache function ...: no locator available"
        logger.info("numba cannot cache %s (%s); compiling without a cache", function, error)
        return numba.njit(nogil=True, cache=False)(function)
