"""Scores through an mlp decoder: a shortlist rescored by decoding its codes, in NumPy.

A linear decoder's reconstruction distance splits into per-bit lookup tables
(`sgh.search.asymmetric`); an mlp decoder's, ``x^~(h) = phi(h) K + c`` (normalised units, ``phi``
its hidden layers), does not. It still splits at the last layer:

    ||x~ - x^~(h)||^2 = ||x~ - c||^2 - 2 <(x~ - c) K^T, phi(h)> + ||x^~(h) - c||^2 ... (*)

written here as ``||x~||^2 - 2 <x~ K^T, phi(h)> - 2 <x~, c> + ||x^~(h)||^2``: per query one
projection ``x~ K^T`` (``width`` numbers), per database item one number ``||x^~(h)||^2``, and
per (query, candidate) one dot product of ``width`` — the decoder's output layer, by far its
largest (``width x dim``), is never run on a candidate. ``phi(h)`` is computed once per distinct
database code, when the codes are added, and kept (``width`` float32 per distinct code) while it
fits in :data:`CACHE_BYTES`; beyond, per block of candidates.

Kinds (`sgh.search.asymmetric.SCORE_KINDS`), smaller = nearer, in the model's normalised units
(``x~ = (x - mean) / scale``; no ranking depends on the unit):

* ``decoder``: ``||x~ - x^~(h)||^2`` (euclidean, angular), ``-<x~ + mean / scale, x^~(h)>``
  (inner product: ``-<x, x^>`` / scale^2 up to a per-query constant);
* ``joint``: the encoder's per-bit ``-log q(h|x)`` plus ``weight * decoder / (2 rho^2)``, rho the
  decoder's standard deviation in normalised units.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sgh.codes import unpack_bits, validate_codes
from sgh.compiled import compiled
from sgh.search.asymmetric import ACTIVATIONS, AsymmetricScore, check_queries
from sgh.search.asymmetric_index import AsymmetricIndex
from sgh.search.lookup_kernels import sorted_heaps

# phi of the distinct database codes is kept while it takes at most this (MNIST: 58,000
# distinct 32-bit codes x 512 units = 119 MB).
CACHE_BYTES = 1 << 30
# Codes run through the hidden layers at a time.
DECODE_ROWS = 8192
# float64 values of one block of (query, candidate) products (2**24: 128 MB).
BLOCK_VALUES = 1 << 24
# Shortlists that hold, on average, at least 1 / DENSE_SHARE of the distinct database codes are
# scored by dense products with every distinct code (a GEMM, several times the flops per second
# of gathered pairs), shorter ones pair by pair.
DENSE_SHARE = 8


@dataclass(frozen=True)
class DecoderNetwork:
    """An mlp decoder in normalised units, ``x^~(h) = phi(h) K + c``, and the normaliser.

    Attributes:
        kernels, biases: the hidden layers (the first ``(bits, width_1)``), float32.
        activation: a key of `sgh.search.asymmetric.ACTIVATIONS`, after each hidden layer.
        output_kernel: ``K``, ``(width, dim)`` float32; output_bias: ``c``, ``(dim,)``.
        mean, scale: the normaliser, ``x~ = (x - mean) / scale``.
        noise_variance: rho^2, the decoder's variance in normalised units.
    """

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
        act = ACTIVATIONS[self.activation]
        out = np.empty((len(codes), self.output_kernel.shape[0]), np.float32)
        for start in range(0, len(codes), DECODE_ROWS):
            h = unpack_bits(codes[start : start + DECODE_ROWS], self.bits).astype(np.float32)
            for kernel, bias in zip(self.kernels, self.biases, strict=True):
                h = act(h @ kernel + bias).astype(np.float32)
            out[start : start + len(h)] = h
        return out

    def reconstruct(self, codes: np.ndarray) -> np.ndarray:
        """``x^~(h)`` of packed codes in normalised units, ``(n, dim)`` float32."""
        return self.hidden(codes) @ self.output_kernel + self.output_bias

    def normalise(self, queries: np.ndarray) -> np.ndarray:
        """``x~ = (x - mean) / scale`` in float64."""
        return (np.asarray(queries, np.float64) - self.mean) / self.scale

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
        numbers = {key: np.asarray(arrays[prefix + key]) for key in needed if key != "activation"}
        numbers.update({f"kernel_{layer}": np.asarray(arrays[prefix + f"kernel_{layer}"])
                        for layer in range(layers)})
        for key, value in numbers.items():
            if value.dtype.kind not in "fiu" or not np.isfinite(value).all():
                raise ValueError(f"{where}: key {prefix + key!r} must hold finite numbers")
        scale, variance = float(numbers["scale"]), float(numbers["noise_variance"])
        network = cls(tuple(numbers[f"kernel_{layer}"].astype(np.float32)
                            for layer in range(layers)),
                      tuple(numbers[f"bias_{layer}"].astype(np.float32)
                            for layer in range(layers)),
                      activation, numbers["output_kernel"].astype(np.float32),
                      numbers["output_bias"].astype(np.float32),
                      numbers["mean"].astype(np.float64), scale, variance)
        width = network.bits
        for layer, (kernel, bias) in enumerate(zip(network.kernels, network.biases,
                                                   strict=True)):
            if kernel.ndim != 2 or kernel.shape[0] != width or bias.shape != (kernel.shape[1],):
                raise ValueError(f"{where}: decoder layer {layer} has kernel {kernel.shape} and "
                                 f"bias {bias.shape}; its input is {width} wide")
            width = kernel.shape[1]
        dim = network.output_bias.shape[0] if network.output_bias.ndim == 1 else -1
        if network.output_kernel.shape != (width, dim) or network.mean.shape != (dim,) \
                or not (scale > 0 and variance > 0):
            raise ValueError(f"{where}: the decoder's output layer {network.output_kernel.shape}, "
                             f"offset {network.output_bias.shape}, mean {network.mean.shape}, "
                             f"scale {scale} and variance {variance} do not fit together")
        return network


class DecodedRescorer:
    """``rescore(queries, candidates)`` through an mlp decoder, for `TwoStageSearch` (module doc).

    Args:
        network: the decoder.
        database_codes: ``(n, ceil(bits / 8))`` packed codes (ids = rows).
        similarity: ``euclidean``, ``angular`` or ``inner_product``.
        kind: ``decoder`` or ``joint``.
        encoder: the encoder's per-bit score (``joint`` only).
        weight: the weight of the decoder's likelihood (``joint`` only).
    """

    def __init__(self, network: DecoderNetwork, database_codes: np.ndarray, similarity: str,
                 kind: str = "decoder", encoder: AsymmetricScore | None = None,
                 weight: float = 1.0) -> None:
        if kind not in ("decoder", "joint") or (kind == "joint") != (encoder is not None):
            raise ValueError(f"kind={kind!r}: accepted: decoder, or joint with an encoder score")
        self.network, self.similarity, self.kind = network, similarity, kind
        self.encoder, self.weight, self.bits = encoder, float(weight), network.bits
        self.database_codes = validate_codes(database_codes, self.bits, "database codes")
        self._encoder_index = None
        if encoder is not None:
            self._encoder_index = AsymmetricIndex(encoder)
            self._encoder_index.add(self.database_codes)
        distinct, self._code_of_item = np.unique(self.database_codes, axis=0,
                                                 return_inverse=True)
        self._code_of_item = self._code_of_item.reshape(-1)
        self._distinct = distinct
        hidden = network.hidden(distinct)
        # ||x^~(h)||^2 of each distinct code, in float64 (a sum of dim squares).
        decoded = hidden @ network.output_kernel + network.output_bias
        self._code_norms = np.einsum("ij,ij->i", decoded, decoded, dtype=np.float64)
        self._hidden = hidden if hidden.nbytes <= CACHE_BYTES else None
        decoder = "||x~ - x^~(h)||^2" if similarity != "inner_product" else "-<x, x^(h)>"
        self.form = (f"decoder (mlp), {decoder}, each shortlisted code decoded through the last "
                     "layer's split" if kind == "decoder" else
                     f"joint likelihood: -log q(h|x) - {self.weight:g} log p(x|h) (the encoder's "
                     f"likelihood plus {self.weight:g} x the mlp decoder's {decoder} / "
                     "(2 rho^2)), each shortlisted code decoded")

    def __repr__(self) -> str:
        return (f"DecodedRescorer({self.kind}, {self.bits} bits, {len(self.database_codes)} "
                f"codes, {self.network!r})")

    def _hidden_of(self, codes: np.ndarray) -> np.ndarray:
        """phi of distinct-code ids, float64."""
        if self._hidden is not None:
            return self._hidden[codes].astype(np.float64)
        return self.network.hidden(self._distinct[codes]).astype(np.float64)

    def _dense_dots(self, projected: np.ndarray, codes: np.ndarray,
                    valid: np.ndarray) -> np.ndarray:
        """``<x~ K^T, phi(h)>`` of each (query, candidate) from the products of each block of
        queries with every distinct code (long shortlists: most codes are someone's)."""
        n_codes = len(self._distinct)
        dots = np.zeros(codes.shape)
        step = max(1, BLOCK_VALUES // max(1, n_codes))
        for q0 in range(0, len(codes), step):
            q1 = min(q0 + step, len(codes))
            products = np.empty((q1 - q0, n_codes))
            for c0 in range(0, n_codes, DECODE_ROWS):
                chunk = self._hidden_of(np.arange(c0, min(c0 + DECODE_ROWS, n_codes)))
                products[:, c0 : c0 + len(chunk)] = projected[q0:q1] @ chunk.T
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

    def scores(self, queries: np.ndarray, candidates: np.ndarray,
               encoder_scores: np.ndarray | None = None) -> np.ndarray:
        """``(nq, S)`` float64 scores of each query's candidate ids (``-1``: ``inf``).
        ``encoder_scores``: the candidates' encoder scores where the caller has them already
        (a shortlist made by the same encoder score), for the joint kind."""
        network = self.network
        queries = check_queries(queries, network.dim)
        normalised = network.normalise(queries)
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
        D = np.full(candidates.shape, np.inf)
        valid = candidates >= 0
        codes = self._code_of_item[np.where(valid, candidates, 0)]
        if valid.sum() * DENSE_SHARE >= len(candidates) * len(self._distinct):
            dots = self._dense_dots(projected, codes, valid)
        else:
            dots = self._gathered_dots(projected, codes, valid)
        inner = dots + offsets[:, None]
        if self.similarity == "inner_product":
            values = -inner
        else:
            values = lengths[:, None] - 2.0 * inner + self._code_norms[codes]
        D[valid] = values[valid]
        if self.kind == "joint":
            if encoder_scores is None:
                encoder_scores = self._encoder_index.candidate_scores(queries, candidates)
            D = np.asarray(encoder_scores, np.float64) + self.weight / (
                2.0 * network.noise_variance) * D
        return D

    def rescore(self, queries: np.ndarray, candidates: np.ndarray,
                encoder_scores: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(D, I)`` of the candidates sorted by (score, id); ``-1`` padding last, ``D = inf``
        (``encoder_scores``: as for `scores`)."""
        D = self.scores(queries, candidates, encoder_scores)
        return sorted_heaps(D, np.where(np.asarray(candidates) >= 0, candidates, -1))


@compiled
def _pair_dots(projected, hidden, rows, valid):
    """``out[q, s] = <projected[q], hidden[rows[q, s]]>`` (float64 sums of float32 rows) where
    ``valid``, else 0: no gathered copy of the rows (a shortlist's rows are read in place)."""
    n_queries, n_candidates = rows.shape
    width = projected.shape[1]
    whole = width - width % 4
    out = np.zeros((n_queries, n_candidates))
    for q in range(n_queries):
        for s in range(n_candidates):
            if valid[q, s]:
                row = rows[q, s]
                # Four independent sums (in a fixed order: the same result every time) keep
                # the multipliers busy; one running sum waits on each add.
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
