"""Asymmetric scores: a real-valued query against a binary database code, one form for all methods.

A per-bit score keeps the query's magnitudes, which Hamming ranking throws away. For each method
that has one, the score of code ``h`` (0/1) against query ``x`` (input features) is, up to a
per-query constant that no ranking depends on,

    score(x, h) = sum_k h_k * w_k(x) + ||h B||^2,   w(x) = x A + a [+ phi(x) C]   (smaller: nearer)

one lookup table per code byte and query, and one number per database item (``||h B||^2``).
``phi`` is an mlp encoder's hidden layers (`QueryNetwork`): only the code must enter linearly. SH
and SpH have no such form (their bits are thresholds of non-linear functions of the data), nor has
an mlp decoder (it rescores a shortlist by decoding it, `sgh.scores.decoded`).

* **encoder**: ``-log q(h|x) = -<z(x), h> + sum_k log(1 + e^z_k)`` for the encoder's logits
  ``z(x)``: ``w(x) = -z(x)``, no ``B``. A projection hasher (ITQ, PCAH, LSH: bits =
  ``(x - mean) P >= 0``) takes ``v = (x - mean) P`` as its logits, against the code's signs:
  ``-<v, 2h - 1>``, ITQ's asymmetric distance (Gong et al., TPAMI 2013; Gordo et al., TPAMI 2014).
* **decoder**: SGH's linear decoder ``x^ = h T + t`` (input units). Euclidean and angular:
  ``||x - x^||^2 = ||x - t||^2 - 2 <x - t, h T> + ||h T||^2``, so ``A = -2 T^T``, ``a = 2 T t``,
  ``B = T``. Inner product (MIPS): ``-<x, x^>``, so ``A = -T^T``, ``a = 0``, no ``B``.
* **joint**: ``-log q(h|x) - lambda log p(x|h)`` = ``encoder + lambda decoder / (2 sigma^2)``,
  ``sigma`` the decoder's standard deviation in input units (`joint_score`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from dataclasses import dataclass

import numpy as np

from sgh.codes import stored_bits, unpack_bits, validate_codes
from sgh.config import SCORE_KINDS
from sgh.data.similarity import SIMILARITIES
from sgh.errors import check_choice, one_line

FLOAT32_MAX = float(np.finfo(np.float32).max)

# Why a deep SGH's decoder has no per-bit score (the refusals' wording).
ASYMMETRIC_NEEDS_LINEAR_DECODER = ("model.decoder=mlp has no per-bit form: its reconstruction "
                                   "is not a sum over the bits")
_NORM_ROWS = 1 << 16  # database codes unpacked at a time for the item norms
_HIDDEN_ROWS = 4096  # queries whose hidden layers are evaluated at a time


def _gelu(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))  # TensorFlow's exact (erf) form


def _sigmoid(x: np.ndarray) -> np.ndarray:
    from scipy.special import expit

    return expit(x)


# An mlp encoder's activations in NumPy (a test holds them equal to the model's TensorFlow ones,
# `sgh.model.sgh_model.ACTIVATIONS`).
ACTIVATIONS = {"relu": lambda x: np.maximum(x, 0.0), "tanh": np.tanh, "gelu": _gelu,
               "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))),
               "sigmoid": _sigmoid}


def hidden_layers(x: np.ndarray, kernels, biases, activation: str) -> np.ndarray:
    """float32 ``x`` through dense layers, each followed by ``activation``."""
    act = ACTIVATIONS[activation]
    for kernel, bias in zip(kernels, biases, strict=True):
        x = act(x @ kernel + bias).astype(np.float32, copy=False)
    return x


def chained_width(kernels, biases, width: int, where: str, what: str) -> int:
    """The output width of dense layers taking ``width`` inputs; ValueError if they don't chain."""
    for layer, (kernel, bias) in enumerate(zip(kernels, biases, strict=True)):
        if kernel.ndim != 2 or kernel.shape[0] != width or bias.shape != (kernel.shape[1],):
            raise ValueError(f"{where}: {what} layer {layer} has kernel {kernel.shape} and "
                             f"bias {bias.shape}; its input is {width} wide")
        width = kernel.shape[1]
    return width


