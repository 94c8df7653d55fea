"""What LSH, PCAH and ITQ share: bits that are the signs of a centred linear projection, whose
matrix also gives the asymmetric score."""

from __future__ import annotations

import numpy as np
from sklearn.utils.validation import check_is_fitted

from sgh.hasher import BinaryHasher
from sgh.scores.asymmetric import AsymmetricScore, projection_score


class ProjectionHasher(BinaryHasher):
    """A hasher whose bit j is ``((x - mean_) @ P)[j] >= 0``: subclasses set ``mean_`` and P in
    ``_fit``, and name P's attribute in ``projection_attribute``."""

    projection_attribute: str
    without_asymmetric = None  # its projection is its score

    @property
    def _projection(self) -> np.ndarray:
        return getattr(self, self.projection_attribute)

    def _encode(self, block: np.ndarray) -> np.ndarray:
        return (block - self.mean_) @ self._projection >= 0

    def asymmetric_score(self) -> AsymmetricScore:
        """``-<(x - mean_) P, 2h - 1>``: the query's projection against the code's signs
        (:func:`sgh.scores.asymmetric.projection_score`)."""
        check_is_fitted(self)
        return projection_score(self.mean_, self._projection, type(self).__name__)
