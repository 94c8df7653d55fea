"""Asymmetric scores: a real-valued query against a binary database code, one form for all methods.

Hamming ranking throws away the query's magnitudes: every bit counts 1. A method whose code has a
linear meaning keeps them. For all of ours the score of code ``h`` (0/1, ``bits``) against query
``x`` (in the input feature space) is, up to a per-query constant that no ranking depends on,

    score(x, h) = sum_k h_k * w_k(x) + ||h B||^2,      w(x) = x A + a      (smaller = nearer)

so that it splits into one term per bit (a lookup table per code byte, built once per query) and
one number per database item (``||h B||^2``, stored with the codes). The forms:

* **SGH's linear decoder** reconstructs ``x^ = h T + t`` in input units (``T`` the decoder's
  templates, ``t`` its offset). Euclidean and angular: ``||x - x^||^2 = ||x - t||^2
  - 2 <x - t, h T> + ||h T||^2``, so ``A = -2 T^T``, ``a = 2 T t``, ``B = T``. Inner product
  (MIPS, the paper's supplement): ``-<x, x^>``, so ``A = -T^T``, ``a = 0``, no ``B``.
* **ITQ, PCAH, LSH** (projection forms): the query's projection ``v = (x - mean) P`` against the
  code's signs ``b = 2h - 1``: ``-<v, b> = -2 <v, h> + sum(v)``, so ``A = -2 P``,
  ``a = 2 mean P``, no ``B`` (equivalently ``||v - b||^2``, as ``||b||^2 = bits``). ITQ's
  asymmetric distance of Gong et al. (TPAMI 2013) and of Gordo et al. (TPAMI 2014).
* SH and SpH have no such form (their bits are thresholds of non-linear functions), nor has an mlp
  decoder: `refusal` says so in one line.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sgh.codes import unpack_bits, validate_codes
from sgh.data.npz_file import read_npz_arrays
from sgh.data.similarity import SIMILARITIES
from sgh.errors import one_line

# Why a deep SGH has no asymmetric score (the refusals' wording; its shortlist can still be
# rescored by decoding it, `sgh.model.decoded_rescoring`).
ASYMMETRIC_NEEDS_LINEAR_DECODER = ("model.decoder=mlp has no per-bit form: its reconstruction "
                                   "is not a sum over the bits")
# Rows of database codes unpacked at a time for the item norms: 65,536 x 64 bits of float32 is
# 16 MB, and the product with B (bits x dim) stays a GEMM of useful size.
_NORM_ROWS = 1 << 16


@dataclass(frozen=True)
class AsymmetricScore:
    """``score(x, h) = sum_k h_k (x A + a)_k + ||h B||^2``; see the module doc for each form.

    Attributes:
        bits: code length.
        query_projection: ``A``, ``(dim, bits)`` float32.
        query_offset: ``a``, ``(bits,)`` float32.
        code_templates: ``B``, ``(bits, dim_b)`` float32, or None (no per-item term).
        form: one line saying which form this is (goes into results files).
        unit: the score is stored divided by this positive constant (1 unless the features'
            scale would overflow float32: then the power of 4 just above the largest term),
            which changes no ranking;
            ``D * unit`` is the score in input units.
    """

    bits: int
    query_projection: np.ndarray
    query_offset: np.ndarray
    code_templates: np.ndarray | None
    form: str
    unit: float = 1.0

    @property
    def dim(self) -> int:
        return self.query_projection.shape[0]

    def bit_weights(self, queries: np.ndarray) -> np.ndarray:
        """``(nq, bits)`` float32: each query's weight of every bit, ``w(x) = x A + a``."""
        queries = check_queries(queries, self.dim)
        # float64 products: the weights of near-tied items differ in late digits.
        weights = queries.astype(np.float64) @ self.query_projection.astype(np.float64)
        return (weights + self.query_offset).astype(np.float32)

    def lookup_tables(self, queries: np.ndarray) -> np.ndarray:
        """``(nq, code_bytes, 256)`` float32: table ``[q, j, v]`` = the weight sum of the bits
        set in byte value ``v`` at code byte ``j`` (first bit = most significant, as
        :func:`sgh.codes.pack_bits`); padding bits weigh 0."""
        weights = self.bit_weights(queries)
        code_bytes = -(-self.bits // 8)
        padded = np.zeros((len(weights), code_bytes * 8), np.float32)
        padded[:, : self.bits] = weights
        return padded.reshape(len(weights), code_bytes, 8) @ _BYTE_BITS

    def item_norms(self, codes: np.ndarray) -> np.ndarray:
        """``(n,)`` float32 ``||h B||^2`` of each packed code (zeros without ``B``)."""
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
        arrays = {"bits": np.int64(self.bits), "query_projection": self.query_projection,
                  "query_offset": self.query_offset, "form": np.str_(self.form),
                  "unit": np.float64(self.unit)}
        if self.code_templates is not None:
            arrays["code_templates"] = self.code_templates
        with open(path, "wb") as file:
            np.savez(file, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> AsymmetricScore:
        """Read a score written by :meth:`save`; ValueError naming the file and key if invalid."""
        path = Path(path)
        try:
            arrays = read_npz_arrays(path)
        except ValueError as error:  # damaged bytes, pickles, a .npy
            raise ValueError(f"{path}: not a readable asymmetric-score .npz "
                             f"({str(error).removeprefix(f'{path}: ')})") from None
        for key in ("bits", "query_projection", "query_offset", "form"):
            if key not in arrays:
                raise ValueError(f"{path}: missing key {key!r} (an asymmetric score holds bits, "
                                 "query_projection, query_offset, form[, code_templates])")
        bits = arrays["bits"]
        if bits.shape != () or bits.dtype.kind not in "iu" or bits < 1:
            raise ValueError(f"{path}: key 'bits' must be a positive integer, got "
                             f"{one_line(bits)}")
        for key in ("query_projection", "query_offset", "code_templates"):
            if key in arrays and arrays[key].dtype.kind not in "fiu":
                raise ValueError(f"{path}: key {key!r} must hold numbers, got dtype "
                                 f"{arrays[key].dtype}")
        score = make_score(int(bits), arrays["query_projection"],
                           arrays["query_offset"], arrays.get("code_templates"),
                           str(arrays["form"]), where=str(path), rescale=False)
        unit = arrays.get("unit", np.float64(1.0))
        unit = float(unit) if unit.shape == () and unit.dtype.kind in "fiu" else float("nan")
        if not (np.isfinite(unit) and unit > 0):
            raise ValueError(f"{path}: key 'unit' must be a positive number, got {one_line(unit)}")
        return AsymmetricScore(score.bits, score.query_projection, score.query_offset,
                               score.code_templates, score.form, unit)


# _BYTE_BITS[t, v] = bit t (0 = most significant) of byte value v.
_BYTE_BITS = ((np.arange(256)[None, :] >> (7 - np.arange(8)[:, None])) & 1).astype(np.float32)


# Terms beyond this (float64, before the float32 cast) are rescaled: float32 ends at 3.4e38,
# and a score's terms are products of two feature-scale numbers.
_LARGEST_PLAIN_TERM = 1e18


def make_score(bits: int, query_projection, query_offset, code_templates, form: str,
               where: str = "the asymmetric score", rescale: bool = True) -> AsymmetricScore:
    """An `AsymmetricScore` with its shapes checked (ValueError naming ``where``).

    With ``rescale``, terms too large for float32 (features of scale >~1e9) are divided first (in
    float64) by the power of 4 just above their largest magnitude, which no ranking notices
    (`AsymmetricScore.unit`).
    """
    unit = 1.0
    if rescale:
        offset64 = np.asarray(query_offset, np.float64)
        largest = float(np.abs(offset64).max(initial=0.0))
        if code_templates is not None:
            largest = max(largest, float(np.square(np.asarray(code_templates, np.float64))
                                         .sum(axis=1).max(initial=0.0)))
        if np.isfinite(largest) and largest > _LARGEST_PLAIN_TERM:
            # A power of 4 (so that its square root, which divides B, is a power of 2): dividing
            # by it is exact, so features scaled by a power of two get the same float32 score,
            # bit for bit, and the same ranking.
            _, exponent = math.frexp(largest)
            unit = math.ldexp(1.0, exponent + exponent % 2)
            query_projection = np.asarray(query_projection, np.float64) / unit
            query_offset = offset64 / unit
            if code_templates is not None:
                code_templates = np.asarray(code_templates, np.float64) / np.sqrt(unit)
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
    for name, array in (("query_projection", query_projection), ("query_offset", query_offset),
                        ("code_templates", code_templates)):
        if array is not None and not np.isfinite(array).all():
            raise ValueError(f"{where}: {name} holds NaN or infinite values")
    return AsymmetricScore(bits, query_projection, query_offset, code_templates, form, unit)


def decoder_score(templates: np.ndarray, offset: np.ndarray, similarity: str) -> AsymmetricScore:
    """The linear decoder ``x^ = h T + t`` (input units) scored against queries.

    Args:
        templates: ``T``, ``(bits, dim)``: what each bit adds to the reconstruction.
        offset: ``t``, ``(dim,)``: the reconstruction of the all-zero code.
        similarity: ``euclidean`` or ``angular`` (``||x - x^||^2``) or ``inner_product``
            (``-<x, x^>``).
    """
    if similarity not in SIMILARITIES:
        raise ValueError(f"similarity={similarity!r} is not known; accepted: "
                         f"{', '.join(SIMILARITIES)}")
    templates = np.asarray(templates, np.float64)
    offset = np.asarray(offset, np.float64)
    bits = templates.shape[0]
    if similarity == "inner_product":
        return make_score(bits, -templates.T, np.zeros(bits), None,
                          "decoder, inner product: -<x, hT + t> (T, t: the decoder's templates "
                          "and offset in input units), ranked ascending")
    return make_score(bits, -2.0 * templates.T, 2.0 * templates @ offset, templates,
                      "decoder, reconstruction distance: ||x - (hT + t)||^2 (T, t: the "
                      "decoder's templates and offset in input units), ranked ascending")


def projection_score(mean: np.ndarray, projection: np.ndarray, method: str) -> AsymmetricScore:
    """A projection hasher (bits = ``(x - mean) P >= 0``) scored against queries:
    ``-<(x - mean) P, 2h - 1>``."""
    mean = np.asarray(mean, np.float64)
    projection = np.asarray(projection, np.float64)
    return make_score(projection.shape[1], -2.0 * projection, 2.0 * mean @ projection, None,
                      f"{method} projection: -<(x - mean) P, 2h - 1> (the query's projection "
                      "against the code's signs), ranked ascending")


def check_queries(queries: np.ndarray, dim: int, name: str = "queries") -> np.ndarray:
    """Real ``(nq, dim)`` features without NaN/Inf, else ValueError naming ``name``."""
    queries = np.asarray(queries)
    if queries.ndim != 2 or queries.shape[1] != dim or queries.dtype.kind not in "fiu":
        raise ValueError(f"{name} must be real features of shape (n, {dim}), got dtype "
                         f"{queries.dtype} and shape {queries.shape}")
    if queries.dtype.kind == "f" and not np.isfinite(queries).all():
        raise ValueError(f"{name} hold NaN or infinite values")
    return queries
