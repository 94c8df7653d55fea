"""Compiling kernels with numba: one decorator for every compiled loop of the package."""

from __future__ import annotations

import logging

import numba

logger = logging.getLogger(__name__)


def compiled(function):
    """``njit(nogil=True, cache=True)`` (callers run kernels on several threads at once), or
    without the on-disk cache where numba can write none (it refuses ``cache=True`` then)."""
    try:
        return numba.njit(nogil=True, cache=True)(function)
    except RuntimeError as error:  # "cannot cache function ...: no locator available"
        logger.info("numba cannot cache %s (%s); compiling without a cache", function, error)
        return numba.njit(nogil=True, cache=False)(function)