@dataclass(frozen=True)
class QueryNetwork:
    """The non-linear part of the bit weights, ``phi(x) C``: an mlp encoder's dense hidden layers
    ``phi`` (``kernels``, ``biases``, each followed by ``activation``, a key of `ACTIVATIONS`; the
    feature normaliser folded into the first), and ``projection`` ``C``, ``(width, bits)``."""

    kernels: tuple[np.ndarray, ...]
    biases: tuple[np.ndarray, ...]
    activation: str
    projection: np.ndarray

    def weights(self, queries: np.ndarray) -> np.ndarray:
        """``(nq, bits)`` ``phi(x) C`` in float32 products, as the encoder computes its logits."""
        out = np.empty((len(queries), self.projection.shape[1]), np.float32)
        for start in range(0, len(queries), _HIDDEN_ROWS):
            hidden = hidden_layers(queries[start : start + _HIDDEN_ROWS].astype(np.float32),
                                   self.kernels, self.biases, self.activation)
            out[start : start + len(hidden)] = hidden @ self.projection
        return out

    def __repr__(self) -> str:  # its arrays are many: their shapes say what it is
        widths = ", ".join(str(kernel.shape[1]) for kernel in self.kernels)
        return (f"QueryNetwork({self.kernels[0].shape[0]} features -> hidden ({widths}), "
                f"{self.activation} -> {self.projection.shape[1]} bits)")


