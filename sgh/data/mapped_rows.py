"""Rows at scattered positions of a vector file, gathered through one memory map of the file
(`dataset.stream_reader=mmap`, the default; docs/guide/data.md, "How rows are gathered").

The map lives as long as its `StreamedFeatures`: mapping afresh for every call would fault every
page in again. Reading a mapped page beyond the end of its file raises SIGBUS, which kills the
process: so before every gather the file's current size is checked (one `fstat`), and rows
beyond it are left to the positioned reads, which report the short file in one line. A file cut
during one gather can still kill it (`pread` cannot); one renamed over is read as mapped.
"""

from __future__ import annotations

import mmap
import threading

import numpy as np

from sgh.data.vector_file import VectorFile
from sgh.errors import UserInputError


class MappedRows:
    """Rows of a fixed-stride `VectorFile` (C-order `.npy`, texmex), through a read-only map."""

    def __init__(self, vectors: VectorFile, offset: int, record: np.dtype):
        self.vectors = vectors
        self.offset, self.record = offset, record  # row 0's byte offset, one stored row's dtype
        self._mapped_bytes = offset + len(vectors) * record.itemsize
        self._map: mmap.mmap | None = None
        self._stored: np.ndarray | None = None
        # The tf.data pipeline gathers on several threads: the first gathers must map once.
        self._mapping = threading.Lock()

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The file rows `rows` (int64, within the file; any order, repeats allowed) in the
        stored dtype, in the order asked."""
        if not len(rows):
            return self.vectors.read(0, 0)
        needed = self.offset + (int(rows.max()) + 1) * self.record.itemsize
        stored = self._stored_rows()
        if stored is None or self._map.size() < needed:
            # Not mapped, or the file is now shorter than mapped: the positioned reads name the
            # first short run as reader=pread would, or read the rows.
            unique, inverse = np.unique(rows, return_inverse=True)
            return self.vectors.take(unique)[inverse.reshape(-1)]
        records = np.take(stored, rows, axis=0)  # faster than stored[rows]
        try:
            return self.vectors.from_records(records, rows)
        except UserInputError:
            # Name the first offending row in file order, as the positioned reads do.
            order = np.argsort(rows, kind="stable")
            self.vectors.from_records(records[order], rows[order])
            raise

    def _stored_rows(self) -> np.ndarray | None:
        """The mapped file as an (n,) array of stored rows; None while it cannot be mapped."""
        with self._mapping:
            if self._stored is None:
                with open(self.vectors.path, "rb") as handle:
                    try:  # the map keeps its own duplicate of the descriptor (`size()`)
                        self._map = mmap.mmap(handle.fileno(), self._mapped_bytes,
                                              access=mmap.ACCESS_READ)
                    # ValueError: the file is shorter than the map; OSError: cannot be mapped.
                    except (ValueError, OSError):
                        return None
                # Never closed explicitly: numpy does not pin the map's buffer, so closing it
                # under a live array would crash; the array holds the map until both are freed.
                self._stored = np.ndarray((len(self.vectors),), self.record, buffer=self._map,
                                          offset=self.offset)
            return self._stored


def mapped_rows(vectors: VectorFile) -> MappedRows | None:
    """A `MappedRows` of `vectors`, or None for formats without a fixed row stride (HDF5,
    Fortran-order `.npy`), which keep their own `take`."""
    layout = vectors.stride_layout()
    return None if layout is None else MappedRows(vectors, *layout)
