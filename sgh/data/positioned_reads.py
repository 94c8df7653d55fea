"""Many small reads at scattered file offsets, as fast as the system call allows.

With `dataset.stream_reader=pread` (and in `VectorFile.take`), scattered rows are read with one
`pread` per run of consecutive rows, into the result alone. The loop is compiled with numba,
calling the C library's `pread` through ctypes: it costs the system calls alone and holds no GIL,
so the tf.data reader threads run in parallel. Without a C `pread` (Windows), a Python loop over
`os.preadv` is used.
"""

from __future__ import annotations

import ctypes
import functools
import os

import numpy as np


def _libc_pread():
    try:
        function = ctypes.CDLL(None, use_errno=True).pread
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64]
    function.restype = ctypes.c_ssize_t
    return function


_PREAD = _libc_pread()


@functools.cache
def _compiled_loop():
    """The numba loop, compiled on first use (not cached on disk: it embeds the address of
    `pread`, which differs between processes)."""
    import numba

    pread = _PREAD

    @numba.njit(nogil=True)
    def read_runs(descriptor, buffer, positions, sizes, offsets):
        address = buffer.ctypes.data
        for run in range(len(offsets)):
            got = pread(descriptor, address + positions[run], sizes[run], offsets[run])
            if got != sizes[run]:
                return run, got
        return -1, 0

    return read_runs


def read_runs(descriptor: int, buffer: np.ndarray, positions: np.ndarray, sizes: np.ndarray,
              offsets: np.ndarray) -> tuple[int, int]:
    """Read `sizes[i]` bytes at file offset `offsets[i]` into `buffer`'s bytes from
    `positions[i]`, for every i; return (-1, 0), or (i, bytes read) for the first short read."""
    if _PREAD is not None:
        return _compiled_loop()(descriptor, buffer, positions, sizes, offsets)
    view = memoryview(buffer.reshape(-1).view(np.uint8))
    for run, (position, size, offset) in enumerate(zip(positions.tolist(), sizes.tolist(),
                                                       offsets.tolist(), strict=True)):
        got = os.preadv(descriptor, [view[position:position + size]], offset)
        if got != size:
            return run, got
    return -1, 0