@dataclass(frozen=True)
class AsymmetricScore:
    """``score(x, h) = sum_k h_k w_k(x) + ||h B||^2``, ``w(x) = x A + a [+ phi(x) C]`` (module
    doc): ``query_projection`` ``A`` ``(dim, bits)``, ``query_offset`` ``a``, ``code_templates``
    ``B`` ``(bits, dim_b)`` or None, float32; ``form``: which form this is, in one line. The score
    is stored divided by ``unit`` (1 unless the features' scale would overflow float32), which
    changes no ranking: ``D * unit`` is the score in input units."""

    bits: int
    query_projection: np.ndarray
    query_offset: np.ndarray
    code_templates: np.ndarray | None
    form: str
    unit: float = 1.0
    kind: str = "decoder"
    network: QueryNetwork | None = None

    @property
    def dim(self) -> int:
        return self.query_projection.shape[0]

    def __repr__(self) -> str:
        network = "" if self.network is None else f", mlp of {len(self.network.kernels)} " \
                                                    "hidden layers"
        return (f"AsymmetricScore({self.kind}, {self.bits} bits, {self.dim} features"
                f"{network}: {self.form})")

    def bit_weights(self, queries: np.ndarray) -> np.ndarray:
        """``(nq, bits)`` float32: each query's weight of every bit, ``w(x)``."""
        queries = check_queries(queries, self.dim)
        # float64 products: the weights of near-tied items differ in late digits.
        weights = queries.astype(np.float64) @ self.query_projection.astype(np.float64)
        if self.network is not None:
            weights += self.network.weights(queries)
        weights += self.query_offset
        # Every table entry and score sums some of a row's weights: bounded by all of them.
        reach = np.abs(weights).sum(axis=1)
        if not (reach <= FLOAT32_MAX).all():  # NaN: not <=
            row = int(np.argmax(~(reach <= FLOAT32_MAX)))
            raise ValueError(f"row {row} of the features: its scores overflow float32 (its bit "
                             f"weights sum to {reach[row]:.3g} in magnitude): features far "
                             "beyond the scale the model was trained on; scale them as its "
                             "training features were")
        return weights.astype(np.float32)

    def code_weights(self, queries: np.ndarray) -> np.ndarray:
        """`bit_weights` for coding features already checked (`check_queries`): products in
        float32, computed again in float64 (`bit_weights`) only for the rows where float32's
        rounding could flip a weight's sign, so the codes ``weights <= 0`` are `bit_weights'`."""
        if self.network is not None:
            return self.bit_weights(queries)
        queries = np.asarray(queries, np.float32)
        with np.errstate(over="ignore", invalid="ignore"):  # inf, NaN: recomputed, refused
            weights, near = self._float32_weights(queries)
        if len(near):
            weights[near] = self.bit_weights(queries[near])
        return weights

    def _float32_weights(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``x A + a`` in float32, and the rows whose signs float32's rounding could flip."""
        weights = queries @ self.query_projection
        weights += self.query_offset
        # A float32 dot product of d terms errs by at most d 2^-24 sum_i |x_i a_i|, and the
        # offset's sum by 2^-24 of it; the bounds allow twice that, and the smallest normal float
        # for results near zero. First sum_i |x_i a_i| <= ||x|| ||a|| (Cauchy-Schwarz: cheap,
        # about a tenth of MNIST's rows pass it), then for those rows the sum itself.
        rounding, tiny = (self.dim + 2) * 2.0**-23, np.finfo(np.float32).tiny
        lengths = np.sqrt(np.einsum("ij,ij->i", queries, queries))
        near = np.flatnonzero(~(np.abs(weights) > rounding * (
            lengths[:, None] * self._projection_norms + np.abs(self.query_offset)) + tiny)
            .all(axis=1))  # NaN, inf: near
        if len(near):
            bound = rounding * (np.abs(queries[near]) @ np.abs(self.query_projection)
                                + np.abs(self.query_offset)) + tiny
            near = near[~(np.abs(weights[near]) > bound).all(axis=1)]
        return weights, near

    @functools.cached_property
    def _projection_norms(self) -> np.ndarray:
        return np.linalg.norm(self.query_projection.astype(np.float64), axis=0)

    def lookup_tables(self, queries: np.ndarray) -> np.ndarray:
        """``(nq, code_bytes, 256)`` float32: table ``[q, j, v]`` = the weight sum of the bits
        set in byte value ``v`` at code byte ``j`` (first bit = most significant, as
        :func:`sgh.codes.pack_bits`); padding bits weigh 0."""
        return self.tables_of(self.bit_weights(queries))

    def tables_of(self, weights: np.ndarray) -> np.ndarray:
        """`lookup_tables` of bit weights already computed (`bit_weights`)."""
        code_bytes = -(-self.bits // 8)
        padded = np.zeros((len(weights), code_bytes * 8), np.float32)
        padded[:, : self.bits] = weights
        return padded.reshape(len(weights), code_bytes, 8) @ _BYTE_BITS

    def item_terms(self, codes: np.ndarray) -> np.ndarray:
        """``(n,)`` float32: the scan's per-item term, ``||h B||^2`` of each packed code (zeros
        without ``B``)."""
        codes = validate_codes(codes, self.bits, "codes")
        norms = np.zeros(len(codes), np.float32)
        if self.code_templates is None:
            return norms
        for start in range(0, len(codes), _NORM_ROWS):
            bits = unpack_bits(codes[start : start + _NORM_ROWS], self.bits).astype(np.float32)
            decoded = bits @ self.code_templates
            norms[start : start + len(bits)] = np.einsum("ij,ij->i", decoded, decoded)
        return norms

    def save(self, path: str | os.PathLike) -> None:
        """Write the score as an ``.npz`` of plain arrays (no pickles)."""
        with open(path, "wb") as file:
            np.savez(file, **self.arrays())

    def arrays(self, prefix: str = "") -> dict[str, np.ndarray]:
        """The score as named plain arrays (keys behind ``prefix``), as `save` writes them."""
        arrays = {"bits": np.int64(self.bits), "query_projection": self.query_projection,
                  "query_offset": self.query_offset, "form": np.str_(self.form),
                  "unit": np.float64(self.unit), "kind": np.str_(self.kind)}
        if self.code_templates is not None:
            arrays["code_templates"] = self.code_templates
        if self.network is not None:
            arrays["network_activation"] = np.str_(self.network.activation)
            arrays["network_projection"] = self.network.projection
            for layer, (kernel, bias) in enumerate(zip(self.network.kernels,
                                                       self.network.biases, strict=True)):
                arrays[f"network_kernel_{layer}"], arrays[f"network_bias_{layer}"] = kernel, bias
        return {prefix + key: value for key, value in arrays.items()}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], where: str,
                    prefix: str = "") -> AsymmetricScore:
        """The score `arrays` wrote under ``prefix``; ValueError naming ``where`` and the key."""
        def get(key, default=None):
            return arrays.get(prefix + key, default)

        for key in ("bits", "query_projection", "query_offset", "form", "kind"):
            if get(key) is None:
                raise ValueError(f"{where}: missing key {prefix + key!r} (an asymmetric score "
                                 "holds bits, query_projection, query_offset, form, kind[, "
                                 "code_templates])")
        bits = stored_bits(arrays, where, prefix + "bits")
        numeric = ("query_projection", "query_offset", "code_templates", "network_projection")
        for key, value in arrays.items():
            name = key[len(prefix):] if key.startswith(prefix) else ""
            if (name in numeric or name.startswith(("network_kernel_", "network_bias_"))) \
                    and value.dtype.kind not in "fiu":
                raise ValueError(f"{where}: key {key!r} must hold numbers, got dtype "
                                 f"{value.dtype}")
        form, kind = str(get("form")), str(get("kind"))
        if kind not in SCORE_KINDS:
            raise ValueError(f"{where}: key {prefix + 'kind'!r} is {kind!r}; accepted: "
                             f"{', '.join(SCORE_KINDS)}")
        network = None
        if get("network_projection") is not None:
            layers = 0
            while get(f"network_kernel_{layers}") is not None:
                layers += 1
            activation = str(get("network_activation", np.str_("")))
            if activation not in ACTIVATIONS or layers == 0 or any(
                    get(f"network_bias_{layer}") is None for layer in range(layers)):
                raise ValueError(f"{where}: an incomplete query network under {prefix!r} "
                                 "(network_kernel_i, network_bias_i, network_activation one "
                                 f"of {', '.join(ACTIVATIONS)}, network_projection)")
            network = QueryNetwork(
                tuple(get(f"network_kernel_{layer}") for layer in range(layers)),
                tuple(get(f"network_bias_{layer}") for layer in range(layers)),
                activation, get("network_projection"))
        unit = get("unit", np.float64(1.0))
        unit = float(unit) if unit.shape == () and unit.dtype.kind in "fiu" else float("nan")
        if not (np.isfinite(unit) and unit > 0):
            raise ValueError(f"{where}: key {prefix + 'unit'!r} must be a positive number, got "
                             f"{one_line(unit)}")
        score = make_score(int(bits), get("query_projection"), get("query_offset"),
                           get("code_templates"), form, kind, network, where=where,
                           rescale=False)
        return dataclasses.replace(score, unit=unit)


