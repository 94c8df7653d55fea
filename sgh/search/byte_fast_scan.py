"""The byte decoder's scan on faiss's fast-scan kernel: a 4-bit first stage, the byte tables last.

A byte decoder scores code ``h`` of B bytes against query ``x`` by its squared distance to the
reconstruction ``x^(h) = t + U y(h)``, ``y(h) = sum_j c_j[h_j]`` (`sgh.search.byte_decoder`).
faiss's fast scan sums 16-entry tables, one per 4-bit sub-code, in SIMD registers. The first
stage is a product quantizer of ``y(h)`` with 2B sub-quantizers of 16 centroids (B bytes per
item, faiss's ``PQ{2B}x4fs``), after an orthogonal rotation ``R`` fitted as OPQ fits it: from
the principal directions of the database's ``y`` dealt to the sub-spaces so that each gets an
equal share of the log-variance, then alternating the quantizer and the best rotation for it.
Its codes are a function of the byte decoder's codes, made from them when the engine is built
and never stored: no byte per item beyond the code. Being a PQ
its distance is exactly a sum over sub-codes, the squared norms included, so the first stage is
``||x - t - U R z||^2`` for the quantised ``z``.

faiss's kernel takes the tables through a PQ of one-hot centroids (a sub-vector of 16
coordinates, its table's entries), quantises them to 8 bits and returns each query's
``refine_factor * k`` best; those are rescored with the byte tables and the item's cross terms
computed from the codes (`rescore_top_k`), summed as `AsymmetricIndex`'s scan sums them: where
the candidates hold the scan's top k, the results are the scan's, bit for bit.

Where it pays: the candidates cost about what the exact scan of a few dozen items does
(faiss's selection of a deep top list, then the cross terms' tables read at random), and a 4-bit
PQ ranks the byte decoder's codes far less well than its 256-entry tables do, so a result near
the exact scan's takes 16-32 candidates per result on MNIST, more on glove: it is faster only on
databases of hundreds of thousands of items and more (docs/results.md). `SGHIndex` scans
exactly unless given a ``refine_factor``. Over inverted lists it measured slower than the exact
scan of the probed lists at every setting tried, so the lists keep that one.

Deterministic: the rotation and the centroids are fitted on one thread (faiss's and BLAS'),
from a fixed sample, so an index searches alike on any number of threads and after a reload.
"""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_limits

from sgh.search.lookup_kernels import QUERY_BLOCK, rescore_top_k, run_query_blocks

FIT_ROWS = 1 << 15  # reconstructions the rotation and the centroids are fitted on, at most
ROTATION_ITERATIONS = 10  # OPQ's alternations from the balanced start (module doc)
_ENCODE_ROWS = 1 << 16  # reconstructions made and quantised at a time
_BLOCK = 32  # faiss's fast-scan block size


class ByteFastScan:
    """``codes`` ``(n, B)`` scored by ``decoder`` (a `ByteDecoder`); rows ``0 .. n - 1``.
    ``refine_factor``: candidates per result. Once built (on the first search): the first
    stage's ``rotation`` ``R`` and ``quantizer`` (faiss's ``ProductQuantizer``), module doc."""

    def __init__(self, decoder, codes: np.ndarray, refine_factor: int = 8) -> None:
        self.decoder = decoder
        self.codes = np.ascontiguousarray(codes)
        self.refine_factor = refine_factor
        self._faiss_index = None

    @property
    def ntotal(self) -> int:
        return len(self.codes)

    def search(self, queries: np.ndarray, k: int, workers: int = 1
               ) -> tuple[np.ndarray, np.ndarray]:
        """Each query's k best rows by the byte decoder's score (which omits the query's
        ``||x||^2``) among the first stage's ``refine_factor * k`` candidates: ``(D, I)`` sorted
        by (score, row), padding ``inf`` / ``-1``; ``workers``: the rescoring's threads."""
        queries = np.ascontiguousarray(queries, np.float32)
        tables = self.decoder.lookup_tables(queries)
        nq = len(tables)
        D = np.full((nq, k), np.inf, np.float32)
        I = np.full((nq, k), -1, np.int64)
        if self.ntotal == 0 or nq == 0:
            return D, I
        depth = min(self.ntotal, max(k, int(self.refine_factor) * k))
        candidates = self.first_stage(queries, depth)[1]
        pair_tables = self.decoder.pair_tables

        def rescore(start: int) -> None:
            rows = slice(start, start + QUERY_BLOCK)
            rescore_top_k(tables[rows], self.codes, np.zeros(0, np.float32), pair_tables,
                          candidates[rows], D[rows], I[rows])

        run_query_blocks(rescore, nq, workers)
        return D, I

    def first_stage(self, queries: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """faiss's fast scan: each query's ``depth`` best rows by the squared distance to their
        quantised reconstructions (within faiss's 8-bit rounding of the tables), ``(D, I)``."""
        queries = np.ascontiguousarray(queries, np.float32)
        index = self._index()
        inner = self._rotated(queries) @ self._centroid_matrix  # (nq, 32 B): <x_m, p>
        # Inner product (larger nearer) of -(||p||^2 - 2 <x - t, p>) per sub-code: minus the
        # distance, less ||x - t||^2.
        D, I = index.search(2 * inner - self._shift, depth)
        centred = queries - self.decoder.offset
        return np.einsum("ij,ij->i", centred, centred)[:, None] - D, I

    def _rotated(self, features: np.ndarray) -> np.ndarray:
        """``R^T U^T x``: features in the first stage's coordinates."""
        basis = self.decoder.basis
        return (features if basis is None else features @ basis) @ self.rotation

    def _index(self):
        if self._faiss_index is None:
            with threadpool_limits(1):
                self._faiss_index = self._build()
        return self._faiss_index

    def _build(self):
        import faiss  # on first use: `import sgh.search` stays light

        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)  # the same centroids on any number of threads
        try:
            self.quantizer, self.rotation = _first_stage_quantizer(
                self.decoder.tables, self.codes, 2 * self.codes.shape[1])
        finally:
            faiss.omp_set_num_threads(threads)
        m, sub = self.quantizer.M, self.quantizer.dsub
        centroids = faiss.vector_to_array(self.quantizer.centroids).reshape(m, 16, sub)
        matrix = np.zeros((m * sub, m * 16), np.float32)  # block m: sub-space m's centroids
        for part in range(m):
            matrix[part * sub : part * sub + sub, part * 16 : part * 16 + 16] = centroids[part].T
        self._centroid_matrix = matrix
        norms = np.einsum("mcs,mcs->mc", centroids, centroids).ravel()
        self._shift = norms + 2 * (self._rotated(self.decoder.offset[None]) @ matrix)[0]
        staging = faiss.IndexPQ(16 * m, m, 4, faiss.METRIC_INNER_PRODUCT)
        one_hot = np.tile(np.eye(16, dtype=np.float32), (m, 1))
        faiss.copy_array_to_vector(one_hot.ravel(), staging.pq.centroids)
        staging.is_trained = True
        for start in range(0, self.ntotal, _ENCODE_ROWS):
            rotated = coordinates(self.decoder.tables,
                                  self.codes[start : start + _ENCODE_ROWS]) @ self.rotation
            staging.add_sa_codes(self.quantizer.compute_codes(np.ascontiguousarray(rotated)))
        return faiss.IndexPQFastScan(staging, _BLOCK)


