"""The byte decoder: one 256-entry table per code byte, and database codes by its posterior mode.

``x^(h) = t + sum_j C_j[h_j]`` (``h_j`` the code's byte j, as `sgh.codes.pack_bits` packs it): a
Gaussian decoder holding the linear one as the case where each table sums its bits' templates.
An item's code moves from its encoder's code toward the posterior's mode as far as an index's
``encoding`` says (`sgh.scores.posterior_modes`: iterated conditional modes, ICM, each byte in
turn set to the entry that best reconstructs the item, the others fixed; then local search as
faiss's LSQ encodes). Fitting is hard EM: codes by ICM, tables by least squares; a decoder trained
inside SGH (`sgh.model.byte_tables`) is refitted the same way (`refitted`). The tables live in
the training features' top ``r`` principal directions (``C_j[v] = U c_j[v]``): a vector's part
orthogonal to ``U`` adds the same to its error against every code, so fitting, encoding and the
query tables work in ``r`` coordinates.

Search: ``||x - x^(h)||^2 = ||x||^2 + sum_j (||C'_j[h_j]||^2 - 2 <x, C'_j[h_j]>)
+ 2 sum_{a<b} <C'_a[h_a], C'_b[h_b]>`` (``C'_0`` holding ``t``): a lookup table per byte and
query (`lookup_tables`) and a per-item term from tables of byte pairs (`pair_tables`), the form
`AsymmetricIndex` scans.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

import numpy as np

from sgh.codes import stored_bits, validate_codes
from sgh.data.feature_statistics import principal_directions
from sgh.scores.fixed_order import dots, product
from sgh.scores.lookup_kernels import pair_terms
from sgh.scores.posterior_modes import (
    Encoding,
    encoded,
    posterior_modes,
    reconstruct,
    squared_entries,
    valid_values,
)

FIT_ITERATIONS = 10  # hard-EM rounds of `ByteDecoder.fit`
REFIT_ITERATIONS = 5  # hard-EM rounds of `ByteDecoder.refitted`
# Training rows fitted on at most (a random sample beyond): many times the tables' 256 x bytes.
FIT_ROWS = 100_000
# The tables' subspace: principal directions per bit (module doc). 2 against 4 on the validation
# splits of MNIST, CIFAR-10 GIST and SIFT10K: recall within 0.003 or higher, half the products.
SUBSPACE_DIMS_PER_BIT = 2
# Ridge on the least-squares fit, relative to the mean count per table entry: keeps entries no
# item uses at zero (the last byte's values with padding bits set) and the system definite.
_RIDGE = 1e-3


@dataclass(frozen=True)
class ByteDecoder:
    """The decoder ``x^(h) = offset + basis @ sum_j tables[j, h_j]`` (module doc), float32:
    ``offset`` ``t`` ``(dim,)``; ``tables`` ``(ceil(bits / 8), 256, r)`` in the coordinates of
    ``basis`` ``U`` ``(dim, r)``, orthonormal columns (None: the features' own, ``r = dim``)."""

    bits: int
    offset: np.ndarray
    tables: np.ndarray
    basis: np.ndarray | None = None

    @property
    def dim(self) -> int:
        return self.offset.shape[0]

    @property
    def fingerprint(self) -> str:
        """sha256 (16 hex digits) of the tables: codes are this decoder's posterior modes."""
        digest = hashlib.sha256()
        for array in (np.int64(self.bits), self.offset, self.tables,
                      *(() if self.basis is None else (self.basis,))):
            digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()[:16]

    def __repr__(self) -> str:
        return (f"ByteDecoder({self.bits} bits, {self.dim} features, {len(self.tables)} tables "
                f"of 256 in {self.tables.shape[2]} dimensions, decoder {self.fingerprint})")

    @classmethod
    def fit(cls, features: np.ndarray, start_codes: np.ndarray, bits: int,
            iterations: int = FIT_ITERATIONS, seed: int = 0) -> ByteDecoder:
        """Hard EM on ``features`` (`FIT_ROWS` at most) from the encoder's ``start_codes``."""
        start_codes = validate_codes(start_codes, bits, "start_codes")
        if len(start_codes) != len(features):
            raise ValueError(f"start_codes has {len(start_codes)} rows for {len(features)} "
                             "features")
        features, start_codes = _fitting_rows(features, start_codes, seed)
        x = np.asarray(features, np.float32)
        offset = x.mean(axis=0, dtype=np.float64).astype(np.float32)
        basis = principal_directions(x, offset, SUBSPACE_DIMS_PER_BIT * bits)
        centred = _coordinates(x, offset, basis)
        codes = start_codes.copy()
        valid = valid_values(bits)
        tables = _least_squares(centred, codes, valid)
        for _ in range(iterations):
            codes = posterior_modes(centred, codes, tables, valid, sweeps=1)
            tables = _least_squares(centred, codes, valid)
        return cls(bits, offset, tables, basis)

    def refitted(self, features: np.ndarray, start_codes: np.ndarray,
                 iterations: int = REFIT_ITERATIONS, seed: int = 0) -> ByteDecoder:
        """These tables refitted to the codes one ICM sweep makes of ``start_codes`` (hard EM
        that restarts from them each round): the least-squares tables of a trained decoder for
        the codes an index stores of its encoder's (`FIT_ROWS` of ``features`` at most)."""
        start_codes = validate_codes(start_codes, self.bits, "start_codes")
        features, start_codes = _fitting_rows(features, start_codes, seed)
        centred = _coordinates(features, self.offset, self.basis)
        valid, tables = valid_values(self.bits), self.tables
        for _ in range(iterations):
            tables = _least_squares(centred, posterior_modes(centred, start_codes, tables, valid,
                                                              sweeps=1), valid)
        return ByteDecoder(self.bits, self.offset, tables, self.basis)

    def encode(self, features: np.ndarray, start_codes: np.ndarray,
               encoding: str = "local_search", certainty: np.ndarray | None = None
               ) -> np.ndarray:
        """Each item's code by ``encoding`` (`sgh.scores.posterior_modes`) from its encoder code
        ``start_codes`` (``certainty``: the encoder's bit weight magnitudes ``(n, bits)``, for
        ``flip<T>``): the same in any batches."""
        start_codes = validate_codes(start_codes, self.bits, "start_codes")
        return encoded(_coordinates(features, self.offset, self.basis), start_codes,
                       self.tables, valid_values(self.bits), Encoding.named(encoding), certainty)

    def conditional_modes(self, features: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """``(n, bytes)`` bool: whether each byte of ``codes`` is the one that reconstructs its
        item best with the code's other bytes as they are (the posterior's mode given them)."""
        codes = validate_codes(codes, self.bits, "codes")
        centred = _coordinates(features, self.offset, self.basis)
        residual = centred - reconstruct(codes, self.tables)
        squared = squared_entries(self.tables, valid_values(self.bits))
        modes = np.empty(codes.shape, bool)
        for j, table in enumerate(self.tables):
            others = residual + table[codes[:, j]]
            modes[:, j] = np.argmin(squared[j] - 2.0 * (others @ table.T), axis=1) == codes[:, j]
        return modes

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """``(n, dim)`` float32 reconstructions ``x^(h)`` of packed codes."""
        codes = validate_codes(codes, self.bits, "codes")
        return self.offset + self._in_features(reconstruct(codes, self.tables))

    def lookup_tables(self, queries: np.ndarray) -> np.ndarray:
        """``(nq, bytes, 256)`` float32: ``||C'_j[v]||^2 - 2 <x, C'_j[v]>`` (module doc), taken in
        the tables' subspace (``<x, U c> = <U^T x, c>``) by float32 products in a fixed order
        (`sgh.scores.fixed_order`): a query's tables are the same alone or in any batch."""
        queries = np.ascontiguousarray(queries, np.float32)
        within = queries if self.basis is None else product(queries, self._basis32)
        tables = product(within, self._minus_twice_tables_t, self._books_squared32)
        offset_share = np.empty(len(queries))  # <x, t>, on the first byte's entries
        dots(queries, self._offset64, offset_share)
        tables[:, :256] += (-2.0 * offset_share).astype(np.float32)[:, None]
        return tables.reshape(len(tables), len(self.tables), 256)

    def item_terms(self, codes: np.ndarray) -> np.ndarray:
        """``(n,)`` float32: the scan's per-item term, ``2 sum_{a<b} <C'_a[h_a], C'_b[h_b]>``
        (the part of ``||x^(h)||^2`` no single byte holds), summed as the scans sum it."""
        codes = np.ascontiguousarray(validate_codes(codes, self.bits, "codes"))
        terms = np.empty(len(codes), np.float32)
        pair_terms(self.pair_tables, codes, 0, len(codes), terms)
        return terms

    @functools.cached_property
    def pair_tables(self) -> np.ndarray:
        """``(pairs, 65536)`` float32: for each byte pair ``a < b`` in `pair_terms`' order,
        ``2 <C'_a[u], C'_b[v]>`` at ``256 u + v`` (256 KB per pair), built once."""
        books = self.books.astype(np.float64)
        pairs = [2.0 * books[a] @ books[b].T for a in range(len(books))
                 for b in range(a + 1, len(books))]
        return np.ascontiguousarray(np.reshape(pairs, (len(pairs), 256 * 256)), np.float32)

    @functools.cached_property
    def _books_squared(self) -> np.ndarray:
        """``(bytes * 256,)`` float64 ``||C'_j[v]||^2``: the per-byte part of the norm."""
        books = self.books.astype(np.float64)
        return np.einsum("jvd,jvd->jv", books, books).ravel()

    def squared_norms(self, codes: np.ndarray) -> np.ndarray:
        """``(n,)`` float32 ``||x^(h)||^2`` of packed codes."""
        codes = validate_codes(codes, self.bits, "codes")
        per_byte = self._books_squared.reshape(-1, 256)
        return self.item_terms(codes) + sum(per_byte[j][codes[:, j]] for j in range(len(per_byte))
                                            ).astype(np.float32)

    def _in_features(self, coordinates: np.ndarray) -> np.ndarray:
        return coordinates if self.basis is None else coordinates @ self.basis.T

    @functools.cached_property
    def books(self) -> np.ndarray:
        """The tables in the features' coordinates, the offset in the first: ``C'`` (module
        doc); computed once (the pair tables, the norms and faiss's codebooks read it)."""
        books = self._in_features(self.tables).astype(np.float32)
        books[0] += self.offset
        return books

    @functools.cached_property
    def _minus_twice_tables_t(self) -> np.ndarray:
        """``(r, bytes * 256)`` float32 ``-2 C^T`` (the doubling exact)."""
        tables_t = -2.0 * self.tables.reshape(-1, self.tables.shape[2]).T
        return np.ascontiguousarray(tables_t, np.float32)

    @functools.cached_property
    def _basis32(self) -> np.ndarray:
        return np.ascontiguousarray(self.basis, np.float32)

    @functools.cached_property
    def _books_squared32(self) -> np.ndarray:
        return self._books_squared.astype(np.float32)

    @functools.cached_property
    def _offset64(self) -> np.ndarray:
        return self.offset.astype(np.float64)

    def arrays(self, prefix: str = "") -> dict[str, np.ndarray]:
        arrays = {prefix + "bits": np.int64(self.bits), prefix + "offset": self.offset,
                  prefix + "tables": self.tables}
        if self.basis is not None:
            arrays[prefix + "basis"] = self.basis
        return arrays

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], where: str,
                    prefix: str = "") -> ByteDecoder:
        """The decoder `arrays` wrote; ValueError naming ``where`` and the key if malformed."""
        missing = [prefix + key for key in ("bits", "offset", "tables")
                   if prefix + key not in arrays]
        if missing:
            raise ValueError(f"{where}: missing key {missing[0]!r} (a byte decoder holds bits, "
                             "offset, tables)")
        bits = stored_bits(arrays, where, prefix + "bits")
        offset = np.asarray(arrays[prefix + "offset"])
        tables = np.asarray(arrays[prefix + "tables"])
        basis = arrays.get(prefix + "basis")
        dim = offset.shape[0] if offset.ndim == 1 else -1
        if basis is not None:
            basis = np.asarray(basis)
            if basis.dtype.kind != "f" or basis.ndim != 2 or basis.shape[0] != dim \
                    or not 0 < basis.shape[1] < dim:
                raise ValueError(f"{where}: key {prefix + 'basis'!r} must be float (dim, r) "
                                 f"with dim = {dim} and 0 < r < dim; got {basis.shape}")
        expected = (-(-bits // 8), 256, dim if basis is None else basis.shape[1])
        if offset.ndim != 1 or tables.shape != expected or tables.dtype.kind != "f" \
                or offset.dtype.kind != "f":
            raise ValueError(f"{where}: key {prefix + 'tables'!r} must be float {expected} and "
                             f"{prefix + 'offset'!r} float (dim,); got {tables.shape} and "
                             f"{offset.shape}")
        arrays_read = [tables, offset] + ([] if basis is None else [basis])
        if not all(np.isfinite(array).all() for array in arrays_read):
            raise ValueError(f"{where}: the byte decoder's tables hold NaN or infinite values")
        return cls(bits, offset.astype(np.float32), tables.astype(np.float32),
                   None if basis is None else basis.astype(np.float32))


def one_byte_terms(terms: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.float32]:
    """Per-item terms held in one byte, as faiss holds its norms (`norm_levels` over their
    range): ``(levels, decoded, error)``, ``decoded[levels]`` within ``error`` of the terms
    (about half a level's width), the bound the scans prune by."""
    low, high = (float(terms.min()), float(terms.max())) if len(terms) else (0.0, 0.0)
    decoded = (low + (np.arange(256) + 0.5) * (high - low) / 256).astype(np.float32)
    levels = norm_levels(terms, low, high)
    error = np.abs(decoded[levels] - terms).max() if len(terms) else np.float32(0)
    return levels, decoded, error


def norm_levels(norms: np.ndarray, low: float, high: float) -> np.ndarray:
    """faiss's 8-bit norm code (`AdditiveQuantizer::encode_qint8`), for every item at once:
    ``floor(256 (norm - low) / (high - low))`` clipped to 0 .. 255."""
    span = high - low if high > low else 1.0
    return np.clip(np.floor((norms - low) / span * 256.0), 0, 255).astype(np.uint8)


def _fitting_rows(features, codes: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows a fit uses: all, or a random `FIT_ROWS` of them (in their order)."""
    if len(features) <= FIT_ROWS:
        return features, codes
    rows = np.sort(np.random.default_rng(seed).choice(len(features), FIT_ROWS, replace=False))
    return features[rows], codes[rows]


def _coordinates(features: np.ndarray, offset: np.ndarray, basis: np.ndarray | None) -> np.ndarray:
    # Centred before the product: x U - t U would cancel where the features' mean is large.
    centred = np.asarray(features, np.float32) - offset
    return centred if basis is None else centred @ basis


def _least_squares(centred: np.ndarray, codes: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """The tables minimising ``sum ||x - sum_j C_j[h_j]||^2`` over the items (a small ridge):
    the normal equations of the one-hot design, assembled from counts."""
    from scipy.linalg import solve
    from scipy.sparse import csr_matrix

    n, n_bytes = codes.shape
    size = 256 * n_bytes
    columns = codes.astype(np.int64) + 256 * np.arange(n_bytes)
    gram = np.zeros((size, size), np.float64)
    for a in range(n_bytes):
        for b in range(a, n_bytes):
            pairs = np.bincount(codes[:, a].astype(np.int64) * 256 + codes[:, b],
                                minlength=256 * 256).reshape(256, 256)
            gram[256 * a : 256 * a + 256, 256 * b : 256 * b + 256] = pairs
            gram[256 * b : 256 * b + 256, 256 * a : 256 * a + 256] = pairs.T
    design = csr_matrix((np.ones(columns.size, np.float32),
                         (np.repeat(np.arange(n), n_bytes), columns.ravel())), shape=(n, size))
    right = np.asarray(design.T @ centred, np.float64)
    gram[np.diag_indices(size)] += _RIDGE * n / 256
    tables = solve(gram, right, assume_a="pos").reshape(n_bytes, 256, -1)
    tables[~valid] = 0.0
    return tables.astype(np.float32)