# _BYTE_BITS[t, v] = bit t (0 = most significant) of byte value v.
_BYTE_BITS = ((np.arange(256)[None, :] >> (7 - np.arange(8)[:, None])) & 1).astype(np.float32)
# Terms beyond this (float64, before the float32 cast) are rescaled: float32 ends at 3.4e38,
# and a score's terms are products of two feature-scale numbers.
_LARGEST_PLAIN_TERM = 1e18


def make_score(bits: int, query_projection, query_offset, code_templates, form: str,
               kind: str, network: QueryNetwork | None = None,
               where: str = "the asymmetric score", rescale: bool = True) -> AsymmetricScore:
    """An `AsymmetricScore` with its shapes checked (ValueError naming ``where``); with
    ``rescale``, terms too large for float32 are divided first (`AsymmetricScore.unit`)."""
    unit = 1.0
    if rescale:
        offset64 = np.asarray(query_offset, np.float64)
        largest = float(np.abs(offset64).max(initial=0.0))
        if code_templates is not None:
            largest = max(largest, float(np.square(np.asarray(code_templates, np.float64))
                                         .sum(axis=1).max(initial=0.0)))
        if np.isfinite(largest) and largest > _LARGEST_PLAIN_TERM:
            # A power of 4 (its square root, which divides B, a power of 2): dividing by it is
            # exact, so features scaled by a power of two get the same float32 score, bit for bit.
            _, exponent = math.frexp(largest)
            unit = math.ldexp(1.0, exponent + exponent % 2)
            query_projection = np.asarray(query_projection, np.float64) / unit
            query_offset = offset64 / unit
            if code_templates is not None:
                code_templates = np.asarray(code_templates, np.float64) / np.sqrt(unit)
            if network is not None:  # its float32 cast follows, in _checked_network
                network = dataclasses.replace(network, projection=np.asarray(
                    network.projection, np.float64) / unit)
    query_projection = np.asarray(query_projection, np.float32)
    query_offset = np.asarray(query_offset, np.float32)
    if query_projection.ndim != 2 or query_projection.shape[1] != bits:
        raise ValueError(f"{where}: query_projection must be (dim, {bits}), got "
                         f"{query_projection.shape}")
    if query_offset.shape != (bits,):
        raise ValueError(f"{where}: query_offset must be ({bits},), got {query_offset.shape}")
    if code_templates is not None:
        code_templates = np.asarray(code_templates, np.float32)
        if code_templates.ndim != 2 or code_templates.shape[0] != bits:
            raise ValueError(f"{where}: code_templates must be ({bits}, dim), got "
                             f"{code_templates.shape}")
    arrays = [("query_projection", query_projection), ("query_offset", query_offset),
              ("code_templates", code_templates)]
    if network is not None:
        network = _checked_network(network, query_projection.shape[0], bits, where)
        arrays += [("network_projection", network.projection),
                   *((f"network_kernel_{i}", kernel) for i, kernel in enumerate(network.kernels)),
                   *((f"network_bias_{i}", bias) for i, bias in enumerate(network.biases))]
    for name, array in arrays:
        if array is not None and not np.isfinite(array).all():
            raise ValueError(f"{where}: {name} holds NaN or infinite values")
    return AsymmetricScore(bits, query_projection, query_offset, code_templates, form, unit,
                           kind, network)


