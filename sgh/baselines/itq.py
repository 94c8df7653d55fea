"""ITQ: iterative quantization of PCA-projected data.

Gong & Lazebnik, "Iterative Quantization: A Procrustean Approach to Learning Binary Codes",
CVPR 2011, as the authors' MATLAB (``ITQ.m``): centre, project on the top ``n_bits`` principal
components (``V``), then from a random orthogonal R alternate ``n_iter`` times

* B = sign(V R) (the best codes for a fixed rotation; ``>= 0`` maps to +1), and
* R = the orthogonal Procrustes solution for fixed B: with ``svd(B^T V) = U S W^T``, ``R = W U^T``.

The authors' loop runs ``for iter = 0:n_iter``, one update more than ``n_iter``.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils import check_random_state

from sgh.baselines._base import principal_components
from sgh.baselines.projection import ProjectionHasher
from sgh.errors import check_int
from sgh.hasher import row_blocks


class ITQ(ProjectionHasher):
    """PCA to ``n_bits`` dimensions, then a rotation learned by iterative quantization (the module
    docstring). Learns ``mean_``, ``components_``, ``rotation_``, ``projection_ = components_ @
    rotation_`` and ``loss_history_``: ``||B - V R||_F^2 / n`` at the start, then per iteration."""

    projection_attribute = "projection_"
    bits_at_most_features = True

    def __init__(self, n_bits: int = 32, n_iter: int = 50, random_state=None):
        self.n_bits = n_bits
        self.n_iter = n_iter
        self.random_state = random_state

    def _fit(self, X: np.ndarray, n_bits: int) -> None:
        n_iter = check_int("n_iter", self.n_iter, 0)
        rng = check_random_state(self.random_state)
        mean, components = principal_components(X, n_bits)
        V = np.empty((X.shape[0], n_bits))
        for rows, block in row_blocks(X):
            V[rows] = (block - mean) @ components

        rotation = np.linalg.svd(rng.standard_normal((n_bits, n_bits)))[0]
        losses = []
        for iteration in range(n_iter + 1):
            projected = V @ rotation
            B = np.where(projected >= 0, 1.0, -1.0)
            losses.append(float(np.square(B - projected).sum()) / X.shape[0])
            if iteration == n_iter:
                break
            U, _, Wt = np.linalg.svd(B.T @ V)
            rotation = Wt.T @ U.T
        # losses[t] = loss(B_t, R_t) with B_t = sign(V R_t). Non-increasing:
        # loss(B_t+1, R_t+1) <= loss(B_t, R_t+1) (B_t+1 is optimal for R_t+1)
        #                    <= loss(B_t, R_t)   (R_t+1 is optimal for B_t).
        self.mean_, self.components_, self.rotation_ = mean, components, rotation
        self.projection_ = components @ rotation
        self.loss_history_, self.n_iter_ = np.asarray(losses), n_iter
