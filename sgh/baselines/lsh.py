"""LSH: signs of random Gaussian projections of centred data.

Random-hyperplane LSH for angular distance (Charikar, STOC 2002). The data are centred with the
training mean first, as in Gong & Lazebnik (CVPR 2011): MNIST's all-positive pixels would
otherwise give strongly unbalanced bits.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils import check_random_state

from sgh.baselines.projection import ProjectionHasher
from sgh.hasher import row_blocks


class LSH(ProjectionHasher):
    """Sign of random Gaussian projections of centred data: ``mean_`` and ``projections_``
    (i.i.d. standard normal); ``n_bits`` may exceed the number of features."""

    projection_attribute = "projections_"

    def _fit(self, X: np.ndarray, n_bits: int) -> None:
        rng = check_random_state(self.random_state)
        mean = np.zeros(X.shape[1])
        for _, block in row_blocks(X):
            mean += block.sum(axis=0)
        self.mean_ = mean / X.shape[0]
        self.projections_ = rng.standard_normal((X.shape[1], n_bits))