def _checked_network(network: QueryNetwork, dim: int, bits: int, where: str) -> QueryNetwork:
    """The network as float32 arrays whose shapes chain from ``dim`` to ``bits``."""
    kernels = tuple(np.asarray(kernel, np.float32) for kernel in network.kernels)
    biases = tuple(np.asarray(bias, np.float32) for bias in network.biases)
    projection = np.asarray(network.projection, np.float32)
    width = chained_width(kernels, biases, dim, where, "network")
    if projection.shape != (width, bits):
        raise ValueError(f"{where}: network_projection must be ({width}, {bits}), got "
                         f"{projection.shape}")
    return QueryNetwork(kernels, biases, network.activation, projection)


# What a linear decoder's score measures (euclidean, angular; inner product), in its forms.
_DISTANCE, _INNER = "||x - (hT + t)||^2", "-<x, hT + t>"


def decoder_score(templates: np.ndarray, offset: np.ndarray, similarity: str) -> AsymmetricScore:
    """The linear decoder ``x^ = h T + t`` (input units; ``templates`` ``T`` ``(bits, dim)``,
    ``offset`` ``t``) scored against queries: ``||x - x^||^2`` (euclidean, angular) or
    ``-<x, x^>`` (inner_product)."""
    check_choice("similarity", similarity, SIMILARITIES)
    templates = np.asarray(templates, np.float64)
    bits = templates.shape[0]
    inner = similarity == "inner_product"
    what = f"inner product: {_INNER}" if inner else f"reconstruction distance: {_DISTANCE}"
    form = (f"decoder, {what} (T, t: the decoder's templates and offset in input units), ranked "
            "ascending")
    if inner:
        return make_score(bits, -templates.T, np.zeros(bits), None, form, "decoder")
    return make_score(bits, -2.0 * templates.T, 2.0 * templates @ np.asarray(offset, np.float64),
                      templates, form, "decoder")


def projection_score(mean: np.ndarray, projection: np.ndarray, method: str) -> AsymmetricScore:
    """A projection hasher (bits = ``(x - mean) P >= 0``) scored against queries:
    ``-<(x - mean) P, 2h - 1>`` (its encoder score: the projection is its logits)."""
    mean = np.asarray(mean, np.float64)
    projection = np.asarray(projection, np.float64)
    return make_score(projection.shape[1], -2.0 * projection, 2.0 * mean @ projection, None,
                      f"{method} projection: -<(x - mean) P, 2h - 1> (the query's projection "
                      "against the code's signs), ranked ascending", "encoder")


