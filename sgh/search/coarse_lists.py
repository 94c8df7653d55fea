"""The coarse quantizer of an index's inverted lists, as faiss's IVF indexes have one: ``nlist``
k-means centroids of training features, and the lists nearest each vector.

`CoarseQuantizer.nearest` ranks a vector's lists by ``||c||^2 - 2 <x, c>``, as faiss's flat
index does, but with products in a fixed order (`sgh.scores.fixed_order.product`: a vector's
lists the same alone, in any batch and on any threads; ties to the smaller list), and a compiled
pass over each block still in cache offers the heap only what beats its worst, where faiss feeds
every distance to a heap: 0.89-1.29x faiss's flat search's speed for a lone vector, 1.04-2.05x
in batches of 1,000, 2.0-2.3x in batches of 16-100 (scripts/bench_products.py).
"""

from __future__ import annotations

import numpy as np

from sgh.compiled import compiled
from sgh.scores.fixed_order import product
from sgh.scores.lookup_kernels import run_query_blocks
from sgh.scores.top_k import offer, sort_heap

KMEANS_POINTS_PER_LIST = 256  # training points per list for the k-means: faiss's own cap
# Products per block: about 1 MB, which stays in L2 for the selection that follows.
BLOCK_PRODUCTS = 1 << 18


def learned_centroids(x: np.ndarray, nlist: int, seed: int) -> np.ndarray:
    """``(nlist, dim)`` float32 k-means centroids of ``x`` (20 iterations, faiss's k-means)."""
    import faiss

    kmeans = faiss.Kmeans(x.shape[1], nlist, niter=20, seed=seed,
                          max_points_per_centroid=KMEANS_POINTS_PER_LIST)
    kmeans.train(np.ascontiguousarray(x, np.float32))
    return kmeans.centroids


class CoarseQuantizer:
    """The lists' ``(nlist, dim)`` ``centroids``, searched exhaustively (module doc)."""

    def __init__(self, centroids: np.ndarray) -> None:
        centroids = np.ascontiguousarray(centroids, np.float32)
        self.nlist = len(centroids)
        self._minus_twice_t = np.ascontiguousarray(-2.0 * centroids.T)  # the doubling is exact
        self._squared_norms = np.einsum("ld,ld->l", centroids.astype(np.float64),
                                        centroids.astype(np.float64)).astype(np.float32)

    def nearest(self, x: np.ndarray, count: int, workers: int | None = None) -> np.ndarray:
        """``(n, min(count, nlist))`` int64: each row's nearest lists, nearest first, on
        ``workers`` threads (None: faiss's thread count); ValueError naming the first
        row with no finite distance."""
        import faiss

        x = np.ascontiguousarray(x, np.float32)
        count = min(count, self.nlist)
        lists = np.empty((len(x), count), np.int64)
        block = max(1, BLOCK_PRODUCTS // self._minus_twice_t.shape[1])
        unplaced = []

        def select(start: int) -> None:
            rows = slice(start, start + block)
            products = product(x[rows], self._minus_twice_t)  # overflow: refused below
            first = _nearest_columns(products, self._squared_norms, lists[rows])
            if first >= 0:
                unplaced.append(start + first)

        run_query_blocks(select, len(x), faiss.omp_get_max_threads() if workers is None
                         else workers, block)
        if len(unplaced):
            raise ValueError(f"row {min(unplaced)} of the features: its distances to the lists' "
                             "centroids overflow float32 (features far beyond the scale the "
                             "model was trained on); scale them as its training features were")
        return lists


@compiled
def _nearest_columns(products, squared_norms, out_columns):
    """Each row's ``k`` smallest ``squared_norms[c] + products[r, c]`` (``k``: the output's
    width), ascending, ties to the smaller column, into ``out_columns``; the first row with
    fewer than ``k`` finite ones (a NaN is never kept), or -1."""
    k = out_columns.shape[1]
    ranked = np.empty(k, np.float32)
    unplaced = -1
    for r in range(out_columns.shape[0]):
        columns = out_columns[r]
        ranked[:] = np.inf
        columns[:] = -1
        worst = np.float32(np.inf)
        row = products[r]
        for c in range(squared_norms.shape[0]):
            s = squared_norms[c] + row[c]
            if s < worst:  # columns come in order: an equal score keeps the smaller column
                worst = offer(ranked, columns, s, c, k)
        sort_heap(ranked, columns)
        if unplaced < 0 and not (np.isfinite(ranked[0]) and np.isfinite(ranked[k - 1])):
            unplaced = r
    return unplaced
