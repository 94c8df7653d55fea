"""Exact Hamming search over packed binary codes (`sgh.codes`), as faiss's ``IndexBinaryFlat``.

Ids are positions (insertion order) unless every ``add`` gives external ids, as faiss's
``IndexBinaryIDMap``: int64, any value but -1, repeats allowed. Results are faiss's ``(D, I)``:

* Ties by (distance, position), earlier-added first; external ids are mapped afterwards, so ties
  are *not* sorted by id. ``search`` returns exactly faiss's ``D`` and ``I``.
* k > ntotal: missing neighbours get ``D = 2**31 - 1`` and ``I = -1``.
* Range search is inclusive (distance <= radius), int32 ``D``, hits sorted by (distance,
  position); faiss's is strict, float32, in position order: the same hits at ``radius + 1``.
* faiss files need a multiple of 8 bits: the file's ``d`` is ``8 * ceil(bits / 8)``, with the
  zero padding bits (distances do not change).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from sgh.artifacts.atomic import atomic_file
from sgh.codes import stored_bits, validate_codes
from sgh.data.npz_file import read_npz_arrays
from sgh.errors import check_int

MISSING_DISTANCE = np.iinfo(np.int32).max  # faiss's D for k > ntotal
MISSING_ID = -1  # faiss's I for k > ntotal

def check_ids(ids, n: int) -> np.ndarray:
    """``ids`` as a fresh ``(n,)`` int64 array; ValueError quoting what is wrong."""
    ids = np.asarray(ids)
    if ids.ndim != 1 or len(ids) != n or (ids.dtype.kind not in "iu" and ids.size):
        raise ValueError(f"ids must be a 1-D integer array, one id per code ({n}), got dtype "
                         f"{ids.dtype} and shape {ids.shape}")
    if ids.dtype.kind == "u" and ids.size and ids.max() > np.iinfo(np.int64).max:
        raise ValueError(f"ids must fit in int64, got {ids.max()}")
    ids = ids.astype(np.int64)
    if (ids == MISSING_ID).any():
        raise ValueError(f"ids must not be {MISSING_ID} (the id of a missing neighbour), got "
                         f"it at position {int(np.argmax(ids == MISSING_ID))}")
    return ids


class HammingIndex:
    """Exact (brute-force) index over ``bits``-bit packed codes; see the module conventions.

    The scan is faiss's ``IndexBinaryFlat``, built by the first search after ``add``. Memory: the
    packed codes twice (ours, in insertion order, and faiss's copy), and any external ids twice.
    """

    def __init__(self, bits: int) -> None:
        self.bits = check_int("bits", bits, 1)
        self.code_size = -(-self.bits // 8)
        self.reset()

    @property
    def ntotal(self) -> int:
        return sum(len(chunk) for chunk in self._chunks)

    def reset(self) -> None:
        """Remove all codes and ids; the next ``add`` may choose ids or none afresh."""
        self._chunks: list[np.ndarray] = []
        self._faiss = None
        # None until the first add: then whether every add gives ids (True) or none does.
        self._has_ids: bool | None = None
        self._id_chunks: list[np.ndarray] = []
        self._id_table: np.ndarray | None = None  # ids then -1: maps positions (and -1) to ids

    def add(self, codes: np.ndarray, ids: np.ndarray | None = None) -> None:
        """Append ``(n, ceil(bits/8))`` uint8 codes, with ``(n,)`` external ids (module doc) in
        every ``add`` of an index or in none (``reset`` starts over)."""
        codes = validate_codes(codes, self.bits, "codes")
        has_ids = ids is not None
        if self._has_ids is not None and has_ids != self._has_ids:
            earlier = "had ids" if self._has_ids else "had none"
            raise ValueError(f"give ids for every add or for none: earlier adds {earlier}, "
                             f"this one {'has ids' if has_ids else 'has none'}")
        if has_ids:
            ids = check_ids(ids, len(codes))
        self._has_ids = has_ids
        if len(codes):
            self._chunks.append(codes.copy())
            self._faiss = None
            if has_ids:
                self._id_chunks.append(ids)
                self._id_table = None

    def codes(self) -> np.ndarray:
        """All database codes in position (insertion) order, ``(ntotal, ceil(bits/8))`` uint8."""
        if not self._chunks:
            return np.zeros((0, self.code_size), dtype=np.uint8)
        if len(self._chunks) > 1:
            self._chunks = [np.concatenate(self._chunks)]
        return self._chunks[0]

    @property
    def has_ids(self) -> bool:
        """Whether codes were added with external ids (False for an empty index)."""
        return bool(self._has_ids)

    def ids(self) -> np.ndarray:
        """The id of every database code in position order, ``(ntotal,)`` int64: the external
        ids given to ``add``, or ``0 .. ntotal - 1`` without them."""
        if not self._has_ids:
            return np.arange(self.ntotal, dtype=np.int64)
        if not self._id_chunks:
            return np.zeros(0, dtype=np.int64)
        if len(self._id_chunks) > 1:
            self._id_chunks = [np.concatenate(self._id_chunks)]
        return self._id_chunks[0]

    def _external(self, I: np.ndarray) -> np.ndarray:
        """Positions (and -1 padding) -> external ids (and -1); positions without ids."""
        if not self._has_ids:
            return I
        if self._id_table is None:
            self._id_table = np.append(self.ids(), np.int64(MISSING_ID))  # table[-1] == -1
        return self._id_table[I]

    def search(self, xq: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k nearest codes of each packed query: ``D`` int32 ``(nq, k)`` ascending, ``I``
        int64 ``(nq, k)`` (module doc: ties, padding)."""
        k = check_int("k", k, 1)
        xq = validate_codes(xq, self.bits, "xq")
        if self.ntotal == 0:
            return (np.full((len(xq), k), MISSING_DISTANCE, np.int32),
                    np.full((len(xq), k), MISSING_ID, np.int64))
        D, I = self._engine().search(xq, k)
        return D.astype(np.int32, copy=False), self._external(I)

    def range_search(
        self, xq: np.ndarray, radius: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All codes within ``radius`` (inclusive) of each query, as faiss's ``(lims, D, I)``:
        query i's hits are ``D[lims[i]:lims[i + 1]]``, ``I[...]``; ``lims`` int64 (module doc)."""
        radius = check_int("radius", radius, 0)
        xq = validate_codes(xq, self.bits, "xq")
        if self.ntotal == 0:
            return np.zeros(len(xq) + 1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int64)
        lims, D, I = self._engine().range_search(xq, min(radius, self.bits) + 1)  # strict there
        lims, D = lims.astype(np.int64), D.astype(np.int32)
        # faiss lists each query's hits by position: a stable sort on (query, distance) orders
        # them by (query, distance, position).
        rows = np.repeat(np.arange(len(xq)), np.diff(lims))
        order = np.argsort(rows * (self.bits + 1) + D, kind="stable")
        return lims, D[order], self._external(I[order])

    def _engine(self):
        """faiss's ``IndexBinaryFlat`` of the codes, built by the first search after a change."""
        if self._faiss is None:
            import faiss

            self._faiss = faiss.IndexBinaryFlat(8 * self.code_size)
            self._faiss.add(self.codes())
        return self._faiss

    def save(self, path: str | os.PathLike) -> None:
        """Write ``bits``, ``codes`` and (if given to ``add``) ``ids`` to the ``.npz`` file
        ``path`` (name kept), atomically."""
        arrays = {"bits": np.int64(self.bits), "codes": self.codes()}
        if self._has_ids:
            arrays["ids"] = self.ids()
        # An open file, not the temporary's name: np.savez would append ".npz" to that.
        with atomic_file(path) as temporary, open(temporary, "wb") as file:
            np.savez(file, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> HammingIndex:
        """Read an index written by :meth:`save`; ValueError naming the file and key if invalid."""
        if not Path(path).exists():
            raise FileNotFoundError(path)
        arrays = read_npz_arrays(Path(path))  # one-line ValueError (UserInputError) if damaged
        index = cls(stored_bits(arrays, str(path)))
        if "codes" not in arrays:
            raise ValueError(f"{path}: missing key 'codes' (expected 'bits' and 'codes')")
        try:
            codes = validate_codes(arrays["codes"], index.bits, "codes")
        except ValueError as error:
            raise ValueError(f"{path}: key 'codes': {error}") from error
        ids = arrays.get("ids")  # absent in files without ids
        try:
            index.add(codes, ids=None if ids is None else check_ids(ids, len(codes)))
        except ValueError as error:
            raise ValueError(f"{path}: key 'ids': {error}") from error
        return index

    def write_faiss(self, path: str | os.PathLike) -> None:
        """Write the index as a faiss file (faiss's own writer), atomically: an
        ``IndexBinaryFlat`` (no ids) or an ``IndexBinaryIDMap`` over one, which search alike
        (``faiss.read_index_binary`` opens it)."""
        import faiss

        flat = faiss.IndexBinaryFlat(8 * self.code_size)  # referenced until written
        index = faiss.IndexBinaryIDMap(flat) if self._has_ids else flat
        index.add_with_ids(self.codes(), self.ids()) if self._has_ids else index.add(self.codes())
        with atomic_file(path) as temporary:
            faiss.write_index_binary(index, str(temporary))
