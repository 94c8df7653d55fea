"""Features that stay on disk: float32 rows of a vector file, read only when needed.

A training set or database too large for memory (SIFT-1B: 10^9 x 128 uint8, 512 GB as float32)
is never loaded whole. `StreamedFeatures` stands where an in-memory float32 array would, and
every consumer reads it in one of two ways:

- `chunks()`: consecutive row ranges of `CHUNK_BYTES` as float32 (statistics, hashing,
  loading), one read system call per chunk;
- `take(ids)`: rows at arbitrary indices (training batches, validation samples), through a
  memory map (`sgh.data.mapped_rows`) or positioned reads (`sgh.data.positioned_reads`), as
  `dataset.stream_reader` chooses; the same rows either way.

Rows are converted exactly as loading the file whole converts them (`as_float32_features`,
NaN/Inf refused with the row's position; with `unit_normalise`, dataset.similarity=angular,
each row then divided by its norm as `sgh.data.similarity.unit_normalised` does in memory), so
streamed and in-memory runs see the same float32 values, and `iter_chunks` and `take_rows`
accept either kind, chunked at the same boundaries.

`without(rows)` hides some rows (validation's held-out items): indices then count only the
rows left, in file order, exactly as `array[kept]` does in memory.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from sgh.data.aligned import aligned_rows
from sgh.data.feature_conversion import as_float32_features, conversion_of
from sgh.data.mapped_rows import mapped_rows
from sgh.data.similarity import unit_normalised
from sgh.data.vector_file import VectorFile
from sgh.data.vector_files import WholeArrayVectors
from sgh.errors import UserInputError

# dataset.streaming=auto streams a dataset whose training set and database would take more than
# this as float32 in memory: SIFT-1M (0.6 GB) and GIST-1M's base (3.8 GB) stay in memory, where
# training is fastest; GIST-1M with its learn set (5.8 GB) and SIFT-10M and up are streamed.
STREAM_ABOVE_BYTES = 4 << 30
# Rows per chunk of `chunks` / `iter_chunks` by default: 32 MiB as float32 (65,536 rows of 128
# dimensions, 8,738 of GIST's 960), whatever the dimension.
CHUNK_BYTES = 1 << 25
# How `take` reads rows (`dataset.stream_reader`): a memory map, or positioned reads.
STREAM_READERS = ("mmap", "pread")


def default_chunk_rows(dim: int) -> int:
    return max(1, CHUNK_BYTES // (4 * dim))


class StreamedFeatures:
    """The float32 features of a `VectorFile`, read on demand (see the module doc);
    `unit_normalise`: every row divided by its L2 norm as it is read (angular); `reader`: how
    `take` reads rows, one of `STREAM_READERS`."""

    def __init__(self, vectors: VectorFile, unit_normalise: bool = False, reader: str = "mmap"):
        if isinstance(vectors, WholeArrayVectors):
            raise ValueError(f"{vectors.where}: .npz and v4/v5 .mat files cannot be read by rows")
        if reader not in STREAM_READERS:
            raise ValueError(f"reader={reader!r}; accepted: {', '.join(STREAM_READERS)}")
        self.vectors = vectors
        self.dtype = np.dtype(np.float32)
        self.conversion = conversion_of(vectors.dtype)
        self.unit_normalise = unit_normalise
        self.reader = reader
        # None: positioned reads (reader=pread, or a format without a row stride to map).
        self._mapped = mapped_rows(vectors) if reader == "mmap" else None
        self._hide(np.zeros(0, np.int64))

    def _hide(self, hidden: np.ndarray) -> None:
        # Sorted file rows that are not part of these features; shifted[j] = hidden[j] - j is
        # how many visible rows precede hidden row j, which maps visible index -> file row.
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
    def path(self) -> Path:
        return self.vectors.path

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
        """The file row of each visible index in `ids`."""
        ids = np.asarray(ids, np.int64)
        if len(ids) and (ids.min() < 0 or ids.max() >= len(self)):
            raise IndexError(f"indices outside 0..{len(self)} of {self!r}")
        return ids + np.searchsorted(self._shifted, ids, side="right")

    def take(self, ids: np.ndarray) -> np.ndarray:
        """Rows at indices `ids` (any order, repeats allowed) as float32 (len(ids), d)."""
        ids = np.asarray(ids, np.int64)
        if self._mapped is not None:
            # Gathered in the order asked: sorting first for page locality, then un-permuting,
            # is several times slower.
            rows = self.file_rows(ids)
            return self._convert(self._mapped.take(rows), rows)
        # Positioned reads take sorted, distinct rows (one read per run of consecutive rows).
        unique, inverse = np.unique(ids, return_inverse=True)
        rows = self.file_rows(unique)
        features = self._convert(self.vectors.take(rows), rows)
        return features[inverse.reshape(-1)]

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
        """(start, float32 rows [start, start + chunk_rows)) over all visible rows, in order
        (`chunk_rows` default: `default_chunk_rows`)."""
        chunk_rows = chunk_rows or default_chunk_rows(self.shape[1])
        for start in range(0, len(self), chunk_rows):
            yield start, self.read(start, min(start + chunk_rows, len(self)))

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
            # Name the offending row by its position in the file, which the message above
            # cannot know for scattered rows: find it and convert it alone, the first in file
            # order whatever order the rows came in, so both readers name the same row.
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
    """(start, float32 rows) in chunks of `chunk_rows` (default: `default_chunk_rows`), for
    in-memory and streamed features alike (the same boundaries, so chunked sums agree bit for
    bit)."""
    chunk_rows = chunk_rows or default_chunk_rows(features.shape[1])
    if isinstance(features, StreamedFeatures):
        yield from features.chunks(chunk_rows)
        return
    for start in range(0, len(features), chunk_rows):
        yield start, np.asarray(features[start:start + chunk_rows], np.float32)


def take_rows(features: Features, ids: np.ndarray) -> np.ndarray:
    """Rows at indices `ids` as float32, for in-memory and streamed features alike."""
    if isinstance(features, StreamedFeatures):
        return features.take(ids)
    return np.asarray(features[np.asarray(ids, np.int64)], np.float32)


def without_rows(features: Features, rows: np.ndarray) -> Features:
    """`features` minus the items at indices `rows`, in order (`np.delete` in memory)."""
    if isinstance(features, StreamedFeatures):
        return features.without(rows)
    kept = np.setdiff1d(np.arange(len(features)), rows)
    return aligned_rows(features, kept)  # the training items: adopted by training as they are


def choose_streaming(setting: str, files: list[VectorFile]) -> bool:
    """Whether to stream the training set and database `files` (`dataset.streaming`: auto,
    always or never; see docs/guide/data.md)."""
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
