"""Feature arrays whose buffer starts on a 64-byte boundary, the alignment TensorFlow's CPU
tensors need: training adopts such a float32 training set through DLPack without a copy
(`sgh.training.loop`), and copies any other. numpy aligns to 16 bytes only.
"""

from __future__ import annotations

import numpy as np

ALIGNMENT = 64


def aligned_empty(shape: tuple[int, ...], dtype=np.float32) -> np.ndarray:
    """An uninitialised array whose data start on an `ALIGNMENT`-byte boundary."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buffer = np.empty(size + ALIGNMENT, np.uint8)
    start = -buffer.ctypes.data % ALIGNMENT
    return buffer[start:start + size].view(dtype).reshape(shape)


def is_aligned(array: np.ndarray) -> bool:
    return array.ctypes.data % ALIGNMENT == 0


def aligned_rows(array: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """`array[ids]` (rows), in an aligned buffer."""
    ids = np.asarray(ids, np.int64)
    rows = aligned_empty((len(ids), *array.shape[1:]), array.dtype)
    return np.take(array, ids, axis=0, out=rows)
