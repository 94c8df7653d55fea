"""Scores through an mlp decoder: a shortlist rescored by decoding its codes, in NumPy.

An mlp decoder's reconstruction ``x^~(h) = phi(h) K + c`` (in the model's normalised units
``x~ = (x - mean) / scale``, ``phi`` its hidden layers) is no sum over the bits, but its distance
splits at the last layer:

    ||x~ - x^~(h)||^2 = ||x~||^2 - 2 <x~ K^T, phi(h)> - 2 <x~, c> + ||x^~(h)||^2

per query one projection ``x~ K^T``, per database item one number ``||x^~(h)||^2``, per (query,
candidate) one dot product of ``width``: the output layer, the decoder's largest, never runs on a
candidate. ``phi(h)`` is computed once per distinct database code, kept while it fits in
:data:`CACHE_BYTES`. Kinds, smaller = nearer: ``decoder``, that distance (euclidean, angular) or
``-<x~ + mean / scale, x^~(h)>`` (inner product: ``-<x, x^>`` / scale^2 up to a per-query
constant); ``joint``, the encoder's per-bit ``-log q(h|x)`` plus ``weight * decoder / (2 rho^2)``,
rho the decoder's standard deviation in normalised units.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sgh.codes import unpack_bits, validate_codes
from sgh.compiled import compiled
from sgh.scores.asymmetric import (
    ACTIVATIONS,
    AsymmetricScore,
    chained_width,
    check_queries,
    hidden_layers,
)
from sgh.scores.asymmetric_index import AsymmetricIndex
from sgh.scores.top_k import sorted_heaps

CACHE_BYTES = 1 << 30  # phi of the distinct database codes is kept while it takes at most this
DECODE_ROWS = 8192  # codes run through the hidden layers at a time
BLOCK_VALUES = 1 << 24  # float64 values of one block of (query, candidate) products
# A shortlist holding on average >= 1 / DENSE_SHARE of the distinct codes is scored by dense
# products with every distinct code (a GEMM: far faster per product than pair by pair).
DENSE_SHARE = 8


@dataclass(frozen=True)
class DecoderNetwork:
    """An mlp decoder in normalised units, ``x^~(h) = phi(h) K + c`` (``phi``: the hidden layers
    ``kernels``, ``biases``, each followed by ``activation``; ``K``: ``output_kernel``, ``c``:
    ``output_bias``), its normaliser ``x~ = (x - mean) / scale`` and ``noise_variance`` rho^2."""

    kernels: tuple[np.ndarray, ...]
    biases: tuple[np.ndarray, ...]
    activation: str
    output_kernel: np.ndarray
    output_bias: np.ndarray
    mean: np.ndarray
    scale: float
    noise_variance: float

    @property
    def bits(self) -> int:
        return self.kernels[0].shape[0]

    def __repr__(self) -> str:  # its arrays are many: their shapes say what it is
        widths = ", ".join(str(kernel.shape[1]) for kernel in self.kernels)
        return (f"DecoderNetwork({self.bits} bits -> hidden ({widths}), {self.activation} -> "
                f"{self.dim} features)")

    @property
    def dim(self) -> int:
        return self.output_kernel.shape[1]

    def hidden(self, codes: np.ndarray) -> np.ndarray:
        """``phi(h)`` of packed codes, ``(n, width)`` float32."""
        out = np.empty((len(codes), self.output_kernel.shape[0]), np.float32)
        for start in range(0, len(codes), DECODE_ROWS):
            h = unpack_bits(codes[start : start + DECODE_ROWS], self.bits).astype(np.float32)
            out[start : start + len(h)] = hidden_layers(h, self.kernels, self.biases,
                                                        self.activation)
        return out

    def arrays(self, prefix: str = "") -> dict[str, np.ndarray]:
        arrays = {"activation": np.str_(self.activation), "output_kernel": self.output_kernel,
                  "output_bias": self.output_bias, "mean": self.mean,
                  "scale": np.float64(self.scale),
                  "noise_variance": np.float64(self.noise_variance)}
        for layer, (kernel, bias) in enumerate(zip(self.kernels, self.biases, strict=True)):
            arrays[f"kernel_{layer}"], arrays[f"bias_{layer}"] = kernel, bias
        return {prefix + key: value for key, value in arrays.items()}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], where: str,
                    prefix: str = "") -> DecoderNetwork:
        """What `arrays` wrote under ``prefix``; ValueError naming ``where`` if malformed."""
        layers = 0
        while prefix + f"kernel_{layers}" in arrays:
            layers += 1
        needed = [f"bias_{layer}" for layer in range(layers)] + [
            "activation", "output_kernel", "output_bias", "mean", "scale", "noise_variance"]
        missing = [prefix + key for key in needed if prefix + key not in arrays]
        if layers == 0 or missing:
            raise ValueError(f"{where}: an incomplete decoder network (missing "
                             f"{', '.join(missing) or prefix + 'kernel_0'})")
        activation = str(arrays[prefix + "activation"])
        if activation not in ACTIVATIONS:
            raise ValueError(f"{where}: key {prefix + 'activation'!r} is {activation!r}; "
                             f"accepted: {', '.join(ACTIVATIONS)}")
        numbers = {key: np.asarray(arrays[prefix + key]) for key in needed + [
            f"kernel_{layer}" for layer in range(layers)] if key != "activation"}
        for key, value in numbers.items():
            if value.dtype.kind not in "fiu" or not np.isfinite(value).all():
                raise ValueError(f"{where}: key {prefix + key!r} must hold finite numbers")
        scale, variance = float(numbers["scale"]), float(numbers["noise_variance"])
        single = {key: value.astype(np.float32) for key, value in numbers.items()}
        network = cls(tuple(single[f"kernel_{layer}"] for layer in range(layers)),
                      tuple(single[f"bias_{layer}"] for layer in range(layers)), activation,
                      single["output_kernel"], single["output_bias"],
                      numbers["mean"].astype(np.float64), scale, variance)
        width = chained_width(network.kernels, network.biases, network.bits, where, "decoder")
        dim = network.output_bias.shape[0] if network.output_bias.ndim == 1 else -1
        if network.output_kernel.shape != (width, dim) or network.mean.shape != (dim,) \
                or not (scale > 0 and variance > 0):
            raise ValueError(f"{where}: the decoder's output layer {network.output_kernel.shape}, "
                             f"offset {network.output_bias.shape}, mean {network.mean.shape}, "
                             f"scale {scale} and variance {variance} do not fit together")
        return network


def decoded_form(kind: str, similarity: str, weight: float) -> str:
    """How the results name an mlp decoder's rescoring score of ``kind`` (`DecodedRescorer.form`),
    said without building one (which decodes every distinct database code)."""
    decoder = "||x~ - x^~(h)||^2" if similarity != "inner_product" else "-<x, x^(h)>"
    if kind == "decoder":
        return (f"decoder (mlp), {decoder}, each shortlisted code decoded through the last "
                "layer's split")
    return (f"joint likelihood: -log q(h|x) - {weight:g} log p(x|h) (the encoder's likelihood "
            f"plus {weight:g} x the mlp decoder's {decoder} / (2 rho^2)), each shortlisted code "
            "decoded")


class DecodedRescorer:
    """``rescore(queries, candidates)`` through an mlp decoder, for `SGHIndex`'s two_stage mode
    (module doc): ``kind`` ``decoder``, or ``joint`` with the ``encoder``'s per-bit score and the
    decoder likelihood's ``weight``. Ids are rows of ``database_codes``."""

    def __init__(self, network: DecoderNetwork, database_codes: np.ndarray, similarity: str,
                 kind: str = "decoder", encoder: AsymmetricScore | None = None,
                 weight: float = 1.0) -> None:
        if kind not in ("decoder", "joint") or (kind == "joint") != (encoder is not None):
            raise ValueError(f"kind={kind!r}: accepted: decoder, or joint with an encoder score")
        self.network, self.similarity, self.kind = network, similarity, kind
        self.encoder, self.weight, self.bits = encoder, float(weight), network.bits
        self.database_codes = validate_codes(database_codes, self.bits, "database codes")
        self._encoder_index = (None if encoder is None
                               else AsymmetricIndex(encoder, self.database_codes))
        self._distinct, code_of_item = np.unique(self.database_codes, axis=0, return_inverse=True)
        self._code_of_item = code_of_item.reshape(-1)
        hidden = network.hidden(self._distinct)
        # ||x^~(h)||^2 of each distinct code, in float64 (a sum of dim squares).
        decoded = hidden @ network.output_kernel + network.output_bias
        self._code_norms = np.einsum("ij,ij->i", decoded, decoded, dtype=np.float64)
        self._hidden = hidden if hidden.nbytes <= CACHE_BYTES else None
        self.form = decoded_form(kind, similarity, self.weight)

    def __repr__(self) -> str:
        return (f"DecodedRescorer({self.kind}, {self.bits} bits, {len(self.database_codes)} "
                f"codes, {self.network!r})")

    def _dense_dots(self, projected: np.ndarray, codes: np.ndarray,
                    valid: np.ndarray) -> np.ndarray:
        """``<x~ K^T, phi(h)>`` of each (query, candidate), from dense products with every
        distinct code (long shortlists: most codes are someone's)."""
        n_codes = len(self._distinct)
        dots = np.zeros(codes.shape)
        step = max(1, BLOCK_VALUES // max(1, n_codes))
        for q0 in range(0, len(codes), step):
            q1 = min(q0 + step, len(codes))
            products = np.empty((q1 - q0, n_codes))
            for c0 in range(0, n_codes, DECODE_ROWS):
                chunk = (self._hidden[c0 : c0 + DECODE_ROWS] if self._hidden is not None else
                         self.network.hidden(self._distinct[c0 : c0 + DECODE_ROWS]))
                products[:, c0 : c0 + len(chunk)] = projected[q0:q1] @ chunk.T.astype(np.float64)
            dots[q0:q1] = np.take_along_axis(products, codes[q0:q1], axis=1)
        dots[~valid] = 0.0
        return dots

    def _gathered_dots(self, projected: np.ndarray, codes: np.ndarray,
                       valid: np.ndarray) -> np.ndarray:
        """The same, one dot product per (query, candidate): short shortlists."""
        if self._hidden is not None:
            return _pair_dots(projected, self._hidden, codes, valid)
        dots = np.zeros(codes.shape)
        step = max(1, BLOCK_VALUES // max(1, codes.shape[1] * projected.shape[1]))
        for q0 in range(0, len(codes), step):
            block, kept = codes[q0 : q0 + step], valid[q0 : q0 + step]
            distinct, inverse = np.unique(np.where(kept, block, block[kept].min(initial=0)),
                                          return_inverse=True)
            hidden = self.network.hidden(self._distinct[distinct])
            dots[q0 : q0 + step] = _pair_dots(projected[q0 : q0 + step], hidden,
                                              inverse.reshape(block.shape), kept)
        return dots

    def scores(self, queries: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        """``(nq, S)`` float64 scores of each query's candidate ids (``-1``: ``inf``)."""
        network = self.network
        queries = check_queries(queries, network.dim)
        normalised = (np.asarray(queries, np.float64) - network.mean) / network.scale
        candidates = np.asarray(candidates, np.int64)
        if candidates.shape[0] != len(queries):
            raise ValueError(f"candidates must have one row per query ({len(queries)}), got "
                             f"{candidates.shape}")
        if self.similarity == "inner_product":
            # -<x, x^> = -scale^2 <x~ + mean/scale, x^~> - <x, mean>: per query a constant.
            normalised = normalised + network.mean / network.scale
        # float32 products, as the decoder's own (nq x dim x width: a query's largest cost).
        projected = (normalised.astype(np.float32) @ network.output_kernel.T).astype(np.float64)
        offsets = normalised @ network.output_bias.astype(np.float64)
        lengths = np.einsum("ij,ij->i", normalised, normalised)
        valid = candidates >= 0
        if not valid.any():  # padding only (an empty database has no row 0 to stand in for it)
            return np.full(candidates.shape, np.inf)
        codes = self._code_of_item[np.where(valid, candidates, 0)]
        dense = valid.sum() * DENSE_SHARE >= len(candidates) * len(self._distinct)
        dots = self._dense_dots if dense else self._gathered_dots
        inner = dots(projected, codes, valid) + offsets[:, None]
        if self.similarity == "inner_product":
            D = -inner
        else:
            D = lengths[:, None] - 2.0 * inner + self._code_norms[codes]
        D[~valid] = np.inf
        if self.kind == "joint":
            encoder_scores = self._encoder_index.candidate_scores(queries, candidates)
            D = np.asarray(encoder_scores, np.float64) + self.weight / (
                2.0 * network.noise_variance) * D
        return D

    def rescore(self, queries: np.ndarray, candidates: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        """`scores`, sorted: ``(D, I)`` by (score, id), ``-1`` padding last with ``D = inf``."""
        D = self.scores(queries, candidates)
        return sorted_heaps(D, np.where(np.asarray(candidates) >= 0, candidates, -1))


@compiled
def _pair_dots(projected, hidden, rows, valid):
    """``out[q, s] = <projected[q], hidden[rows[q, s]]>`` (float64 sums of float32 rows) where
    ``valid``, else 0, reading the rows in place."""
    n_queries, n_candidates = rows.shape
    width = projected.shape[1]
    whole = width - width % 4
    out = np.zeros((n_queries, n_candidates))
    for q in range(n_queries):
        for s in range(n_candidates):
            if valid[q, s]:
                row = rows[q, s]
                # Four independent sums in a fixed order keep the multipliers busy.
                t0 = t1 = t2 = t3 = 0.0
                for w in range(0, whole, 4):
                    t0 += projected[q, w] * hidden[row, w]
                    t1 += projected[q, w + 1] * hidden[row, w + 1]
                    t2 += projected[q, w + 2] * hidden[row, w + 2]
                    t3 += projected[q, w + 3] * hidden[row, w + 3]
                for w in range(whole, width):
                    t0 += projected[q, w] * hidden[row, w]
                out[q, s] = (t0 + t1) + (t2 + t3)
    return out
