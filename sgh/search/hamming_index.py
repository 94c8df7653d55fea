"""Exact Hamming search over packed binary codes, with faiss ``IndexBinaryFlat`` semantics.

Codes follow :mod:`sgh.codes`: ``uint8`` rows of ``ceil(bits / 8)`` bytes from
``np.packbits(..., axis=1)``, first code bit = most significant bit of byte 0, zero padding bits.
Database ids are ``0 .. ntotal - 1`` in insertion order (the *position* of a code), unless
external ids are given to every ``add`` (``add(codes, ids)``, as faiss ``IndexBinaryIDMap``'s
``add_with_ids``): then results report those ids. Vocabulary as in faiss ``contrib``: ``xb``
database, ``xq`` queries, results ``(D, I)``.

Conventions:

* Ties: ordered by (distance, position), earlier-added first. faiss 1.15
  ``IndexBinaryFlat.search`` does the same (checked: ``use_heap`` True and False, 1 and 2
  threads, nq 1..1,000, k up to 5,000), so ``search`` returns exactly faiss's ``D`` and ``I``.
  With external ids the order is the same, by position, and ids are mapped afterwards: ties are
  *not* sorted by external id. This is what ``IndexBinaryIDMap`` does (it searches its inner
  ``IndexBinaryFlat``, whose ids are positions, then maps them), so results still equal faiss's.
* External ids: int64, one per code, any value but -1 (the padding); repeated ids are allowed
  (as ``IndexBinaryIDMap`` allows them), and each copy is found at its own position.
* k > ntotal: like faiss, missing neighbours get ``D = 2**31 - 1`` (INT32_MAX) and ``I = -1``.
* Range search is inclusive, distance <= radius. faiss's binary ``range_search`` is strict
  (distance < radius), returns float32 distances and lists each query's hits in position order;
  here ``D`` is int32 and each query's hits are sorted by (distance, position). Same hits as
  faiss at ``radius + 1``.
* faiss files (:meth:`HammingIndex.write_faiss`, :meth:`HammingIndex.read_faiss`,
  :mod:`sgh.search.faiss_files`): faiss needs a multiple of 8 bits, so the file's ``d`` is
  ``8 * ceil(bits / 8)``, padding bits included (zero, so distances do not change).
"""

# ruff: noqa: E741  (``D, I`` is faiss's name for search results)
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from sgh.artifacts.atomic import atomic_file
from sgh.codes import stored_bits, validate_codes
from sgh.data.npz_file import read_npz_arrays
from sgh.errors import check_int
from sgh.search.faiss_files import read_binary_index, write_binary_index

MISSING_DISTANCE = np.iinfo(np.int32).max  # faiss's D for k > ntotal
MISSING_ID = -1  # faiss's I for k > ntotal

def _check_ids(ids, n: int) -> np.ndarray:
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

    The scan is faiss's ``IndexBinaryFlat`` (built by the first search after ``add``, and kept),
    which returns exactly these conventions and, single-threaded, about 1.4 to 2.2 times the
    queries/s of a numpy scan (scripts/bench_ann.py); memory: the packed codes twice (ours, in
    insertion order, and faiss's copy), and external ids (8 bytes per code, and a copy with a
    trailing -1 mapping positions and padding to ids, built by the first search after ``add``).
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
        """Append ``(n, ceil(bits/8))`` uint8 codes.

        Args:
            codes: the packed codes; they take positions ``ntotal .. ntotal + n - 1``.
            ids: ``(n,)`` integer external ids (int64, not -1, repeats allowed), reported by
                ``search`` and ``range_search`` instead of positions. Give ids to every ``add``
                of an index or to none (``reset`` starts over); without ids, ids are positions.
        """
        codes = validate_codes(codes, self.bits, "codes")
        has_ids = ids is not None
        if self._has_ids is not None and has_ids != self._has_ids:
            earlier = "had ids" if self._has_ids else "had none"
            raise ValueError(f"give ids for every add or for none: earlier adds {earlier}, "
                             f"this one {'has ids' if has_ids else 'has none'}")
        if has_ids:
            ids = _check_ids(ids, len(codes))
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
        """The k nearest database codes of each query.

        Args:
            xq: ``(nq, ceil(bits/8))`` uint8 packed query codes.
            k: number of neighbours, >= 1.

        Returns:
            ``D`` int32 ``(nq, k)`` Hamming distances, ascending; ``I`` int64 ``(nq, k)`` ids
            (external ids if given to ``add``). Ties by position (earlier-added first, whatever
            the external ids); INT32_MAX / -1 padding when k > ntotal (as faiss).
        """
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
        """All database codes within ``radius`` (inclusive: distance <= radius) of each query.

        Returns:
            ``(lims, D, I)`` in faiss's layout: query i's hits are ``D[lims[i]:lims[i + 1]]``
            (int32) and ``I[lims[i]:lims[i + 1]]`` (int64, external ids if given to ``add``),
            sorted by (distance, position); ``lims`` is int64 ``(nq + 1,)`` (faiss: uint64).
            faiss's ``range_search(xq, radius + 1)`` finds the same hits (it is strict) but
            lists them in position order with float32 distances.
        """
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
        """faiss's ``IndexBinaryFlat`` of the codes (built by the first search after a change):
        it returns this index's conventions exactly (module doc) and scans faster than numpy."""
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
        ids = arrays.get("ids")  # absent in files without ids (and in older files)
        try:
            index.add(codes, ids=None if ids is None else _check_ids(ids, len(codes)))
        except ValueError as error:
            raise ValueError(f"{path}: key 'ids': {error}") from error
        return index

    def write_faiss(self, path: str | os.PathLike) -> None:
        """Write the index as a faiss file, atomically; faiss is not needed to write it.

        ``faiss.read_index_binary(path)`` opens it as an ``IndexBinaryFlat`` (no ids) or an
        ``IndexBinaryIDMap`` over one (ids), of ``d = 8 * ceil(bits / 8)``, whose ``search``
        returns the same ``(D, I)`` as :meth:`search` (``range_search``: faiss at r + 1 = ours
        at r). Layout: :mod:`sgh.search.faiss_files`.
        """
        write_binary_index(path, self.codes(), self.ids() if self._has_ids else None)

    @classmethod
    def read_faiss(cls, path: str | os.PathLike, bits: int | None = None) -> HammingIndex:
        """Read a faiss ``IndexBinaryFlat`` or ``IndexBinaryIDMap`` (over one) file, as
        written by :meth:`write_faiss` or ``faiss.write_index_binary``.

        Args:
            path: the faiss file.
            bits: the code length; default the file's ``d`` (a multiple of 8). A file written
                from ``bits``-bit codes by :meth:`write_faiss` has ``d = 8 * ceil(bits / 8)``:
                give ``bits`` to get the same index back (its padding bits must be zero).

        Raises:
            ValueError: one line naming the file: another index type, a truncated or
                inconsistent file, or ``bits`` that do not fit its codes.
        """
        stored = read_binary_index(path)
        if bits is None:
            bits = stored.d
        index = cls(bits)
        try:
            index.add(stored.codes, ids=stored.ids)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from error
        return index
