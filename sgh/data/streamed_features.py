"""Features that stay on disk: float32 rows of a vector file, read only when needed.

`StreamedFeatures` stands where an in-memory float32 array would, for a training set or database
too large for memory: `chunks()` reads consecutive row ranges, `take(ids)` rows at arbitrary
indices (`sgh.data.mapped_rows` or `sgh.data.positioned_reads`, as `dataset.stream_reader`
chooses). Rows are converted (and unit-normalised) as loading the file whole does, so streamed
and in-memory runs see the same float32 values; `iter_chunks` and `take_rows` accept either kind.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import numpy as np

from sgh.data.aligned import aligned_rows
from sgh.data.feature_conversion import as_float32_features
from sgh.data.mapped_rows import mapped_rows
from sgh.data.similarity import unit_normalised
from sgh.data.vector_file import VectorFile
from sgh.data.vector_files import WholeArrayVectors
from sgh.errors import UserInputError

# dataset.streaming=auto streams a dataset whose training set and database would take more than
# this as float32 in memory.
STREAM_ABOVE_BYTES = 4 << 30
# Rows per chunk of `chunks` / `iter_chunks` by default, as float32.
CHUNK_BYTES = 1 << 25
# How `take` reads rows (`dataset.stream_reader`).
STREAM_READERS = ("mmap", "pread")


class StreamedFeatures:
    """The float32 features of a `VectorFile`, read on demand; `unit_normalise`: every row
    divided by its L2 norm as it is read (angular)."""

    def __init__(self, vectors: VectorFile, unit_normalise: bool = False, reader: str = "mmap"):
        if isinstance(vectors, WholeArrayVectors):
            raise ValueError(f"{vectors.where}: .npz and v4/v5 .mat files cannot be read by rows")
        if reader not in STREAM_READERS:
            raise ValueError(f"reader={reader!r}; accepted: {', '.join(STREAM_READERS)}")
        self.vectors, self.path = vectors, vectors.path
        self.dtype = np.dtype(np.float32)
        self.unit_normalise = unit_normalise
        # None: positioned reads (reader=pread, or a format without a row stride to map).
        self._mapped = mapped_rows(vectors) if reader == "mmap" else None
        self._hide(np.zeros(0, np.int64))

    def _hide(self, hidden: np.ndarray) -> None:
        # Sorted file rows not part of these features; shifted[j] = hidden[j] - j visible rows
        # precede hidden row j, which maps visible index -> file row.
        self.hidden = hidden
        self._shifted = self.hidden - np.arange(len(self.hidden))
        self.shape = (self.vectors.shape[0] - len(self.hidden), self.vectors.shape[1])

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        hidden = f", {len(self.hidden)} rows hidden" if len(self.hidden) else ""
        normalised = ", unit-normalised" if self.unit_normalise else ""
        return f"StreamedFeatures({self.vectors.where}, shape={self.shape}{hidden}{normalised})"

    @property
    def nbytes(self) -> int:
        """Bytes the features would take in memory as float32."""
        return self.shape[0] * self.shape[1] * 4

    def without(self, rows: np.ndarray) -> StreamedFeatures:
        """These features minus the items at indices `rows` (indices into these features)."""
        view = copy.copy(self)  # shares the memory map: one mapping for all views of a file
        view._hide(np.union1d(self.hidden, self.file_rows(np.unique(rows))))
        return view

    def file_rows(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, np.int64)
        if len(ids) and (ids.min() < 0 or ids.max() >= len(self)):
            raise IndexError(f"indices outside 0..{len(self)} of {self!r}")
        return ids + np.searchsorted(self._shifted, ids, side="right")

    def take(self, ids: np.ndarray) -> np.ndarray:
        """Rows at indices `ids` (any order, repeats allowed) as float32 (len(ids), d)."""
        ids = np.asarray(ids, np.int64)
        if self._mapped is not None:
            # In the order asked: sorting for page locality, then un-permuting, is slower.
            rows = self.file_rows(ids)
            return self._convert(self._mapped.take(rows), rows)
        # Positioned reads take sorted, distinct rows (one read per run of consecutive rows).
        unique, inverse = np.unique(ids, return_inverse=True)
        rows = self.file_rows(unique)
        return self._convert(self.vectors.take(rows), rows)[inverse.reshape(-1)]

    def read(self, start: int, stop: int) -> np.ndarray:
        """Visible rows [start, stop) as float32."""
        if not 0 <= start <= stop <= len(self):
            raise ValueError(f"row range [{start}, {stop}) outside 0..{len(self)}")
        if start == stop:
            return np.empty((0, self.shape[1]), np.float32)
        first, last = self.file_rows(np.array([start, stop - 1]))
        features = self._convert(self.vectors.read(int(first), int(last) + 1),
                                 np.arange(first, last + 1))
        inside = self.hidden[(self.hidden >= first) & (self.hidden <= last)]
        if len(inside):
            features = np.delete(features, inside - first, axis=0)
        return features

    def chunks(self, chunk_rows: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """(start, float32 rows [start, start + chunk_rows)) over all visible rows, in order."""
        return iter_chunks(self, chunk_rows)

    def load(self) -> np.ndarray:
        """All visible rows in memory (for consumers that need them whole: the baselines)."""
        features = np.empty(self.shape, np.float32)
        for start, rows in self.chunks():
            features[start:start + len(rows)] = rows
        return features

    def _convert(self, stored: np.ndarray, file_rows: np.ndarray) -> np.ndarray:
        try:
            features = as_float32_features(stored, self.vectors.path, self.vectors.key)[0]
        except UserInputError:
            # Name the offending row by its position in the file, the first in file order
            # whatever order the rows came in, so both readers name the same row.
            for position in np.argsort(file_rows, kind="stable"):
                as_float32_features(stored[position][np.newaxis], self.vectors.path,
                                    self.vectors.key, first_row=int(file_rows[position]))
            raise
        if self.unit_normalise:
            features = unit_normalised(features, self.vectors.where, file_rows)
        return features


Features = np.ndarray | StreamedFeatures


def iter_chunks(features: Features, chunk_rows: int | None = None
                ) -> Iterator[tuple[int, np.ndarray]]:
    """(start, float32 rows) in chunks of `chunk_rows`, for in-memory and streamed features
    alike (the same boundaries, so chunked sums agree bit for bit)."""
    chunk_rows = chunk_rows or max(1, CHUNK_BYTES // (4 * features.shape[1]))
    for start in range(0, len(features), chunk_rows):
        stop = min(start + chunk_rows, len(features))
        if isinstance(features, StreamedFeatures):
            yield start, features.read(start, stop)
        else:
            yield start, np.asarray(features[start:stop], np.float32)


def take_rows(features: Features, ids: np.ndarray) -> np.ndarray:
    """Rows at indices `ids` as float32, for in-memory and streamed features alike."""
    if isinstance(features, StreamedFeatures):
        return features.take(ids)
    return np.asarray(features[np.asarray(ids, np.int64)], np.float32)


def evenly_spaced(n: int, count: int) -> np.ndarray:
    """``count`` row indices spread evenly over ``n`` rows (all of them where ``n <= count``)."""
    return np.arange(n) if n <= count else np.linspace(0, n - 1, count).astype(np.int64)


def without_rows(features: Features, rows: np.ndarray) -> Features:
    """`features` minus the items at indices `rows`, in order (`np.delete` in memory)."""
    if isinstance(features, StreamedFeatures):
        return features.without(rows)
    return aligned_rows(features, np.setdiff1d(np.arange(len(features)), rows))


def choose_streaming(setting: str, files: list[VectorFile]) -> bool:
    """Whether to stream the training set and database `files` (`dataset.streaming`)."""
    whole = [vectors for vectors in files if isinstance(vectors, WholeArrayVectors)]
    if setting == "never" or (setting == "auto" and whole):
        return False
    if whole:
        raise UserInputError(
            f"dataset.streaming=always: {whole[0].where} cannot be streamed (.npz and MATLAB "
            "v4/v5 .mat files are read whole); save it as .npy, .fvecs, .bvecs or HDF5 (.h5, "
            "MATLAB -v7.3), or use dataset.streaming=auto")
    if setting == "always":
        return True
    return sum(vectors.shape[0] * vectors.shape[1] * 4 for vectors in files) > STREAM_ABOVE_BYTES
