"""What the baselines share beyond the hasher interface (`sgh.hasher.BinaryHasher`): PCA, in
float64 one block of rows at a time (:func:`sgh.hasher.row_blocks`), never copying ``X`` whole."""

from __future__ import annotations

import numpy as np

from sgh.hasher import row_blocks


def principal_components(X: np.ndarray, n_components: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean ``(d,)`` and top ``n_components`` principal directions ``(d, k)`` of ``X`` (MATLAB's
    ``eigs(cov(X), k)``): orthonormal columns in decreasing order of eigenvalue, each signed so
    that its entry of largest magnitude is positive (eigen-solvers return either sign). Two passes
    (mean, then covariance of the centred data) avoid the cancellation of ``E[xx^T] - mean mean^T``.
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
