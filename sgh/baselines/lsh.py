"""LSH: signs of random Gaussian projections of centred data.

Random-hyperplane LSH for angular distance (Charikar, STOC 2002; the sign-random-projection
baseline of the learning-to-hash literature, e.g. Gong & Lazebnik, CVPR 2011). The data are
centred with the training mean first, as in the comparisons of Gong & Lazebnik; without
centring, MNIST's all-positive pixels would give strongly unbalanced bits.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils import check_random_state

from sgh.baselines.projection import ProjectionHasher
from sgh.hasher import row_blocks


class LSH(ProjectionHasher):
    """Sign of random Gaussian projections of centred data.

    ``fit`` stores the training mean ``mean_`` (``(d,)``) and draws ``projections_``
    (``(d, n_bits)``, i.i.d. standard normal, from ``random_state``); the data are not otherwise
    used. ``transform`` returns bit j = ``(x - mean_) @ projections_[:, j] >= 0``.

    Args:
        n_bits: code length (any positive integer; may exceed the number of features).
        random_state: seed, ``np.random.RandomState`` or None, for the projections.

    Attributes:
        mean_: ``(d,)`` float64 training mean.
        projections_: ``(d, n_bits)`` float64 Gaussian projection matrix.
        n_bits_: code length. n_features_in_: d.
    """

    projection_attribute = "projections_"

    def _fit(self, X: np.ndarray, n_bits: int) -> None:
        rng = check_random_state(self.random_state)
        mean = np.zeros(X.shape[1])
        for _, block in row_blocks(X):
            mean += block.sum(axis=0)
        self.mean_ = mean / X.shape[0]
        self.projections_ = rng.standard_normal((X.shape[1], n_bits))
