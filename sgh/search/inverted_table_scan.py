"""`InvertedTableScan`: codes of residuals grouped by inverted list, scored by a lookup-table
score in the lists a query probes only.

The byte decoder's search over inverted lists (`sgh.search.sgh_index.SGHIndex` with
``decoder="bytes"`` and ``nlist``), as faiss's IVF-PQ: each item is coded as its residual to its
list's centroid ``c_l``, so its reconstruction is ``c_l + x^(h)``, and a query's squared
distance to it is

    ||q - c_l||^2 - 2 <q - c_l, x^(h)> + ||x^(h)||^2

one constant per probed list, the query's lookup tables minus the centroid's (``-2 <c_l, C_j>``,
computed once per list), and the item's cross terms of the norm (`ByteDecoder.item_norms`), held
in one byte: the flat scan's sums, with a list's table. The codes come in list order (as
`SGHIndex` holds them), so that each probed list is one contiguous run of memory, read where
it is.
"""

# ruff: noqa: E741  (``D, I`` is faiss's name for search results)
from __future__ import annotations

import numpy as np

from sgh.search.asymmetric_index import QUERY_BLOCK, run_query_blocks
from sgh.search.byte_decoder import one_byte_terms
from sgh.search.lookup_kernels import scan_lists_top_k, sort_heaps


class InvertedTableScan:
    """Packed residual ``codes`` in the lists of ``centroids`` (``lists``: each row's, in
    non-decreasing order), scored by ``score``: an object with ``lookup_tables(queries)`` and
    ``item_norms(codes)`` (a `ByteDecoder`)."""

    def __init__(self, score, codes: np.ndarray, lists: np.ndarray, centroids: np.ndarray
                 ) -> None:
        if np.any(lists[:-1] > lists[1:]):
            raise ValueError("InvertedTableScan: the rows must come in list order")
        self.score = score
        self.codes = np.ascontiguousarray(codes)
        # Each item's term held in one byte, as faiss's additive quantizers hold their norms
        # (B / 8 + 1 bytes per item): computed from the pair tables for every probed list, as
        # the flat scan does per tile, it cost 1.6-2.5x the scan (each query probes its own
        # lists, so nothing is shared across a block of queries).
        self.term_levels, self.level_terms, self.term_step = one_byte_terms(
            score.item_norms(self.codes))
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
        ``distances``: ``(nq, nprobe)`` each probed list's ``||q - c_l||^2``, as the coarse
        step that chose the lists computed them (not computed twice)."""
        tables = self.score.lookup_tables(queries)
        probes = np.ascontiguousarray(probes, np.int64)
        constants = np.ascontiguousarray(distances, np.float32)
        D = np.full((len(tables), k), np.inf, np.float32)
        I = np.full((len(tables), k), -1, np.int64)

        def scan(start: int) -> None:
            stop = start + QUERY_BLOCK
            scan_lists_top_k(tables[start:stop], self.list_tables, constants[start:stop],
                             self.codes, self.term_levels, self.level_terms, self.starts,
                             probes[start:stop], D[start:stop], I[start:stop])
            sort_heaps(D[start:stop], I[start:stop])

        run_query_blocks(scan, len(tables), workers)
        return D, I
