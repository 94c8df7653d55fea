"""`InvertedTableScan`: the byte decoder's scan over inverted lists, as faiss's IVF-PQ.

An item coded as its residual to its list's centroid ``c_l`` is reconstructed as ``c_l + x^(h)``;
a query's squared distance to it, ``||q - c_l||^2 - 2 <q - c_l, x^(h)> + ||x^(h)||^2``, is one
constant per probed list, the query's lookup tables minus the centroid's, and the item's cross
terms of the norm (`ByteDecoder.item_terms`), computed from the codes once per call for the
items of the lists its queries probe: B bytes per item. A call whose probed lists hold many
more items than its queries' top k would take in reads a one-byte bound of each item's terms
(kept in memory once computed) and computes the exact terms only where the bound could reach the
top k (`bounded_scan_is_cheaper` chooses), as `AsymmetricIndex`'s flat scan does for a few
queries: the same results to the bit. The codes come in list order, so that each probed list is
one contiguous run, read in place.
"""

from __future__ import annotations

import numpy as np

from sgh.scores.asymmetric_index import ROUNDING
from sgh.scores.byte_decoder import one_byte_terms
from sgh.scores.fixed_order import squared_distances_to_rows
from sgh.scores.lookup_kernels import (
    QUERY_BLOCK,
    bounded_scan_lists_top_k,
    list_pair_terms,
    run_query_blocks,
    scan_lists_top_k,
)
from sgh.scores.top_k import CAPACITY_PER_K, MAX_ROWS, RESERVOIR_FROM_K

# What one item's cross term costs the bounded scan, read from the pair tables code by code,
# against the plain scan, which sums the probed lists' terms pair table by pair table, each table
# read in order first (`list_pair_terms`), beside a heap (k below `RESERVOIR_FROM_K`) and beside a
# reservoir: the heap's weight measured on MNIST and SIFT10K and checked on glove-50-angular, the
# reservoir's chosen on glove where MNIST and SIFT10K gave 3 and 4 alike (benchmarks/LOG.md).
BOUNDED_TERM_COST_HEAP = 8.0
BOUNDED_TERM_COST_RESERVOIR = 4.0


