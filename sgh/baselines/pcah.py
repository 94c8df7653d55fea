"""PCAH: signs of the top principal components (the PCA-direction baseline).

Used as a baseline by Wang, Kumar & Chang (CVPR 2010) and Gong & Lazebnik (CVPR 2011, "PCA-Direct").
The variance of the principal components falls quickly, so the later bits carry little
information and mAP stops improving, or drops, as n_bits grows.
"""

from __future__ import annotations

import numpy as np

from sgh.baselines._base import principal_components
from sgh.baselines.projection import ProjectionHasher


class PCAH(ProjectionHasher):
    """Sign of the top ``n_bits`` principal components of centred data (``mean_``, ``components_``);
    deterministic: ``random_state`` is accepted for a uniform interface and unused."""

    projection_attribute = "components_"
    bits_at_most_features = True

    def _fit(self, X: np.ndarray, n_bits: int) -> None:
        self.mean_, self.components_ = principal_components(X, n_bits)
