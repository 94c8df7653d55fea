"""SH: Spectral Hashing with the uniform-distribution eigenfunctions.

Weiss, Torralba & Fergus, "Spectral Hashing", NIPS 2008, as the authors' MATLAB (``trainSH.m``):

1. PCA: the top ``n_pca = min(n_bits, d)`` eigenvectors ``pc``; the data are projected *without*
   removing the mean (``X * pc``; the offset cancels in step 3).
2. Fit a box to the projections: ``mn = min - eps``, ``mx = max + eps`` per dimension, R = mx - mn.
3. Along dimension i, mode k >= 1 of the box has eigenvalue ``(k pi / R_i)^2``, for k below
   ``maxMode_i = ceil((n_bits + 1) R_i / max(R))``. Keep the ``n_bits`` smallest non-constant
   modes (stable sort: ties keep the enumeration order, dimension-major).
4. Bit b, with mode k along dimension i: ``sin(pi/2 + k pi (x_i - mn_i) / R_i) > 0``.

Several bits may come from one direction, so ``n_bits`` may exceed the number of features. A
direction with zero range offers no modes (MATLAB would produce NaN or drop a mode from another
dimension); data whose projections all have zero range raise ValueError.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import block_diag

from sgh.baselines._base import principal_components
from sgh.hasher import BinaryHasher


class SH(BinaryHasher):
    """Spectral Hashing (the module docstring): learns ``components_``, the box ``mn_``/``mx_`` and
    ``modes_`` (``(n_bits, n_pca)``, one non-zero entry per row: the mode of that bit along its
    dimension). Deterministic: ``random_state`` is accepted for a uniform interface and unused."""

    def _fit(self, X: np.ndarray, n_bits: int) -> None:
        n_pca = min(n_bits, X.shape[1])
        _, components = principal_components(X, n_pca)
        low, high = np.full(n_pca, np.inf), np.full(n_pca, -np.inf)
        for start in range(0, X.shape[0], 1 << 14):
            projected = np.asarray(X[start : start + (1 << 14)], dtype=np.float64) @ components
            low = np.minimum(low, projected.min(axis=0))
            high = np.maximum(high, projected.max(axis=0))
        eps = np.finfo(np.float64).eps
        mn, mx = low - eps, high + eps
        spread = mx - mn
        if not spread.max() > 0:
            raise ValueError("SH needs training data that vary along at least one principal "
                             f"direction; all {X.shape[0]} training items project to the "
                             "same point")

        # Enumerate modes as trainSH.m: row 0 is the constant mode; dimension i contributes the
        # rows with modes 1 .. maxMode_i - 1 along i (zero elsewhere), block-diagonally.
        max_mode = np.maximum(np.ceil((n_bits + 1) * spread / spread.max()).astype(int), 1)
        modes = np.vstack([np.zeros((1, n_pca), np.int64),
                           block_diag(*(np.arange(1, m)[:, None] for m in max_mode))])
        omega0 = np.divide(np.pi, spread, out=np.zeros(n_pca), where=spread > 0)
        eigenvalues = ((modes * omega0) ** 2).sum(axis=1)
        order = np.argsort(eigenvalues, kind="stable")
        # order[0] is the constant mode (eigenvalue 0): skip it, as MATLAB's ii(2:nbits+1).
        self.components_, self.mn_, self.mx_ = components, mn, mx
        self.modes_ = modes[order[1 : n_bits + 1]]

    def _encode(self, block: np.ndarray) -> np.ndarray:
        omega0 = np.divide(np.pi, self.mx_ - self.mn_, out=np.zeros_like(self.mn_),
                           where=self.mx_ > self.mn_)
        # One non-zero mode per bit: gather its dimension instead of MATLAB's product over dims.
        dims = self.modes_.argmax(axis=1)
        omegas = self.modes_[np.arange(self.modes_.shape[0]), dims] * omega0[dims]
        shifted = block @ self.components_ - self.mn_  # (rows, n_pca)
        return np.sin(shifted[:, dims] * omegas + np.pi / 2) > 0
