"""What every baseline hasher shares: the estimator skeleton, input validation, PCA.

Every baseline is a scikit-learn transformer: hyperparameters are stored untouched in
``__init__`` and checked in ``fit``, ``fit(X)`` returns ``self``, learned state ends in ``_``, and
``transform(X)`` returns the codes as a ``(n, n_bits)`` bool array (column ``j`` = code bit ``j``,
ready for :func:`sgh.codes.pack_bits`).

Numerics: inputs are accepted as float64 or float32 (other dtypes are converted to float64) and
must be finite. All arithmetic is float64; the data are converted one block of rows at a time
(:func:`row_blocks`, ~32 MB of float64 per block), so a float32 database is never copied whole.
The bits of a row depend on that row only (up to BLAS rounding of values within ~1e-15 of a
threshold).
"""

from __future__ import annotations

from collections.abc import Iterator
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

# Bytes of float64 rows converted at a time by `row_blocks`.
BLOCK_BYTES = 1 << 25


def check_int(name: str, value: object, minimum: int) -> int:
    """``value`` as an int >= ``minimum``, or ValueError quoting it."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_fraction(name: str, value: object) -> float:
    """``value`` as a float in (0, 1], or ValueError quoting it."""
    if isinstance(value, bool) or not isinstance(value, Real) or not 0 < value <= 1:
        raise ValueError(f"{name} must be a number in (0, 1], got {value!r}")
    return float(value)


def check_bits_fit_features(estimator: str, n_bits: int, n_features: int) -> None:
    """Methods with one bit per principal direction need ``n_bits <= n_features``."""
    if n_bits > n_features:
        raise ValueError(
            f"{estimator} takes one bit per principal component, so n_bits must be <= the number "
            f"of features; got n_bits={n_bits} with n_features={n_features}"
        )


def row_blocks(X: np.ndarray, block_bytes: int = BLOCK_BYTES) -> Iterator[tuple[slice, np.ndarray]]:
    """Yield ``(rows, X[rows] as float64)`` for consecutive blocks of about ``block_bytes``.

    The blocks of a float64 ``X`` are views of it: callers must not modify them.
    """
    rows_per_block = max(1, block_bytes // (8 * max(X.shape[1], 1)))
    for start in range(0, X.shape[0], rows_per_block):
        rows = slice(start, min(start + rows_per_block, X.shape[0]))
        yield rows, np.asarray(X[rows], dtype=np.float64)


def principal_components(X: np.ndarray, n_components: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean and top principal directions of ``X`` (what MATLAB's ``eigs(cov(X), k)`` returns).

    Args:
        X: ``(n, d)`` float array, n >= 2.
        n_components: k <= d.

    Returns:
        ``mean``: ``(d,)`` float64; ``components``: ``(d, k)`` float64 orthonormal columns, the
        eigenvectors of the sample covariance ``(X - mean)^T (X - mean) / (n - 1)`` with the k
        largest eigenvalues, in decreasing order. Each column's sign is fixed so that its entry
        of largest magnitude is positive (eigen-solvers return either sign).

    Two passes over ``X`` in float64 blocks (mean, then covariance of the centred data), so the
    covariance does not suffer the cancellation of ``E[xx^T] - mean mean^T``.
    """
    n, d = X.shape
    mean = np.zeros(d)
    for _, block in row_blocks(X):
        mean += block.sum(axis=0)
    mean /= n
    covariance = np.zeros((d, d))
    for _, block in row_blocks(X):
        centred = block - mean  # not in place: a float64 block may be a view of X itself
        covariance += centred.T @ centred
    covariance /= n - 1
    _, vectors = np.linalg.eigh(covariance)  # ascending eigenvalues
    components = vectors[:, ::-1][:, :n_components]
    largest = np.abs(components).argmax(axis=0)
    components *= np.sign(components[largest, np.arange(n_components)])
    return mean, np.ascontiguousarray(components)


class BinaryHasher(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Base class: validation around ``_fit(X)`` and ``_encode(block) -> bool bits``.

    Subclasses define ``__init__`` (with ``n_bits`` and ``random_state``), ``_fit(X, n_bits)`` (X
    validated, float32 or float64, at least 2 rows; sets the learned ``*_`` attributes) and
    ``_encode(block)`` (float64 rows -> ``(rows, n_bits)`` bool).
    """

    def fit(self, X, y=None):
        """Learn the hash functions from the training set ``X`` (``(n, d)``, n >= 2); ``y`` is
        ignored. Returns ``self``."""
        X = validate_data(self, X, dtype=[np.float64, np.float32], ensure_min_samples=2)
        n_bits = check_int("n_bits", self.n_bits, 1)
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
