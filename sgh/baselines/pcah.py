"""PCAH: signs of the top principal components (the PCA-direction baseline).

Used as a baseline by Wang, Kumar & Chang (CVPR 2010) and Gong & Lazebnik (CVPR 2011, "PCA-Direct").
Each bit thresholds one principal component at the training mean. Because the variance of the
principal components falls quickly, the later bits carry little information and mAP typically
stops improving, or drops, as n_bits grows.
"""

from __future__ import annotations

import numpy as np

from sgh.baselines._base import principal_components
from sgh.baselines.projection import ProjectionHasher


class PCAH(ProjectionHasher):
    """Sign of the top ``n_bits`` principal components of centred data.

    ``fit`` computes the training mean ``mean_`` and the eigenvectors of the sample covariance
    with the ``n_bits`` largest eigenvalues, ``components_`` (``(d, n_bits)``, in decreasing
    order of variance; see :func:`sgh.baselines._base.principal_components`). ``transform``
    returns bit j = ``(x - mean_) @ components_[:, j] >= 0``. Deterministic: ``random_state``
    is accepted for a uniform interface and unused.

    Args:
        n_bits: code length, at most the number of features (ValueError otherwise).
        random_state: unused.

    Attributes:
        mean_: ``(d,)`` float64. components_: ``(d, n_bits)`` float64, orthonormal columns.
        n_bits_: code length. n_features_in_: d.
    """

    projection_attribute = "components_"
    bits_at_most_features = True

    def _fit(self, X: np.ndarray, n_bits: int) -> None:
        self.mean_, self.components_ = principal_components(X, n_bits)
