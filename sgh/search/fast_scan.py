"""The asymmetric scan on faiss's fast-scan kernels, flat or over inverted lists.

Grouped in fours, a code's bits name one of the 16 corners of ``{0,1}^4``, and a per-bit score's
share of a group is the inner product of the query's four weights with that corner: faiss's
inner-product PQ with 4-bit sub-quantizers whose centroids are the corners, whose codes are the
packed codes' nibbles as they are. The per-item term ``||h B||^2`` rides along as two more
sub-quantizers (8 bits). Both quantisations make the scan approximate: a search rescores its
``refine_factor * k`` best by the exact float32 score (`rescore_top_k`). With ``nlist`` the codes
live in ``IndexIVFPQFastScan`` lists (not residual: the bit weights do not depend on the list),
which `SGHIndex` chooses on the features and hands to ``search_preassigned``.
"""

from __future__ import annotations

import numpy as np

from sgh.codes import validate_codes
from sgh.errors import check_int
from sgh.scores.asymmetric import AsymmetricScore
from sgh.scores.lookup_kernels import (
    QUERY_BLOCK,
    rescore_top_k,
    run_query_blocks,
    scan_scores,
)
from sgh.search.faiss_codes import add_listed_codes
from sgh.search.index_items import joined

# Candidates per result rescored exactly: raise `FastScanIndex.refine_factor` for a result nearer
# the float scan's, or for a small k.
DEFAULT_REFINE_FACTOR = 1
_NO_PAIR_TABLES = np.zeros((0, 256 * 256), np.float32)  # `scan_scores` reads held terms
_BLOCK = 32  # faiss's fast-scan block size (codes are interleaved by 32 items)
# _CORNERS[c] = the 4 bits of nibble value c, first bit most significant (as `pack_bits`).
_CORNERS = ((np.arange(16)[:, None] >> (3 - np.arange(4))) & 1).astype(np.float32)


