"""What the baselines share beyond the hasher interface (`sgh.hasher.BinaryHasher`): PCA.

Numerics: all arithmetic is float64; the data are converted one block of rows at a time
(:func:`sgh.hasher.row_blocks`, ~32 MB of float64 per block), so a float32 database is never
copied whole. The bits of a row depend on that row only (up to BLAS rounding of values within
~1e-15 of a threshold).
"""

from __future__ import annotations

import numpy as np

from sgh.hasher import row_blocks


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
