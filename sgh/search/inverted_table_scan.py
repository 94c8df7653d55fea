"""`InvertedTableScan`: the byte decoder's scan over inverted lists, as faiss's IVF-PQ.

An item coded as its residual to its list's centroid ``c_l`` is reconstructed as ``c_l + x^(h)``;
a query's squared distance to it, ``||q - c_l||^2 - 2 <q - c_l, x^(h)> + ||x^(h)||^2``, is one
constant per probed list, the query's lookup tables minus the centroid's, and the item's cross
terms of the norm (`ByteDecoder.item_norms`), computed from the codes once per call for the
items of the lists its queries probe: B bytes per item, nothing held beside the codes. The codes
come in list order, so that each probed list is one contiguous run, read in place.
"""

from __future__ import annotations

import numpy as np

from sgh.search.lookup_kernels import (
    QUERY_BLOCK,
    list_pair_terms,
    run_query_blocks,
    scan_lists_top_k,
    sort_heaps,
)


class InvertedTableScan:
    """Packed residual ``codes`` in the lists of ``centroids`` (``lists``: each row's, in
    non-decreasing order), scored by ``score``: an object with ``lookup_tables(queries)`` and
    ``pair_tables`` (a `ByteDecoder`)."""

    def __init__(self, score, codes: np.ndarray, lists: np.ndarray, centroids: np.ndarray) -> None:
        if np.any(lists[:-1] > lists[1:]):  # each list must be one contiguous run of rows
            raise ValueError("InvertedTableScan: the rows must come in list order")
        self.score = score
        self.codes = np.ascontiguousarray(codes)
        self.starts = np.searchsorted(lists, np.arange(len(centroids) + 1)).astype(np.int64)
        # The tables are affine in the query, so the table of ``q - c`` is the query's minus
        # ``tables(c) - tables(0)``: what a list's centroid takes away.
        centroids = np.asarray(centroids, np.float32)
        self.list_tables = (score.lookup_tables(centroids)
                            - score.lookup_tables(np.zeros((1, centroids.shape[1]), np.float32)))

    def search(self, queries: np.ndarray, k: int, probes: np.ndarray, distances: np.ndarray,
               workers: int) -> tuple[np.ndarray, np.ndarray]:
        """The k nearest rows of each query among its ``probes`` lists: ``(D, I)``, ``D`` the
        squared distance to each reconstruction, sorted by (D, row), padding ``inf`` / ``-1``.
        ``distances``: ``(nq, nprobe)`` each probed list's ``||q - c_l||^2`` (the coarse step's)."""
        tables = self.score.lookup_tables(queries)
        probes = np.ascontiguousarray(probes, np.int64)
        constants = np.ascontiguousarray(distances, np.float32)
        D = np.full((len(tables), k), np.inf, np.float32)
        I = np.full((len(tables), k), -1, np.int64)
        # The cross terms of the probed lists' items, each computed once for all the queries
        # (uninitialised elsewhere: never read).
        terms = np.empty(len(self.codes), np.float32)
        probed = np.unique(probes[probes >= 0])
        chunk = -(-len(probed) // max(1, workers))
        run_query_blocks(lambda start: list_pair_terms(
            self.score.pair_tables, self.codes, self.starts, probed[start : start + chunk],
            terms), len(probed), workers, max(1, chunk))

        def scan(start: int) -> None:
            stop = start + QUERY_BLOCK
            scan_lists_top_k(tables[start:stop], self.list_tables, constants[start:stop],
                             self.codes, terms, self.starts, probes[start:stop], D[start:stop],
                             I[start:stop])
            sort_heaps(D[start:stop], I[start:stop])

        run_query_blocks(scan, len(tables), workers)
        return D, I
