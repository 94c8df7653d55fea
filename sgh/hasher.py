"""The interface every hasher shares: `fit(X)`, `transform(X)` -> bits, `encode(X)` -> codes.

The baselines (`sgh.baselines`) and `sgh.SGHHasher` are scikit-learn transformers built on
`BinaryHasher`: ``codes = hasher.fit(x_train).encode(x_base)``. Inputs are float64 or float32
(other dtypes are converted to float64) and must be finite.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from sgh.codes import pack_bits
from sgh.errors import check_int
from sgh.scores.asymmetric import AsymmetricScore

BLOCK_BYTES = 1 << 25


def row_blocks(X: np.ndarray, block_bytes: int = BLOCK_BYTES) -> Iterator[tuple[slice, np.ndarray]]:
    """Yield ``(rows, X[rows] as float64)`` for consecutive blocks of about ``block_bytes``
    (views of a float64 ``X``: callers must not modify them)."""
    rows_per_block = max(1, block_bytes // (8 * max(X.shape[1], 1)))
    for start in range(0, X.shape[0], rows_per_block):
        rows = slice(start, min(start + rows_per_block, X.shape[0]))
        yield rows, np.asarray(X[rows], dtype=np.float64)


class BinaryHasher(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """The interface of every hasher: validation around ``_fit(X, n_bits)`` (X validated, at
    least 2 rows; sets the learned ``*_`` attributes) and ``_encode(block)`` (float64 rows ->
    ``(rows, n_bits)`` bool), or ``transform`` itself (``SGHHasher``)."""

    # One bit per principal direction (PCAH, ITQ): n_bits <= the number of features.
    bits_at_most_features = False
    # Why the hasher has no asymmetric score (SH, SpH), or None (it overrides `asymmetric_score`).
    without_asymmetric: str | None = ("its bits are not signs of linear projections, so no "
                                      "per-bit score exists")

    def __init__(self, n_bits: int = 32, random_state=None):
        self.n_bits = n_bits
        self.random_state = random_state

    def fit(self, X, y=None):
        """Learn the hash functions from ``X`` (``(n, d)``, n >= 2); ``y`` is ignored."""
        X = validate_data(self, X, dtype=[np.float64, np.float32], ensure_min_samples=2)
        n_bits = check_int("n_bits", self.n_bits, 1)
        if self.bits_at_most_features and n_bits > X.shape[1]:
            raise ValueError(f"{type(self).__name__} takes one bit per principal component, so "
                             "n_bits must be <= the number of features; got "
                             f"n_bits={n_bits} with n_features={X.shape[1]}")
        self._fit(X, n_bits)
        self.n_bits_ = n_bits
        return self

    def transform(self, X) -> np.ndarray:
        """Hash ``X`` (``(n, d)`` floats) to ``(n, n_bits)`` bool codes; column j is code bit j."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        bits = np.empty((X.shape[0], self.n_bits_), dtype=bool)
        for rows, block in row_blocks(X):
            bits[rows] = self._encode(block)
        return bits

    def asymmetric_score(self) -> AsymmetricScore:
        """The query-against-code score of asymmetric and rescored search; ValueError saying
        why for a hasher without one."""
        raise ValueError(f"{type(self).__name__} has no asymmetric score: "
                         f"{self.without_asymmetric}")

    def encode(self, X) -> np.ndarray:
        """Packed codes of ``X``: ``(n, ceil(n_bits / 8))`` uint8 (`sgh.codes`)."""
        return pack_bits(self.transform(X))

    @property
    def _n_features_out(self) -> int:
        return self.n_bits_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # The output is bits (bool), whatever the input float dtype.
        tags.transformer_tags.preserves_dtype = []
        return tags

    def _fit(self, X: np.ndarray, n_bits: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _encode(self, block: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError
