"""faiss's binary-index file format, written and read without faiss.

A file written here is what ``faiss.write_index_binary`` writes for an ``IndexBinaryFlat`` (no
ids) or an ``IndexBinaryIDMap`` wrapping one (ids), so ``faiss.read_index_binary`` opens it; and
files faiss writes for those types read back here. Layout (faiss ``impl/index_write.cpp``,
``write_index_binary``; little-endian, fields packed with no alignment)::

    fourcc        4 bytes   b"IBxF" IndexBinaryFlat, b"IBMp" IndexBinaryIDMap
    header        d int32 (bits, a multiple of 8), code_size int32 (d / 8), ntotal int64,
                  is_trained uint8 (1), metric_type int32 (faiss writes METRIC_L2 = 1; unused
                  by Hamming search)
    IBxF body     WRITEVECTOR(xb): size uint64 = ntotal * code_size, then the codes, uint8
    IBMp body     the inner index (an IBxF record, as above), then WRITEVECTOR(id_map):
                  size uint64 = ntotal, then the ids, int64

``b"IBM2"`` (``IndexBinaryIDMap2``) has the ``IBMp`` layout and is read too; every other index
type (IVF, HNSW, hash, ...) is refused.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import BinaryIO, NamedTuple

import numpy as np

from sgh.artifacts.atomic import atomic_file

FLAT = b"IBxF"
ID_MAP = b"IBMp"
ID_MAP2 = b"IBM2"
METRIC_L2 = 1  # what faiss writes for binary indexes (IndexBinary's default metric_type)
_HEADER = struct.Struct("<iiqBi")  # d, code_size, ntotal, is_trained, metric_type
_SIZE = struct.Struct("<Q")  # WRITEVECTOR's element count (size_t)
# Other faiss fourccs, named when refused.
_OTHER_TYPES = {
    b"IBwF": "IndexBinaryIVF",
    b"IBFf": "IndexBinaryFromFloat",
    b"IBHf": "IndexBinaryHNSW",
    b"IBHc": "IndexBinaryHNSWCagra",
    b"IBHh": "IndexBinaryHash",
    b"IBHm": "IndexBinaryMultiHash",
}
_ACCEPTED = "accepted: 'IBxF' (IndexBinaryFlat) and 'IBMp'/'IBM2' (IndexBinaryIDMap over IBxF)"


class BinaryIndexFile(NamedTuple):
    """What a faiss binary-index file holds: ``d`` bits, ``(ntotal, d / 8)`` uint8 ``codes`` and
    ``(ntotal,)`` int64 ``ids`` (None for an ``IndexBinaryFlat``, whose ids are sequential)."""

    d: int
    codes: np.ndarray
    ids: np.ndarray | None


def write_binary_index(
    path: str | os.PathLike, codes: np.ndarray, ids: np.ndarray | None = None
) -> None:
    """Write ``(ntotal, code_size)`` uint8 ``codes`` as a faiss ``IndexBinaryFlat`` file of
    ``d = 8 * code_size``, or with ``(ntotal,)`` ``ids`` as an ``IndexBinaryIDMap`` over one,
    atomically."""
    codes = np.asarray(codes)
    if codes.ndim != 2 or codes.dtype != np.uint8 or codes.shape[1] < 1:
        raise ValueError(f"codes must be a 2-D uint8 array with >= 1 byte per row, got dtype "
                         f"{codes.dtype} and shape {codes.shape}")
    codes = np.ascontiguousarray(codes)
    ntotal, code_size = codes.shape
    if ids is not None:
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu" or ids.shape != (ntotal,):
            raise ValueError(f"ids must be integers of shape ({ntotal},), one per code, got "
                             f"dtype {ids.dtype} and shape {ids.shape}")
        if ids.dtype.kind == "u" and ids.size and ids.max() > np.iinfo(np.int64).max:
            raise ValueError(f"ids must fit in int64, got {ids.max()}")
        ids = np.ascontiguousarray(ids, dtype="<i8")
    header = _HEADER.pack(8 * code_size, code_size, ntotal, 1, METRIC_L2)
    with atomic_file(path) as temporary, open(temporary, "wb") as file:
        if ids is not None:
            file.write(ID_MAP + header)
        file.write(FLAT + header + _SIZE.pack(codes.size))
        file.write(codes.reshape(-1).view(np.uint8).data)  # 1-D: also when empty
        if ids is not None:
            file.write(_SIZE.pack(ntotal))
            file.write(ids.view(np.uint8).data)


def read_binary_index(path: str | os.PathLike) -> BinaryIndexFile:
    """Read a faiss ``IndexBinaryFlat`` or ``IndexBinaryIDMap`` file (the module's layout);
    ValueError in one line naming the file for another index type or a damaged file."""
    path = Path(path)
    with open(path, "rb") as file:
        reader = _Reader(file, path)
        fourcc = reader.fourcc()
        if fourcc in (ID_MAP, ID_MAP2):
            d, code_size, ntotal = reader.header()
            inner = reader.fourcc()
            if inner != FLAT:
                reader.fail(f"the IndexBinaryIDMap wraps {_describe(inner)}; {_ACCEPTED}")
            codes = reader.flat(expected=(d, code_size, ntotal))
            ids = reader.vector(np.dtype("<i8"), ntotal, "id_map")
        elif fourcc == FLAT:
            codes, ids = reader.flat(), None
        else:
            reader.fail(f"{_describe(fourcc)} is not supported; {_ACCEPTED}")
        reader.end()
    return BinaryIndexFile(8 * codes.shape[1], codes, None if ids is None else ids.astype(np.int64))


def _describe(fourcc: bytes) -> str:
    if fourcc in _OTHER_TYPES:
        return f"faiss index type {fourcc.decode()!r} ({_OTHER_TYPES[fourcc]})"
    if len(fourcc) == 4 and all(32 < byte < 127 for byte in fourcc):
        return f"faiss index type {fourcc.decode()!r}"
    return f"not a faiss binary index (starts with {fourcc!r})"


class _Reader:
    """Reads the records of one file, checking every size against the bytes left *before*
    allocating (a corrupt ``ntotal`` must not ask numpy for petabytes)."""

    def __init__(self, file: BinaryIO, path: Path) -> None:
        self.file, self.path = file, path
        self.left = os.fstat(file.fileno()).st_size

    def fail(self, message: str):
        raise ValueError(f"{self.path}: {message}")

    def read(self, n: int, what: str) -> bytes:
        if n > self.left:
            self.fail(f"truncated: {what} needs {n} bytes, {self.left} left")
        data = self.file.read(n)
        if len(data) != n:  # the file shrank while we read it
            self.fail(f"truncated: {what} needs {n} bytes, got {len(data)}")
        self.left -= n
        return data

    def fourcc(self) -> bytes:
        return self.read(4, "the index type (fourcc)")

    def header(self) -> tuple[int, int, int]:
        d, code_size, ntotal, is_trained, _ = _HEADER.unpack(self.read(_HEADER.size, "header"))
        if d <= 0 or d % 8:
            self.fail(f"invalid header: d={d} (must be > 0 and a multiple of 8)")
        if code_size != d // 8:
            self.fail(f"invalid header: code_size={code_size} does not match d/8={d // 8}")
        if ntotal < 0 or is_trained > 1:
            self.fail(f"invalid header: ntotal={ntotal}, is_trained={is_trained}")
        return d, code_size, ntotal

    def flat(self, expected: tuple[int, int, int] | None = None) -> np.ndarray:
        """An ``IBxF`` record after its fourcc; inside an IDMap, its header must be the IDMap's
        ``expected`` ``(d, code_size, ntotal)``."""
        header = self.header()
        if expected is not None and header != expected:
            self.fail(f"the inner IndexBinaryFlat's (d, code_size, ntotal) = {header} do not "
                      f"match the IndexBinaryIDMap's {expected}")
        _, code_size, ntotal = header
        xb = self.vector(np.dtype(np.uint8), ntotal * code_size, "xb")
        return xb.reshape(ntotal, code_size)

    def vector(self, dtype: np.dtype, expected: int, name: str) -> np.ndarray:
        (size,) = _SIZE.unpack(self.read(_SIZE.size, f"the size of {name}"))
        if size != expected:
            self.fail(f"{name} holds {size} elements, the header says {expected}")
        nbytes = size * dtype.itemsize
        if nbytes > self.left:
            self.fail(f"truncated: {name} needs {nbytes} bytes, {self.left} left")
        array = np.empty(size, dtype=dtype)
        got = self.file.readinto(memoryview(array).cast("B")) if nbytes else 0
        if got != nbytes:  # the file shrank while we read it
            self.fail(f"truncated: {name} needs {nbytes} bytes, got {got}")
        self.left -= nbytes
        return array

    def end(self) -> None:
        if self.left:
            self.fail(f"{self.left} unexpected bytes after the index")