ENCODER_FORM = ("encoder likelihood: -log q(h|x) = -<z(x), h> + const (z: the encoder's logits "
                "of the query), ranked ascending")


def encoder_score(kernels: list[np.ndarray], biases: list[np.ndarray], activation: str,
                  mean: np.ndarray, scale: float) -> AsymmetricScore:
    """The encoder's likelihood ``-log q(h|x)`` of each code (module doc), for an encoder
    ``z(x) = f((x - mean) / scale)`` of dense layers ``kernels``/``biases`` (one layer: the
    linear encoder; more: an mlp, ``activation`` after each hidden layer)."""
    mean = np.asarray(mean, np.float64)
    kernels = [np.asarray(kernel, np.float64) for kernel in kernels]
    biases = [np.asarray(bias, np.float64) for bias in biases]
    # The normaliser folded into the first layer: ((x - m) / s) K + c = x (K / s) + (c - m K / s).
    first = kernels[0] / scale
    kernels[0], biases[0] = first, biases[0] - mean @ first
    if len(kernels) == 1:
        return make_score(first.shape[1], -kernels[0], -biases[0], None, ENCODER_FORM, "encoder")
    bits = kernels[-1].shape[1]
    network = QueryNetwork(tuple(kernels[:-1]), tuple(biases[:-1]), activation, -kernels[-1])
    return make_score(bits, np.zeros((len(mean), bits)), -biases[-1], None,
                      ENCODER_FORM + " (an mlp encoder)", "encoder", network)


def joint_score(encoder: AsymmetricScore, decoder: AsymmetricScore, weight: float,
                noise_variance: float) -> AsymmetricScore:
    """``-log q(h|x) - weight * log p(x|h)`` = ``encoder + weight * decoder / (2 sigma^2)`` up to
    constants, ``noise_variance`` = sigma^2 in input units. Both scores must be unscaled (``unit``
    1), as built; the sum is rescaled if it must be."""
    if encoder.kind != "encoder" or decoder.kind != "decoder":
        raise ValueError(f"joint_score takes an encoder and a decoder score, got {encoder.kind} "
                         f"and {decoder.kind}")
    factor = weight / (2.0 * noise_variance) * decoder.unit
    templates = None if decoder.code_templates is None else \
        np.asarray(decoder.code_templates, np.float64) * np.sqrt(factor)
    return make_score(
        encoder.bits,
        np.asarray(encoder.query_projection, np.float64) * encoder.unit
        + np.asarray(decoder.query_projection, np.float64) * factor,
        np.asarray(encoder.query_offset, np.float64) * encoder.unit
        + np.asarray(decoder.query_offset, np.float64) * factor,
        templates,
        f"joint likelihood: -log q(h|x) - {weight:g} log p(x|h) (the encoder's likelihood plus "
        f"{weight:g} x the decoder's {_INNER if decoder.code_templates is None else _DISTANCE} / "
        "(2 sigma^2), sigma^2 its variance in input units), ranked ascending",
        "joint", encoder.network)


def check_queries(queries: np.ndarray, dim: int, name: str = "queries") -> np.ndarray:
    """Real ``(nq, dim)`` features, finite as float32 (the scores' type), else ValueError
    naming ``name`` and the first value at fault."""
    queries = np.asarray(queries)
    if queries.ndim != 2 or queries.shape[1] != dim or queries.dtype.kind not in "fiu":
        raise ValueError(f"{name} must be real features of shape (n, {dim}), got dtype "
                         f"{queries.dtype} and shape {queries.shape}")
    # float32 is in range where finite; a wider float's finite value may be beyond it.
    if queries.dtype.kind == "f" and queries.size and not (
            np.isfinite(queries).all() if queries.dtype == np.float32 else
            -FLOAT32_MAX <= queries.min() and queries.max() <= FLOAT32_MAX):  # NaN: False
        row, column = np.argwhere(~(np.abs(queries) <= FLOAT32_MAX))[0]
        value = queries[row, column]
        beyond = ", beyond float32's range" if np.isfinite(value) else ""
        raise ValueError(f"{name} hold NaN or infinite values as float32 (first at row {row}, "
                         f"column {column}: {value:g}{beyond}); accepted: finite features")
    return queries
