"""SH: Spectral Hashing with the uniform-distribution eigenfunctions.

Weiss, Torralba & Fergus, "Spectral Hashing", NIPS 2008. Follows the authors' MATLAB
(``trainSH.m`` / ``compressSH.m``):

1. PCA: the top ``n_pca = min(n_bits, d)`` eigenvectors ``pc`` of the sample covariance; the data
   are projected *without* removing the mean (``X * pc``; the offset cancels in step 3).
2. Fit a uniform distribution (a box) to the projections: ``mn = min - eps``, ``mx = max + eps``
   per dimension (``eps`` = float64 machine epsilon, as MATLAB's ``eps``), R = mx - mn.
3. Enumerate the 1-D eigenfunctions of the box: along dimension i, mode k >= 1 has eigenvalue
   ``(k pi / R_i)^2``; dimension i offers ``maxMode_i - 1`` modes, ``maxMode_i =
   ceil((n_bits + 1) R_i / max(R))``, so the widest dimension alone offers ``n_bits`` modes.
   Sort all modes (plus the constant mode 0) by increasing eigenvalue (stable: ties keep the
   enumeration order, dimension-major) and keep the ``n_bits`` smallest non-constant ones.
4. Bit b, with mode k along dimension i: ``sin(pi/2 + k pi (x_i - mn_i) / R_i) > 0``, where
   ``x = X pc`` (MATLAB forms the product of this over all dimensions, the others having k = 0
   and so contributing sin(pi/2) = 1 exactly).

Because several bits may come from one principal direction, ``n_bits`` may exceed the number of
features. Deviation from MATLAB, for degenerate data only: a direction with zero range
(R_i = 0, e.g. n_bits above the rank of the data) offers no modes (MATLAB would produce NaN or
drop a mode from another dimension); data whose projections all have zero range raise
ValueError.
"""

from __future__ import annotations

import numpy as np

from sgh.baselines._base import principal_components
from sgh.hasher import BinaryHasher


class SH(BinaryHasher):
    """Spectral Hashing: thresholded 1-D sinusoidal eigenfunctions over the PCA box.

    ``fit`` learns ``components_`` (``(d, n_pca)``, ``n_pca = min(n_bits, d)``), the box
    ``mn_``/``mx_`` (``(n_pca,)``) and ``modes_`` (``(n_bits, n_pca)`` int, one non-zero entry
    per row: the mode number k of that bit along its dimension), exactly as ``trainSH.m``
    (see the module docstring). ``transform`` returns bit b =
    ``sin(pi/2 + modes_[b] . (pi (x @ components_ - mn_) / (mx_ - mn_))) > 0``.
    Deterministic: ``random_state`` is accepted for a uniform interface and unused.

    Args:
        n_bits: code length (any positive integer; may exceed the number of features).
        random_state: unused.

    Attributes:
        components_, mn_, mx_, modes_: as above. n_bits_: code length. n_features_in_: d.
    """

    def __init__(self, n_bits: int = 32, random_state=None):
        self.n_bits = n_bits
        self.random_state = random_state

    def _fit(self, X: np.ndarray, n_bits: int) -> None:
        n_pca = min(n_bits, X.shape[1])
        _, components = principal_components(X, n_pca)
        low = np.full(n_pca, np.inf)
        high = np.full(n_pca, -np.inf)
        for start in range(0, X.shape[0], 1 << 14):
            projected = np.asarray(X[start : start + (1 << 14)], dtype=np.float64) @ components
            low = np.minimum(low, projected.min(axis=0))
            high = np.maximum(high, projected.max(axis=0))
        eps = np.finfo(np.float64).eps
        mn, mx = low - eps, high + eps
        spread = mx - mn
        if not spread.max() > 0:
            raise ValueError(
                "SH needs training data that vary along at least one principal direction; all "
                f"{X.shape[0]} training items project to the same point"
            )

        # Enumerate modes as trainSH.m: row 0 is the constant mode; dimension i contributes the
        # rows with modes 1 .. maxMode_i - 1 along i (zero elsewhere).
        max_mode = np.maximum(np.ceil((n_bits + 1) * spread / spread.max()).astype(int), 1)
        modes = np.zeros((1 + int((max_mode - 1).sum()), n_pca), dtype=np.int64)
        row = 1
        for i in range(n_pca):
            modes[row : row + max_mode[i] - 1, i] = np.arange(1, max_mode[i])
            row += max_mode[i] - 1
        omega0 = np.divide(np.pi, spread, out=np.zeros(n_pca), where=spread > 0)
        eigenvalues = ((modes * omega0) ** 2).sum(axis=1)
        order = np.argsort(eigenvalues, kind="stable")
        # order[0] is the constant mode (eigenvalue 0): skip it, as MATLAB's ii(2:nbits+1).
        self.components_ = components
        self.mn_ = mn
        self.mx_ = mx
        self.modes_ = modes[order[1 : n_bits + 1]]

    def _encode(self, block: np.ndarray) -> np.ndarray:
        omega0 = np.divide(
            np.pi, self.mx_ - self.mn_, out=np.zeros_like(self.mn_), where=self.mx_ > self.mn_
        )
        # One non-zero mode per bit: gather its dimension instead of MATLAB's product over dims.
        dims = self.modes_.argmax(axis=1)
        omegas = self.modes_[np.arange(self.modes_.shape[0]), dims] * omega0[dims]
        shifted = block @ self.components_ - self.mn_  # (rows, n_pca)
        return np.sin(shifted[:, dims] * omegas + np.pi / 2) > 0
