"""Exact search of binary codes by an asymmetric score: real-valued queries, binary database.

``AsymmetricIndex(score)`` holds packed database codes and each item's code term
(`AsymmetricScore.item_terms`), or for a score with ``pair_tables`` (the byte decoder) the codes
alone: the scans compute the term per tile, or for a call of a few queries read a one-byte bound
of it (`_term_bounds`). A search scans with the kernels of :mod:`sgh.scores.lookup_kernels`, in
bounded memory: queries in blocks, the database in tiles, only the running top k kept; on a
processor with AVX-512 VBMI, calls of `permute_scan.FROM_QUERIES` or more (that do not read the
one-byte bounds) with :mod:`sgh.scores.permute_scan`'s, to the same results.

Conventions: ``D`` holds the scores (float32, smaller = nearer; the score omits a per-query
constant, so compare D within a query only), ``I`` the database ids in insertion order; ties by
smaller id; ``k > ntotal`` pads with ``D = inf`` and ``I = -1``.
"""

from __future__ import annotations

import numpy as np

from sgh.codes import validate_codes
from sgh.compiled import resolved_workers
from sgh.errors import check_int
from sgh.scores import permute_scan
from sgh.scores.asymmetric import AsymmetricScore
from sgh.scores.byte_decoder import one_byte_terms
from sgh.scores.lookup_kernels import (
    QUERY_BLOCK,
    bounded_scan_top_k,
    run_query_blocks,
    scan_scores,
    scan_top_k,
)
from sgh.scores.permute_scan import ROUNDING
from sgh.scores.top_k import rows_by_score, sort_heaps, sorted_heaps

# A top k of at least 1 / DENSE_TOP_SHARE of the database comes from every score, partitioned:
# the heap would take in most items.
DENSE_TOP_SHARE = 16
# A call of fewer queries than this many per byte pair scans by the items' one-byte bounds
# (`bounded_scan_top_k`): with the term per tile, each query's share of the pairs costs more.
# The scans cross between 6 and 12 queries a call at 32 bits (MNIST, SIFT10K) and between 24
# and 64 at 64 bits (MNIST), later for a smaller k (benchmarks/LOG.md).
BOUNDED_QUERIES_PER_PAIR = 4 / 3


