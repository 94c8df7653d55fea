"""The coarse quantizer of an index's inverted lists, as faiss's IVF indexes have one: ``nlist``
k-means centroids of training features, and the lists nearest each vector.

`CoarseQuantizer.nearest` ranks a vector's lists by ``||c||^2 - 2 <x, c>`` (its own ``||x||^2``
ranks nothing), as faiss's flat index does. faiss keeps each vector's nearest in a heap fed
every distance, which costs more than the products where the vectors are short and the lists
many; for vectors of at most `PRODUCT_TERMS` dimensions the products are one BLAS call, in a
fixed order (`sgh.scores.fixed_order.product`: a vector's lists the same alone, in any batch
and on any number of threads, ties to the smaller list), and a compiled pass over each block,
still in cache, offers the heap only the distances below its worst: 1.7-2.6x faiss's queries/s
at glove-50's and SIFT10K's lists. Longer vectors need several BLAS calls for that order, and
there faiss's flat search is as fast or faster (benchmarks/LOG.md): it does the work.
"""

from __future__ import annotations

import numpy as np

from sgh.compiled import compiled
from sgh.scores.fixed_order import PRODUCT_TERMS, padded_width, product
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
        if centroids.shape[1] > PRODUCT_TERMS:
            import faiss

            self._flat = faiss.IndexFlatL2(centroids.shape[1])
            self._flat.add(centroids)
            return
        self._flat = None
        self._minus_twice_t = padded_width(-2.0 * centroids.T)  # the doubling is exact
        self._squared_norms = np.einsum("ld,ld->l", centroids.astype(np.float64),
                                        centroids.astype(np.float64)).astype(np.float32)

    def nearest(self, x: np.ndarray, count: int, workers: int | None = None) -> np.ndarray:
        """``(n, min(count, nlist))`` int64: the lists of the nearest centroids to each row of
        ``x``, nearest first, on ``workers`` threads (None, and always in faiss's flat search:
        as many as faiss is given); ValueError naming the first row where no distance is
        finite."""
        import faiss

        x = np.ascontiguousarray(x, np.float32)
        count = min(count, self.nlist)
        workers = faiss.omp_get_max_threads() if workers is None else workers
        if self._flat is not None:
            ranked, lists = self._flat.search(x, count)
        else:
            lists = np.empty((len(x), count), np.int64)
            ranked = np.empty((len(x), count), np.float32)
            block = max(1, BLOCK_PRODUCTS // self._minus_twice_t.shape[1])

            def select(start: int) -> None:
                rows = slice(start, start + block)
                with np.errstate(over="ignore", invalid="ignore"):  # refused below, by row
                    products = product(x[rows], self._minus_twice_t)
                _nearest_columns(products, self._squared_norms, ranked[rows], lists[rows])

            run_query_blocks(select, len(x), workers, block)
        unplaced = (lists < 0).any(axis=1) | ~np.isfinite(ranked).all(axis=1)
        if unplaced.any():
            raise ValueError(f"row {int(np.argmax(unplaced))} of the features: its distances to "
                             "the lists' centroids overflow float32 (features far beyond the "
                             "scale the model was trained on); scale them as its training "
                             "features were")
        return lists


@compiled
def _nearest_columns(products, squared_norms, out_ranked, out_columns):
    """Each row's ``k`` smallest ``squared_norms[c] + products[r, c]`` (``k``: the outputs'
    width; ``c`` below ``len(squared_norms)``, the products' padding ignored), ascending, ties
    to the smaller column, into ``out_ranked`` and ``out_columns``; ``+inf`` / -1 where fewer
    are below ``+inf`` (a NaN is never kept)."""
    k = out_columns.shape[1]
    for r in range(out_columns.shape[0]):
        ranked, columns = out_ranked[r], out_columns[r]
        ranked[:] = np.inf
        columns[:] = -1
        worst = np.float32(np.inf)
        row = products[r]
        for c in range(squared_norms.shape[0]):
            s = squared_norms[c] + row[c]
            if s < worst:  # columns come in order: an equal score keeps the smaller column
                worst = offer(ranked, columns, s, c, k)
        sort_heap(ranked, columns)
