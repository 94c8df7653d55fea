"""Exact Hamming search over packed binary codes, with faiss ``IndexBinaryFlat`` semantics.

Codes follow :mod:`sgh.codes`: ``uint8`` rows of ``ceil(bits / 8)`` bytes from
``np.packbits(..., axis=1)``, first code bit = most significant bit of byte 0, zero padding bits.
Database ids are ``0 .. ntotal - 1`` in insertion order. Vocabulary as in faiss ``contrib``:
``xb`` database, ``xq`` queries, results ``(D, I)``.

Conventions:

* Ties: ordered by (distance, id), smaller id first. faiss 1.15 ``IndexBinaryFlat.search`` does
  the same (checked: ``use_heap`` True and False, 1 and 2 threads, nq 1..1,000, k up to 5,000),
  so ``search`` returns exactly faiss's ``D`` and ``I``.
* k > ntotal: like faiss, missing neighbours get ``D = 2**31 - 1`` (INT32_MAX) and ``I = -1``.
* Range search is inclusive, distance <= radius. faiss's binary ``range_search`` is strict
  (distance < radius), returns float32 distances and lists each query's hits in id order; here
  ``D`` is int32 and each query's hits are sorted by (distance, id). Same hits as faiss at
  ``radius + 1``.
"""

# ruff: noqa: E741  (``D, I`` is faiss's name for search results)
from __future__ import annotations

import os
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from sgh.codes import as_words, popcount, validate_codes

# Pairs (query, database item) per distance block. Each pair costs one XOR word (<= 8 bytes) and
# one or two distance bytes. Measured (1,000 x 1M 64-bit codes, k=100): 2**17..2**20 all within
# noise of each other, 2**16 ~30% slower (per-block Python overhead); 2**18 keeps it ~2.5 MB.
PAIRS_PER_BLOCK = 1 << 18
# Database codes converted to words at a time: a larger index is searched shard by shard, in id
# order, so its words are never held whole (2^24 64-bit codes: 128 MB of words).
SHARD_ITEMS = 1 << 24
MISSING_DISTANCE = np.iinfo(np.int32).max  # faiss's D for k > ntotal
MISSING_ID = -1  # faiss's I for k > ntotal

def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


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
    ``range_search`` also holds all its hits.
    """

    def __init__(self, bits: int) -> None:
        self.bits = _check_int(bits, "bits", 1)
        self.code_size = -(-self.bits // 8)
        # Distances <= bits, plus the sentinel bits + 1 must fit (see _select).
        self._dist_dtype = np.dtype(np.min_scalar_type(self.bits + 1))
        self.reset()

    @property
    def ntotal(self) -> int:
        return sum(len(chunk) for chunk in self._chunks)

    def reset(self) -> None:
        """Remove all codes."""
        self._chunks: list[np.ndarray] = []
        self._words: np.ndarray | None = None

    def add(self, codes: np.ndarray) -> None:
        """Append ``(n, ceil(bits/8))`` uint8 codes; they get ids ``ntotal .. ntotal + n - 1``."""
        codes = validate_codes(codes, self.bits, "codes")
        if len(codes):
            self._chunks.append(codes.copy())
            self._words = None

    def codes(self) -> np.ndarray:
        """All database codes in id order, ``(ntotal, ceil(bits/8))`` uint8."""
        if not self._chunks:
            return np.zeros((0, self.code_size), dtype=np.uint8)
        if len(self._chunks) > 1:
            self._chunks = [np.concatenate(self._chunks)]
        return self._chunks[0]

    def search(self, xq: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k nearest database codes of each query.

        Args:
            xq: ``(nq, ceil(bits/8))`` uint8 packed query codes.
            k: number of neighbours, >= 1.

        Returns:
            ``D`` int32 ``(nq, k)`` Hamming distances, ascending; ``I`` int64 ``(nq, k)`` ids.
            Ties by smaller id; INT32_MAX / -1 padding when k > ntotal (as faiss).
        """
        k = _check_int(k, "k", 1)
        xq = validate_codes(xq, self.bits, "xq")
        # The output doubles as the running top-k; bits + 1 marks "no neighbour yet".
        D = np.full((len(xq), k), self.bits + 1, dtype=np.int32)
        I = np.full((len(xq), k), MISSING_ID, dtype=np.int64)
        for q0, q1, b0, dist in self._distance_blocks(xq):
            self._select(dist, b0, D[q0:q1], I[q0:q1])
        D[D > self.bits] = MISSING_DISTANCE
        return D, I

    def range_search(
        self, xq: np.ndarray, radius: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All database codes within ``radius`` (inclusive: distance <= radius) of each query.

        Returns:
            ``(lims, D, I)`` in faiss's layout: query i's hits are ``D[lims[i]:lims[i + 1]]``
            (int32) and ``I[lims[i]:lims[i + 1]]`` (int64), sorted by (distance, id); ``lims`` is
            int64 ``(nq + 1,)`` (faiss: uint64). faiss's ``range_search(xq, radius + 1)`` finds
            the same hits (it is strict) but lists them in id order with float32 distances.
        """
        radius = min(_check_int(radius, "radius", 0), self.bits)  # clip: fits the dist dtype
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
        return lims, D[order], I[order]

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
        """Write ``bits`` and ``codes`` to the ``.npz`` file ``path`` (name kept), atomically."""
        path = Path(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as file:
                np.savez(file, bits=np.int64(self.bits), codes=self.codes())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike) -> HammingIndex:
        """Read an index written by :meth:`save`; ValueError naming the file and key if invalid."""
        try:
            data = np.load(path, allow_pickle=False)
            if not hasattr(data, "files"):  # a .npy file loads as a bare array
                raise ValueError("an .npy array, not an .npz archive")
            with data:
                arrays = {key: data[key] for key in ("bits", "codes") if key in data.files}
        except FileNotFoundError:
            raise
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
            raise ValueError(f"{path}: not a readable .npz index file ({error})") from error
        for key in ("bits", "codes"):
            if key not in arrays:
                raise ValueError(f"{path}: missing key {key!r} (expected 'bits' and 'codes')")
        bits = arrays["bits"]
        if bits.shape != () or bits.dtype.kind not in "iu" or bits < 1:
            raise ValueError(f"{path}: key 'bits' must be a positive integer, got {bits!r}")
        index = cls(int(bits))
        try:
            index.add(arrays["codes"])
        except ValueError as error:
            raise ValueError(f"{path}: key 'codes': {error}") from error
        return index
