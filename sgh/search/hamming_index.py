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
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from sgh.artifacts.atomic import atomic_file
from sgh.codes import as_words, popcount, stored_bits, validate_codes
from sgh.data.npz_file import read_npz_arrays
from sgh.errors import check_int
from sgh.search.faiss_files import read_binary_index, write_binary_index

# Pairs (query, database item) per distance block. Each pair costs one XOR word (<= 8 bytes) and
# one or two distance bytes. Smaller blocks pay for their per-block Python overhead, larger ones
# gain nothing; 2**18 keeps the temporaries ~2.5 MB.
PAIRS_PER_BLOCK = 1 << 18
# Database codes converted to words at a time: a larger index is searched shard by shard, in id
# order, so its words are never held whole (2^24 64-bit codes: 128 MB of words).
SHARD_ITEMS = 1 << 24
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


def _to_words(packed: np.ndarray) -> np.ndarray:
    """``(n, n_bytes)`` uint8 -> ``(n_words, n)`` words (:func:`sgh.codes.as_words`), one
    contiguous row per word, so that each XOR is a stream through memory."""
    return np.ascontiguousarray(as_words(packed).T)


class HammingIndex:
    """Exact (brute-force) index over ``bits``-bit packed codes; see the module conventions.

    Memory: the database packed, and as words (built by the first search after ``add``, and
    kept) up to ``SHARD_ITEMS`` codes; a larger index converts one shard of ``SHARD_ITEMS``
    codes at a time during each search, in id order, with the same results. Per search:
    temporaries for ``PAIRS_PER_BLOCK`` pairs (~2.5 MB; queries go in blocks and the database in
    slices of at most ``PAIRS_PER_BLOCK`` items), the ``(nq, k)`` output (which is the running
    top-k) and one block's candidates (typically a few k per query, never more than the block).
    ``range_search`` also holds all its hits. External ids: 8 bytes per code, and a copy (with
    a trailing -1, mapping positions and padding to ids) built by the first search after ``add``.
    """

    def __init__(self, bits: int) -> None:
        self.bits = check_int("bits", bits, 1)
        self.code_size = -(-self.bits // 8)
        # Distances <= bits, plus the sentinel bits + 1 must fit (see _select).
        self._dist_dtype = np.dtype(np.min_scalar_type(self.bits + 1))
        self.reset()

    @property
    def ntotal(self) -> int:
        return sum(len(chunk) for chunk in self._chunks)

    def reset(self) -> None:
        """Remove all codes and ids; the next ``add`` may choose ids or none afresh."""
        self._chunks: list[np.ndarray] = []
        self._words: np.ndarray | None = None
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
            self._words = None
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
        # The output doubles as the running top-k; bits + 1 marks "no neighbour yet".
        D = np.full((len(xq), k), self.bits + 1, dtype=np.int32)
        I = np.full((len(xq), k), MISSING_ID, dtype=np.int64)
        for q0, q1, b0, dist in self._distance_blocks(xq):
            self._select(dist, b0, D[q0:q1], I[q0:q1])
        D[D > self.bits] = MISSING_DISTANCE
        return D, self._external(I)

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
        radius = min(check_int("radius", radius, 0), self.bits)  # clip: fits the dist dtype
        xq = validate_codes(xq, self.bits, "xq")
        rows, dists, ids = [np.zeros(0, np.int64)], [np.zeros(0, np.int32)], [np.zeros(0, np.int64)]
        for q0, _, b0, dist in self._distance_blocks(xq):
            flat = np.flatnonzero(dist <= radius)
            block_rows, cols = np.divmod(flat, dist.shape[1])
            rows.append(block_rows + q0)
            dists.append(dist.ravel()[flat].astype(np.int32))
            ids.append(cols + b0)
        rows, D, I = np.concatenate(rows), np.concatenate(dists), np.concatenate(ids)
        # Each query's database slices come in id order (_distance_blocks) and hits within a
        # block in row-major order: each query's hits are already in id order, so a stable sort
        # on (query, distance) yields (query, distance, id).
        order = np.argsort(rows * (self.bits + 1) + D, kind="stable")
        lims = np.zeros(len(xq) + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=len(xq)), out=lims[1:])
        return lims, D[order], self._external(I[order])

    def _distance_blocks(self, xq: np.ndarray) -> Iterator[tuple[int, int, int, np.ndarray]]:
        """Yield ``(q0, q1, b0, dist)``: distances of ``xq[q0:q1]`` to database ids ``b0...``.

        ``dist`` is a view into buffers reused by the next block: consume it before asking for
        the next. For every query, database slices come in id order (shard by shard; within a
        shard, query block by query block).
        """
        codes, query_words = self.codes(), _to_words(xq)
        nq, total = len(xq), len(codes)
        if nq == 0 or total == 0:
            return
        for shard in range(0, total, SHARD_ITEMS):
            if total <= SHARD_ITEMS:
                if self._words is None:
                    self._words = _to_words(codes)
                words = self._words
            else:
                words = _to_words(codes[shard:shard + SHARD_ITEMS])
            for q0, q1, b0, d in self._shard_blocks(query_words, words):
                yield q0, q1, shard + b0, d

    def _shard_blocks(self, query_words: np.ndarray, words: np.ndarray):
        """``_distance_blocks`` over one shard's words, ids counted from the shard's first."""
        nq, nb = query_words.shape[1], words.shape[1]
        db_step = min(nb, PAIRS_PER_BLOCK)
        q_step = max(1, PAIRS_PER_BLOCK // nb)
        pairs = min(q_step, nq) * db_step
        xor = np.empty(pairs, dtype=words.dtype)
        count = np.empty(pairs, dtype=np.uint8)
        dist = np.empty(pairs, dtype=self._dist_dtype)
        for q0 in range(0, nq, q_step):
            q1 = min(q0 + q_step, nq)
            for b0 in range(0, nb, db_step):
                b1 = min(b0 + db_step, nb)
                shape = (q1 - q0, b1 - b0)
                size = shape[0] * shape[1]
                # Flat buffers sliced then reshaped: every block is C-contiguous.
                x, c, d = (buf[:size].reshape(shape) for buf in (xor, count, dist))
                for w in range(len(words)):
                    np.bitwise_xor(query_words[w, q0:q1, None], words[w, None, b0:b1], out=x)
                    if w == 0 and d.dtype == np.uint8:
                        popcount(x, out=d)
                    elif w == 0:
                        d[...] = popcount(x, out=c)
                    else:
                        d += popcount(x, out=c)
                yield q0, q1, b0, d

    def _select(self, dist: np.ndarray, b0: int, D: np.ndarray, I: np.ndarray) -> None:
        """Merge block ``dist`` (database ids ``b0...``) into the running top-k ``(D, I)``."""
        n_rows, n = dist.shape
        k = D.shape[1]
        # A block item enters only if closer than the current k-th: at equal distance it loses,
        # its id being larger than every kept id (slices come in id order).
        limit = D[:, k - 1].astype(np.int64)
        if n >= 64 * k and limit.max() > self.bits:
            # A row has no k-th neighbour yet (first slice): bound the block's k-th smallest
            # distance without sorting. Of m >= k chunk minima, the k-th smallest is >= k items
            # of the row, so nothing above it is in the top k. One cheap min pass, then only a
            # few k items pass the comparison. Later slices skip it: the running k-th already
            # lets through only ~k * slice / seen items.
            m = 16 * k
            chunk_mins = dist[:, : n - n % m].reshape(n_rows, m, -1).min(axis=2)
            kth = np.partition(chunk_mins, k - 1, axis=1)[:, k - 1]
            limit = np.minimum(limit, kth.astype(np.int64) + 1)
        flat = np.flatnonzero(dist < limit.astype(dist.dtype)[:, None])
        if flat.size == 0:
            return
        rows, cols = np.divmod(flat, n)
        keys = np.concatenate([np.repeat(np.arange(n_rows), k), rows]) * (self.bits + 2)
        keys += np.concatenate([D.ravel(), dist.ravel()[flat]])
        ids = np.concatenate([I.ravel(), cols + b0])
        # Kept entries come first and are sorted by (distance, id); candidates follow in id
        # order with larger ids: a stable sort on (row, distance) orders all by (row, dist, id).
        # Keys below 2**15 sort as int16, which numpy sorts by radix (linear time).
        if n_rows * (self.bits + 2) < 2**15:
            keys = keys.astype(np.int16)
        order = np.argsort(keys, kind="stable")
        # Row r starts after r * k kept entries and the candidates of rows < r.
        per_row = np.bincount(rows, minlength=n_rows)
        starts = np.arange(n_rows) * k + np.cumsum(per_row) - per_row
        take = order[(starts[:, None] + np.arange(k)).ravel()]
        D[...] = (keys[take] % (self.bits + 2)).reshape(n_rows, k)
        I[...] = ids[take].reshape(n_rows, k)

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