class AsymmetricIndex:
    """Packed codes scored against real-valued queries by one `AsymmetricScore` (module doc);
    ``codes``: the first to `add`."""

    def __init__(self, score: AsymmetricScore, codes: np.ndarray | None = None) -> None:
        self.score = score
        self.bits = score.bits
        # Pair tables (the byte decoder's) give the kernels the item terms; else the held norms.
        pair_tables = getattr(score, "pair_tables", None)
        self._terms_from_codes = pair_tables is not None
        self._pair_tables = (pair_tables if self._terms_from_codes
                             else np.zeros((0, 256 * 256), np.float32))
        self.reset()
        if codes is not None:
            self.add(codes)

    def reset(self) -> None:
        self._codes: list[np.ndarray] = []
        self._norms: list[np.ndarray] = []
        self._bounds = None

    def __repr__(self) -> str:
        return f"AsymmetricIndex({self.ntotal} items, {self.score!r})"

    @property
    def ntotal(self) -> int:
        return sum(len(chunk) for chunk in self._codes)

    def add(self, codes: np.ndarray) -> None:
        """Append ``(n, ceil(bits/8))`` uint8 codes; they get ids ``ntotal .. ntotal + n - 1``."""
        codes = validate_codes(codes, self.bits, "codes")
        if len(codes):
            self._bounds = None
            self._codes.append(np.ascontiguousarray(codes))
            if not self._terms_from_codes:
                self._norms.append(self.score.item_terms(codes))

    def codes(self) -> np.ndarray:
        """All database codes in id order."""
        self._merge()
        return self._codes[0] if self._codes else np.zeros((0, -(-self.bits // 8)), np.uint8)

    def _held_norms(self) -> np.ndarray:
        """The norms held beside the codes; empty where the kernels compute them per tile."""
        self._merge()
        return self._norms[0] if self._norms else np.zeros(0, np.float32)

    def _merge(self) -> None:
        if len(self._codes) > 1:
            self._codes = [np.concatenate(self._codes)]
        if len(self._norms) > 1:
            self._norms = [np.concatenate(self._norms)]

    def search(self, queries: np.ndarray, k: int, workers: int | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """The k best-scoring database codes of each query: ``(D, I)``, see the module doc."""
        k = check_int("k", k, 1)
        codes, norms, pair_tables = self.codes(), self._held_norms(), self._pair_tables
        if DENSE_TOP_SHARE * k >= len(codes) > 0:  # the top k from every score, partitioned
            D = np.full((len(queries), k), np.inf, np.float32)
            I = np.full((len(queries), k), -1, np.int64)
            kept = min(k, len(codes))
            for q0, q1, scores in self.score_blocks(queries, workers=workers):
                D[q0:q1, :kept], I[q0:q1, :kept] = smallest_by_score_then_id(scores, kept)
            return D, I
        tables = self.score.lookup_tables(queries)
        D = np.full((len(tables), k), np.inf, np.float32)
        I = np.full((len(tables), k), -1, np.int64)
        if len(codes) == 0 or len(tables) == 0:
            return D, I
        block = QUERY_BLOCK
        bounded = self._terms_from_codes and \
            len(tables) < BOUNDED_QUERIES_PER_PAIR * len(pair_tables)
        if bounded:
            levels, level_terms, error = self._term_bounds()
            # Each query's allowance: the bound's error, and float32 rounding of its sums.
            largest = np.abs(tables).max(axis=2).sum(axis=1) + np.abs(level_terms).max()
            slack = (error + ROUNDING * largest).astype(np.float32)
        permuted = not bounded and permute_scan.AVAILABLE and \
            len(tables) >= permute_scan.FROM_QUERIES and \
            codes.shape[1] <= permute_scan.MAX_CODE_BYTES
        if permuted or (self._terms_from_codes and not bounded):  # tiles once a call: one a thread
            block = max(QUERY_BLOCK, -(-len(tables) // resolved_workers(workers)))
        if permuted:
            block = min(block, permute_scan.MAX_QUERIES_A_CALL)

        def scan(start: int) -> None:
            rows = slice(start, start + block)
            if permuted:
                unbounded = np.zeros(len(tables[rows]), np.bool_)
                permute_scan.permute_scan_top_k(tables[rows], codes, norms, pair_tables,
                                                D[rows], I[rows], unbounded)
                if not unbounded.any():
                    return
                rows = start + np.flatnonzero(unbounded)  # left to the scalar scan
            D_rows, I_rows = D[rows], I[rows]  # views of a slice, copies of chosen rows
            if bounded:
                bounded_scan_top_k(tables[rows], codes, levels, level_terms, slack[rows],
                                   pair_tables, D_rows, I_rows)
            else:
                scan_top_k(tables[rows], codes, norms, pair_tables, 0, D_rows, I_rows)
            sort_heaps(D_rows, I_rows)
            if not isinstance(rows, slice):  # the chosen rows were copied out
                D[rows], I[rows] = D_rows, I_rows

        run_query_blocks(scan, len(tables), workers, block)
        return D, I

    def _term_bounds(self) -> tuple[np.ndarray, np.ndarray, np.float32]:
        """`one_byte_terms` of the items' terms, computed once."""
        if self._bounds is None:
            self._bounds = one_byte_terms(self.score.item_terms(self.codes()))
        return self._bounds

    def score_blocks(self, queries: np.ndarray, block_items: int = 1 << 24,
                     workers: int | None = None):
        """Yield ``(q0, q1, scores)``: the ``(q1 - q0, ntotal)`` float32 scores of every database
        item, for blocks of queries of at most ``block_items`` scores."""
        tables = self.score.lookup_tables(queries)
        codes, norms, pair_tables = self.codes(), self._held_norms(), self._pair_tables
        step = max(1, block_items // max(1, len(codes)))
        for q0 in range(0, len(tables), step):
            q1 = min(q0 + step, len(tables))
            out = np.empty((q1 - q0, len(codes)), np.float32)

            def scan(start: int, q0=q0, q1=q1, out=out) -> None:
                stop = min(start + QUERY_BLOCK, q1 - q0)
                scan_scores(tables[q0 + start : q0 + stop], codes, norms, pair_tables,
                            out[start:stop])

            run_query_blocks(scan, q1 - q0, workers)
            yield q0, q1, out

    def candidate_scores(self, queries: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        """``(nq, S)`` float32 scores of each query's candidate ids, unsorted; ``-1``: ``inf``."""
        tables = self.score.lookup_tables(queries)
        candidates = np.asarray(candidates, np.int64)
        if candidates.shape[0] != len(tables):
            raise ValueError(f"candidates must have one row per query ({len(tables)}), got "
                             f"{candidates.shape}")
        codes = self.codes()
        valid = candidates >= 0
        if not valid.any():  # padding only (an empty index has no row 0 to stand in for it)
            return np.full(candidates.shape, np.inf, np.float32)
        safe = np.where(valid, candidates, 0)
        # norm + table[q, j, code[c, j]] over the bytes j in the kernels' order: float32 sums
        # bit-identical to a full scan's, so rescoring never reorders near ties differently.
        D = (self.score.item_terms(codes[safe.ravel()]).reshape(safe.shape)
             if self._terms_from_codes else self._held_norms()[safe])
        for j in range(codes.shape[1]):
            D += np.take_along_axis(tables[:, j, :], codes[safe, j].astype(np.intp), axis=1)
        D[~valid] = np.inf
        return D

    def rescore(self, queries: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`candidate_scores`, sorted: ``(D, I)`` by (score, id), ``-1`` last with ``D = inf``."""
        D = self.candidate_scores(queries, candidates)
        return sorted_heaps(D, np.where(np.asarray(candidates) >= 0, candidates, -1))


def smallest_by_score_then_id(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's k smallest ``(score, id)`` of ``(nq, n)`` scores, sorted: ``(D, I)``, the
    order and ties of the heap scan, from a partition instead (or, for most of the row, from
    one sort: the partition's extra passes then cost more than sorting what it skips)."""
    k = min(k, scores.shape[1])
    if 2 * k >= scores.shape[1]:
        ids = rows_by_score(scores)[:, :k]
        return np.take_along_axis(scores, ids, axis=1), ids
    threshold = np.partition(scores, k - 1, axis=1)[:, k - 1 : k]
    below, at = scores < threshold, scores == threshold
    # Of the items at the threshold, the smallest ids fill the places left.
    chosen = below | (at & (np.cumsum(at, axis=1) <= k - below.sum(axis=1, keepdims=True)))
    ids = np.nonzero(chosen)[1].reshape(len(scores), k)  # ascending within each row
    values = np.take_along_axis(scores, ids, axis=1)
    order = np.argsort(values, axis=1, kind="stable")  # equal scores stay in id order
    return np.take_along_axis(values, order, axis=1), np.take_along_axis(ids, order, axis=1)
