"""What LSH, PCAH and ITQ share: bits that are the signs of a centred linear projection.

Bit j = ``((x - mean_) @ P)[j] >= 0``, with ``mean_`` the training mean and ``P`` the
``(d, n_bits)`` projection each method learns (LSH: random Gaussian ``projections_``; PCAH: the
principal ``components_``; ITQ: ``projection_`` = components times its learned rotation). The
same ``P`` gives the asymmetric score (:func:`sgh.search.asymmetric.projection_score`).
"""

from __future__ import annotations

import numpy as np
from sklearn.utils.validation import check_is_fitted

from sgh.hasher import BinaryHasher
from sgh.search.asymmetric import AsymmetricScore, projection_score


class ProjectionHasher(BinaryHasher):
    """A hasher whose bit j is ``((x - mean_) @ P)[j] >= 0``.

    Subclasses set ``mean_`` and their projection in ``_fit`` and name that projection's
    attribute in ``projection_attribute`` (``"projections_"``, ``"components_"``, ...); the
    ``__init__`` here takes ``n_bits`` and ``random_state``, a subclass with more parameters
    defines its own.
    """

    projection_attribute: str
    without_asymmetric = None  # its projection is its score

    def __init__(self, n_bits: int = 32, random_state=None):
        self.n_bits = n_bits
        self.random_state = random_state

    @property
    def _projection(self) -> np.ndarray:
        return getattr(self, self.projection_attribute)

    def _encode(self, block: np.ndarray) -> np.ndarray:
        return (block - self.mean_) @ self._projection >= 0

    def asymmetric_score(self) -> AsymmetricScore:
        """``-<(x - mean_) P, 2h - 1>``, P = the projection (``projection_attribute``): the
        query's projection against the code's signs
        (:func:`sgh.search.asymmetric.projection_score`)."""
        check_is_fitted(self)
        return projection_score(self.mean_, self._projection, type(self).__name__)