class InvertedTableScan:
    """Packed residual ``codes`` in the lists of ``centroids`` (``lists``: each row's, in
    non-decreasing order), scored by ``score``: an object with ``lookup_tables(queries)``,
    ``item_terms(codes)`` and ``pair_tables`` (a `ByteDecoder`)."""

    def __init__(self, score, codes: np.ndarray, lists: np.ndarray, centroids: np.ndarray) -> None:
        if np.any(lists[:-1] > lists[1:]):  # each list must be one contiguous run of rows
            raise ValueError("InvertedTableScan: the rows must come in list order")
        if len(codes) > MAX_ROWS:
            raise ValueError(f"an index with inverted lists holds at most {MAX_ROWS:,} items, "
                             f"got {len(codes):,}: split the items among indexes")
        self.score = score
        self.codes = np.ascontiguousarray(codes)
        self._bounds = None
        self.starts = np.searchsorted(lists, np.arange(len(centroids) + 1)).astype(np.int64)
        self.sizes = np.diff(self.starts)  # each list's items, for the choice of scan per call
        # The tables are affine in the query, so the table of ``q - c`` is the query's minus
        # ``tables(c) - tables(0)``: what a list's centroid takes away.
        self.centroids = centroids = np.asarray(centroids, np.float32)
        self.list_tables = (score.lookup_tables(centroids)
                            - score.lookup_tables(np.zeros((1, centroids.shape[1]), np.float32)))
        self._largest_shift = float(np.abs(self.list_tables).max(axis=2).sum(axis=1).max(
            initial=0.0))

    def search(self, queries: np.ndarray, k: int, probes: np.ndarray, workers: int
               ) -> tuple[np.ndarray, np.ndarray]:
        """The k nearest rows of each query among its ``probes`` lists: ``(D, I)``, ``D`` the
        squared distance to each reconstruction, sorted by (D, row), padding ``inf`` / ``-1``."""
        tables = self.score.lookup_tables(queries)
        probes = np.ascontiguousarray(probes, np.int64)
        constants = self._list_distances(queries, probes)
        D = np.empty((len(tables), k), np.float32)  # every row written by the scan
        I = np.empty((len(tables), k), np.int64)
        probed = np.flatnonzero(np.bincount(probes[probes >= 0], minlength=len(self.sizes)))
        pair_tables = self.score.pair_tables
        bounded = bounded_scan_is_cheaper(self.sizes, probes, probed, k)
        if bounded:
            levels, level_terms, error = self._term_bounds()
            # Each query's allowance: the bound's error, and float32 rounding of its sums.
            largest = (np.abs(tables).max(axis=2).sum(axis=1) + np.abs(level_terms).max()
                       + self._largest_shift + np.abs(constants).max(axis=1))
            slack = (error + ROUNDING * largest).astype(np.float32)
        else:
            # The cross terms of the probed lists' items, each computed once for all the
            # queries (uninitialised elsewhere: never read).
            terms = np.empty(len(self.codes), np.float32)
            chunk = -(-len(probed) // max(1, workers))
            run_query_blocks(lambda start: list_pair_terms(
                pair_tables, self.codes, self.starts, probed[start : start + chunk], terms),
                len(probed), workers, max(1, chunk))

        def scan(start: int) -> None:
            rows = slice(start, start + QUERY_BLOCK)
            if bounded:
                bounded_scan_lists_top_k(tables[rows], self.list_tables, constants[rows],
                                         self.codes, levels, level_terms, slack[rows],
                                         pair_tables, self.starts, probes[rows], D[rows],
                                         I[rows])
            else:
                scan_lists_top_k(tables[rows], self.list_tables, constants[rows], self.codes,
                                 terms, self.starts, probes[rows], D[rows], I[rows])

        run_query_blocks(scan, len(tables), workers)
        return D, I

    def _list_distances(self, queries: np.ndarray, probes: np.ndarray) -> np.ndarray:
        """``(nq, nprobe)`` float32 ``||q - c_l||^2`` of each probed list, summed in one fixed
        order (`squared_distances_to_rows`): the coarse step's distances (faiss's BLAS) differ
        in their last bits between thread counts, and would move D with them."""
        out = np.empty(probes.shape, np.float32)
        squared_distances_to_rows(np.ascontiguousarray(queries, np.float32), self.centroids,
                                  probes, out)
        return out

    def _term_bounds(self) -> tuple[np.ndarray, np.ndarray, np.float32]:
        """`one_byte_terms` of the items' terms, computed once."""
        if self._bounds is None:
            self._bounds = one_byte_terms(self.score.item_terms(self.codes))
        return self._bounds


def bounded_scan_is_cheaper(sizes: np.ndarray, probes: np.ndarray, probed: np.ndarray,
                            k: int) -> bool:
    """Whether a call's queries, each scanning its ``probes`` lists (of ``sizes`` items; -1:
    none) for its k best, cost less with the one-byte bounds than with every probed item's cross
    term computed once (``probed``: the call's lists, each once). The plain scan computes
    ``sizes[probed].sum()`` terms; the bounded scan about those that enter each query's top k
    (`expected_intake`), each at `BOUNDED_TERM_COST_HEAP` or `BOUNDED_TERM_COST_RESERVOIR`. Both
    give the same results to the bit."""
    visited = sizes[probes[probes >= 0]].sum() / max(1, len(probes))
    cost = BOUNDED_TERM_COST_HEAP if k < RESERVOIR_FROM_K else BOUNDED_TERM_COST_RESERVOIR
    return cost * len(probes) * expected_intake(visited, k) < sizes[probed].sum()


def expected_intake(visited: float, k: int) -> float:
    """How many of ``visited`` items, in random order, enter a query's top k: a heap (k below
    `RESERVOIR_FROM_K`) takes the first k and then item i with chance k / i, about
    ``k (1 + ln(v / k))``. A reservoir takes the first ``C k`` (``C`` = `CAPACITY_PER_K`) and
    then every item below its bar, which it moves only when full, to the k-th best of the n seen:
    ``(C - 1) k`` more enter in about the next ``(C - 1) n``, so ``(C - 1) k`` for each factor
    ``C`` of items, ``C k + (C - 1) k ln(v / C k) / ln C``."""
    held = k if k < RESERVOIR_FROM_K else CAPACITY_PER_K * k
    if visited <= held:
        return float(visited)
    if k < RESERVOIR_FROM_K:
        return k * (1.0 + np.log(visited / k))
    return held + (held - k) * np.log(visited / held) / np.log(CAPACITY_PER_K)