class FastScanIndex:
    """Packed codes searched by one `AsymmetricScore` on faiss's fast-scan kernels (module doc).
    Items are rows ``0 .. ntotal - 1`` in the order they were added; ``lists`` (with ``nlist``)
    says which inverted list each row is in."""

    def __init__(self, score: AsymmetricScore, nlist: int | None = None) -> None:
        self.score = score
        self.bits = score.bits
        self.nlist = None if nlist is None else check_int("nlist", nlist, 1)
        self.refine_factor = DEFAULT_REFINE_FACTOR
        self._groups = -(-self.bits // 4)
        self._has_norms = score.code_templates is not None
        self.codes = np.zeros((0, -(-self.bits // 8)), np.uint8)
        self.norms = np.zeros(0, np.float32)
        self.lists = np.zeros(0, np.int64)
        self._faiss_index = None

    @property
    def ntotal(self) -> int:
        return len(self.codes)

    @property
    def subquantizers(self) -> int:
        """4-bit sub-quantizers per item: the bit groups, and the item constant's two nibbles."""
        return self._groups + (2 if self._has_norms else 0)

    def add(self, codes: np.ndarray, lists: np.ndarray | None = None) -> None:
        """Append packed codes (rows ``ntotal ..``); ``lists``: each one's inverted list."""
        codes = validate_codes(codes, self.bits, "codes")
        if self.nlist is not None:
            lists = np.asarray(lists, np.int64)
            if lists.shape != (len(codes),) or (len(lists) and (
                    lists.min() < 0 or lists.max() >= self.nlist)):
                raise ValueError(f"lists must give each of the {len(codes)} codes a list in "
                                 f"0 .. {self.nlist - 1}")
            self.lists = joined(self.lists, lists)
        self.codes = joined(self.codes, codes)
        self.norms = joined(self.norms, self.score.item_terms(codes))
        self._faiss_index = None

    def search(self, queries: np.ndarray, k: int, probes: np.ndarray | None = None,
               workers: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Each query's k best rows by the exact score among the fast scan's
        ``refine_factor * k`` candidates: ``(D, I)`` sorted by (score, row), padding ``inf`` /
        ``-1``. ``probes``: ``(nq, nprobe)`` the lists each query scans (with ``nlist``);
        ``workers``: threads of the rescoring (faiss's scan takes faiss's)."""
        k = check_int("k", k, 1)
        weights = self.score.bit_weights(queries)
        tables = self.score.tables_of(weights)
        nq = len(tables)
        D = np.full((nq, k), np.inf, np.float32)
        I = np.full((nq, k), -1, np.int64)
        if self.ntotal == 0 or nq == 0:
            return D, I
        depth = min(self.ntotal, max(k, int(self.refine_factor) * k))
        targets = self._targets(weights)
        if self.nlist is None and depth == self.ntotal:  # every item wanted: the exact scores
            return self._every_item(tables, k)
        index = self._index()
        if self.nlist is None:
            _, candidates = index.search(targets, depth)
        else:
            probes = np.ascontiguousarray(probes, np.int64)
            if probes.ndim != 2 or len(probes) != nq:
                raise ValueError(f"probes must be (nq, nprobe) lists, got {probes.shape}")
            index.nprobe = probes.shape[1]
            _, candidates = index.search_preassigned(
                targets, depth, probes, np.zeros(probes.shape, np.float32))

        def rescore(start: int) -> None:
            rows = slice(start, start + QUERY_BLOCK)
            rescore_top_k(tables[rows], self.codes, self.norms, candidates[rows], D[rows], I[rows])

        run_query_blocks(rescore, nq, workers)
        return D, I

    def _every_item(self, tables: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Every row by the exact score (summed as `rescore_top_k` sums), sorted by (score,
        row): what rescoring the fast scan's whole output gives, without the scan."""
        scores = np.empty((len(tables), self.ntotal), np.float32)
        scan_scores(tables, self.codes, self.norms, _NO_PAIR_TABLES, scores)
        I = np.argsort(scores, axis=1, kind="stable")[:, :k]  # equal scores stay in row order
        D = np.take_along_axis(scores, I, axis=1)
        if k > self.ntotal:  # padded as faiss pads
            pad = ((0, 0), (0, k - self.ntotal))
            D, I = np.pad(D, pad, constant_values=np.inf), np.pad(I, pad, constant_values=-1)
        return D, I

    def _targets(self, weights: np.ndarray) -> np.ndarray:
        """The queries as faiss sees them: minus their bit weights (inner product: larger is
        nearer), then -1 on each nibble of the item constant (weights 16 and 1 of its step)."""
        targets = np.zeros((len(weights), 4 * self.subquantizers), np.float32)
        targets[:, : self.bits] = -weights
        if self._has_norms:
            targets[:, 4 * self._groups] = -1.0
            targets[:, 4 * self._groups + 4] = -1.0
        return targets

    def _index(self):
        if self._faiss_index is None:
            self._faiss_index = self._build()
        return self._faiss_index

    def _build(self):
        import faiss  # on first use: `import sgh.search` stays light

        m, d = self.subquantizers, 4 * self.subquantizers
        centroids = np.zeros((m, 16, 4), np.float32)
        centroids[: self._groups] = _CORNERS
        pq_codes = swap_nibbles(self.codes)
        if self._has_norms:
            low, high = float(self.norms.min()), float(self.norms.max())
            step = (high - low) / 255.0 if high > low else 1.0
            # Levels above the minimum: a per-query constant (the minimum) changes no ranking.
            centroids[self._groups, :, 0] = np.arange(16) * 16 * step
            centroids[self._groups + 1, :, 0] = np.arange(16) * step
            levels = np.clip(np.rint((self.norms - low) / step), 0, 255).astype(np.uint8)
            pq_codes = _append_nibbles(pq_codes, self._groups, [levels >> 4, levels & 15])
        # Filled as an IndexPQ or IndexIVFPQ, then converted: the conversion interleaves the
        # codes as faiss's fast-scan kernels take them.
        if self.nlist is None:
            staging = faiss.IndexPQ(d, m, 4, faiss.METRIC_INNER_PRODUCT)
        else:
            # The coarse step is done outside; faiss needs a quantizer of its dimension all the
            # same, which `search_preassigned` never consults.
            quantizer = faiss.IndexFlatIP(d)
            quantizer.add(np.zeros((self.nlist, d), np.float32))
            staging = faiss.IndexIVFPQ(quantizer, d, self.nlist, m, 4, faiss.METRIC_INNER_PRODUCT)
            staging.by_residual = False
        faiss.copy_array_to_vector(centroids.ravel(), staging.pq.centroids)
        staging.is_trained = True
        if self.nlist is None:
            staging.add_sa_codes(np.ascontiguousarray(pq_codes))
            return faiss.IndexPQFastScan(staging, _BLOCK)
        add_listed_codes(staging, self.lists, pq_codes)
        return faiss.IndexIVFPQFastScan(staging, _BLOCK)


def swap_nibbles(codes: np.ndarray) -> np.ndarray:
    """Packed codes as faiss's 4-bit PQ codes: our byte holds groups (2j, 2j + 1) in its (high,
    low) nibble, faiss's in its (low, high) one."""
    return ((codes >> 4) | (codes << 4)).astype(np.uint8)


def _append_nibbles(pq_codes: np.ndarray, groups: int, nibbles: list[np.ndarray]) -> np.ndarray:
    """4-bit codes ``nibbles`` appended after the first ``groups`` codes of each row."""
    total = groups + len(nibbles)
    out = np.zeros((len(pq_codes), -(-total // 2)), np.uint8)
    out[:, : pq_codes.shape[1]] = pq_codes
    if groups % 2:  # the last code byte's high nibble (faiss's order) is free
        out[:, groups // 2] &= 0x0F
    for position, values in enumerate(nibbles, start=groups):
        shift = 4 * (position % 2)
        out[:, position // 2] |= (values.astype(np.uint8) << shift).astype(np.uint8)
    return out
