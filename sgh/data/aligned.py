"""Feature arrays whose buffer starts on a 64-byte boundary, so training adopts them as they are.

TensorFlow's CPU tensors need that alignment (Eigen's `EIGEN_MAX_ALIGN_BYTES`). The trainer
keeps the training set on the device; a float32 array with it is adopted through DLPack,
without a copy (`sgh.training.loop`), where any other array is copied: as much memory again as
the training set itself (188 MB for MNIST). numpy aligns its buffers to 16 bytes only, so the
stages that make a training set in memory allocate it here.
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