def coordinates(tables: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """``(n, r)`` float32 ``y(h) = sum_j tables[j, h_j]`` of codes ``(n, B)``."""
    out = np.zeros((len(codes), tables.shape[2]), np.float32)
    for j in range(len(tables)):
        out += tables[j][codes[:, j]]
    return out


def _first_stage_quantizer(tables: np.ndarray, codes: np.ndarray, parts: int):
    """A faiss ``ProductQuantizer`` of ``parts`` sub-quantizers of 16 centroids and its rotation
    ``R`` ``(r, parts * ceil(r / parts))`` (zero columns pad the dimension), fitted on the
    reconstructions of at most `FIT_ROWS` codes evenly spaced over them (module doc)."""
    sample = coordinates(tables, codes[:: max(1, len(codes) // FIT_ROWS)][:FIT_ROWS])
    sample = sample.astype(np.float64)
    r = sample.shape[1]
    sub = -(-r // parts)
    covariance = np.cov(sample.T) if len(sample) > 1 else np.eye(r)
    values, vectors = np.linalg.eigh(covariance)  # ascending
    logs = np.log(np.maximum(values[::-1], 1e-12 * max(values[-1], 1e-30)))
    # Each direction, largest first, into the sub-space of least log-variance with room.
    members: list[list[int]] = [[] for _ in range(parts)]
    totals = np.zeros(parts)
    for direction, log in enumerate(logs):
        open_parts = [part for part in range(parts) if len(members[part]) < sub]
        part = min(open_parts, key=lambda p: totals[p])
        members[part].append(direction)
        totals[part] += log
    padded = np.zeros((r, parts * sub))
    padded[:, :r] = vectors[:, ::-1]
    order = _padded_order(members, r, sub)
    rotation = np.ascontiguousarray(padded[:, order], np.float32)
    sample = sample.astype(np.float32)
    for _ in range(ROTATION_ITERATIONS):  # OPQ: the quantizer, then the best rotation for it
        rotated = np.ascontiguousarray(sample @ rotation)
        quantizer = _trained(rotated, parts)
        quantised = quantizer.decode(quantizer.compute_codes(rotated))
        left, _, right = np.linalg.svd((sample.T @ quantised).astype(np.float64),
                                       full_matrices=False)
        rotation = np.ascontiguousarray(left @ right, np.float32)
    return _trained(sample @ rotation, parts), rotation


def _trained(rows: np.ndarray, parts: int):
    import faiss

    quantizer = faiss.ProductQuantizer(rows.shape[1], parts, 4)
    # k-means wants at least its 16 centroids' worth of rows: a smaller sample, repeated.
    quantizer.train(np.ascontiguousarray(np.resize(rows, (max(16, len(rows)), rows.shape[1]))))
    return quantizer


def _padded_order(members: list[list[int]], r: int, sub: int) -> np.ndarray:
    """The columns of each sub-space in turn: its directions, then padding columns (>= r)."""
    spare = iter(range(r, r + sub * len(members)))
    return np.array([column for member in members
                     for column in member + [next(spare) for _ in range(sub - len(member))]])
