"""`InvertedTableScan`: codes grouped by inverted list, scored by a lookup-table score in the
lists a query probes only.

The byte decoder's search over inverted lists (`sgh.search.sgh_index.SGHIndex` with
``decoder="bytes"`` and ``nlist``): the same per-byte tables and per-item norm as the flat scan
(`sgh.search.asymmetric_index.AsymmetricIndex`), the same float32 sums, so an item's score is
the flat scan's bit for bit; only the items scanned differ. The codes are stored in list order,
so that each probed list is one contiguous run of memory.
"""

# ruff: noqa: E741  (``D, I`` is faiss's name for search results)
from __future__ import annotations

import numpy as np

from sgh.search.asymmetric_index import QUERY_BLOCK, run_query_blocks
from sgh.search.lookup_kernels import scan_lists_top_k, sorted_heaps


class InvertedTableScan:
    """Packed ``codes`` in ``nlist`` lists (``lists``: each row's), scored by ``score``: an
    object with ``lookup_tables(queries)`` and ``item_norms(codes)`` (a `ByteDecoder`)."""

    def __init__(self, score, codes: np.ndarray, lists: np.ndarray, nlist: int) -> None:
        self.score = score
        order = np.argsort(lists, kind="stable")
        self.rows = order.astype(np.int64)
        self.codes = np.ascontiguousarray(codes[order])
        self.norms = score.item_norms(self.codes)
        self.starts = np.searchsorted(lists[order], np.arange(nlist + 1)).astype(np.int64)

    def search(self, queries: np.ndarray, k: int, probes: np.ndarray, workers: int
               ) -> tuple[np.ndarray, np.ndarray]:
        """The k best rows of each query among its ``probes`` lists: ``(D, I)`` sorted by
        (score, row), padding ``inf`` / ``-1``."""
        tables = self.score.lookup_tables(queries)
        probes = np.ascontiguousarray(probes, np.int64)
        D = np.full((len(tables), k), np.inf, np.float32)
        I = np.full((len(tables), k), -1, np.int64)

        def scan(start: int) -> None:
            stop = start + QUERY_BLOCK
            scan_lists_top_k(tables[start:stop], self.codes, self.norms, self.rows, self.starts,
                             probes[start:stop], D[start:stop], I[start:stop])

        run_query_blocks(scan, len(tables), workers)
        return sorted_heaps(D, I)
