"""`VectorFile`: a 2-D array of vectors on disk, read by row ranges and rows, in any format.

Every format's reader is one (`sgh.data.vector_files`, `sgh.data.hdf5_files`), and every header
passes the same checks here: numeric, 2-D, non-empty, never an object array.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sgh.data.positioned_reads import read_runs
from sgh.errors import UserInputError

# Classes of plain numeric MATLAB arrays (scipy.io.whosmat's, and v7.3's `MATLAB_class`).
MAT_NUMERIC_CLASSES = ("double", "single", "logical", "int8", "uint8", "int16", "uint16",
                       "int32", "uint32", "int64", "uint64")
MAT_MATRIX = f"a full numeric matrix ({', '.join(MAT_NUMERIC_CLASSES)})"


class VectorFile:
    """A read-only view of an (n, d) array on disk; `read(start, stop)` returns rows in the
    stored dtype. Construct with `open_vectors`."""

    def __init__(self, path: Path, key: str | None, shape: tuple[int, ...], dtype: np.dtype):
        self.path, self.key, self.dtype = path, key, np.dtype(dtype)
        self.where = _where(path, key)  # how every message names the file
        _check_layout(self.where, tuple(shape), self.dtype)
        self.shape = (int(shape[0]), int(shape[1]))

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.where}, shape={self.shape}, dtype={self.dtype})"

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) as a (stop - start, d) array in the stored dtype."""
        if not 0 <= start <= stop <= len(self):
            raise ValueError(f"row range [{start}, {stop}) outside 0..{len(self)}")
        if start == stop:
            return np.empty((0, self.shape[1]), self.dtype)
        return self._read(start, stop)

    def _read(self, start: int, stop: int) -> np.ndarray:
        raise NotImplementedError

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The rows at the sorted, distinct indices `rows`, in the stored dtype: for fixed-stride
        formats one positioned read per run of consecutive rows, into the result alone."""
        rows = np.asarray(rows, np.int64)
        if not len(rows):
            return self.read(0, 0)
        if rows[0] < 0 or rows[-1] >= len(self):
            raise ValueError(f"rows outside 0..{len(self)}")
        layout = self.stride_layout()
        if layout is None:
            return self._take_unstrided(rows)
        offset, record = layout
        records = np.empty(len(rows), record)
        first = np.flatnonzero(np.diff(rows, prepend=-2) != 1)  # each run's first row
        sizes = np.diff(np.append(first, len(rows))) * record.itemsize
        offsets = offset + rows[first] * record.itemsize
        with open(self.path, "rb", buffering=0) as handle:
            short, got = read_runs(handle.fileno(), records, first * record.itemsize, sizes,
                                   offsets)
        if short >= 0:
            raise UserInputError(f"{self.where} is truncated (expected {sizes[short]} bytes at "
                                 f"offset {offsets[short]}, found {got})")
        return self.from_records(records, rows)

    def stride_layout(self) -> tuple[int, np.dtype] | None:
        """(byte offset of row 0, dtype of one stored row) for fixed-stride formats, else None."""
        return None

    def from_records(self, records: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The stored rows `rows` (file row numbers, for messages) from their raw records."""
        return records

    def _take_unstrided(self, rows: np.ndarray) -> np.ndarray:
        """`take` for formats without a row stride: those read whole anyway (.npz, .mat)."""
        return self._read(0, len(self))[rows]


def _check_numeric(where: str, dtype: np.dtype) -> None:
    if dtype.kind not in "biuf":
        raise UserInputError(f"{where} has non-numeric dtype {dtype}; expected integer, "
                             "boolean or floating-point features")


def _check_layout(where: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
    if dtype.hasobject:
        raise UserInputError(f"{where} holds an object (pickled) array, which is refused and "
                             "never unpickled; save a plain numeric array")
    _check_numeric(where, dtype)
    if any(side < 0 for side in shape):
        raise UserInputError(f"{where} declares the impossible shape {tuple(shape)}; the file "
                             "is corrupt")
    if len(shape) != 2:
        raise UserInputError(f"{where} has shape {tuple(shape)}; expected a 2-D array "
                             "(items x features)")
    if shape[0] == 0 or shape[1] == 0:
        raise UserInputError(f"{where} has shape {tuple(shape)}; expected a non-empty array "
                             "(at least one item and one feature)")


def _where(path, key: str | None) -> str:
    """The file (and key) at fault, as every message starts: `data.npz: key 'X'`."""
    return f"{path}" + ("" if key is None else f": key {key!r}")
