"""Rescoring a Hamming shortlist with a nonlinear (mlp) decoder: decode the candidates.

A linear decoder's reconstruction distance splits into per-bit lookup tables
(`sgh.search.asymmetric`); an mlp decoder's does not, so the second stage of a two-stage search
decodes each shortlisted code, ``x^ = g(h) * scale + mean``, and scores it against the query:
``||x - x^||^2`` (euclidean, angular) or ``-<x, x^>`` (inner product).

Cost: one decoder evaluation per distinct candidate code in each block of queries (the
shortlists of neighbouring queries overlap, and many items share a code), plus ``dim`` flops per
candidate. Memory: one block's decoded candidates, at most :data:`BLOCK_VALUES` floats.
"""

from __future__ import annotations

import numpy as np

from sgh.codes import unpack_bits
from sgh.data.similarity import nearness
from sgh.search.asymmetric import check_queries
from sgh.search.lookup_kernels import sorted_heaps

# Decoded floats of one block of queries' candidates (2**24 floats = 64 MB).
BLOCK_VALUES = 1 << 24
# Codes decoded per call of the model.
DECODE_BATCH = 16384


class DecoderRescorer:
    """``rescore(queries, candidates)`` by the model's decoder, for `TwoStageSearch`."""

    def __init__(self, model, database_codes: np.ndarray, similarity: str) -> None:
        self.model, self.database_codes, self.similarity = model, database_codes, similarity
        self.bits = model.bits
        self.form = ("decoder (mlp), reconstruction distance: ||x - x^(h)||^2, each "
                     "shortlisted code decoded" if similarity != "inner_product" else
                     "decoder (mlp), inner product: -<x, x^(h)>, each shortlisted code decoded")

    def _decode(self, codes: np.ndarray) -> np.ndarray:
        """Input-space reconstructions of packed codes, ``(n, dim)`` float32."""
        out = []
        for start in range(0, len(codes), DECODE_BATCH):
            h = unpack_bits(codes[start : start + DECODE_BATCH], self.bits).astype(np.float32)
            out.append(self.model.decode(h).numpy() * self.model.scale.numpy()
                       + self.model.mean.numpy())
        return np.concatenate(out) if out else np.zeros((0, len(self.model.mean.numpy())))

    def rescore(self, queries: np.ndarray, candidates: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        candidates = np.asarray(candidates, np.int64)
        dim = int(self.model.mean.shape[0])
        queries = check_queries(queries, dim).astype(np.float64)
        D = np.full(candidates.shape, np.inf, np.float64)  # float32 overflows at large scales
        step = max(1, BLOCK_VALUES // max(1, candidates.shape[1] * dim))
        for q0 in range(0, len(candidates), step):
            block = candidates[q0 : q0 + step]
            valid = block >= 0
            codes, inverse = np.unique(self.database_codes[block[valid]], axis=0,
                                       return_inverse=True)
            decoded = self._decode(codes).astype(np.float64)[inverse.reshape(-1)]
            owners = queries[np.nonzero(valid)[0] + q0]
            D[q0 : q0 + step][valid] = nearness(decoded, owners, self.similarity)
        return sorted_heaps(D, np.where(candidates >= 0, candidates, -1))
