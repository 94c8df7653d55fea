"""SpH: Spherical Hashing.

Heo, Lee, He, Chang & Yoon, "Spherical Hashing", CVPR 2012 (Algorithm 1). Bit k is 1 when a
point lies inside hypersphere k: ``||x - p_k|| <= r_k``, learned on a random sample of n training
items (no centring) so that

* each sphere holds half of the sample: ``r_k`` = the ceil(n/2)-th smallest distance from
  ``p_k`` to the sample (ties at the radius count as inside), re-chosen after every move;
* each pair of spheres shares about a quarter of it: with ``o_ij`` the sample points in both
  spheres i and j, ``f_i<-j = 1/2 (o_ij - n/4) / (n/4) (p_i - p_j)``,
  ``p_i += (1/n_bits) sum_j f_i<-j``,

until ``mean_ij |o_ij - n/4| <= epsilon_mean n/4`` and ``std_ij(o_ij) <= epsilon_stddev n/4``
(population standard deviation over pairs i < j), or ``max_iter`` moves.

The paper ranks with its "spherical Hamming distance" (|a XOR b| / |a AND b|); this project ranks
every method by the plain Hamming distance, which scores SpH codes lower.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils import check_random_state

from sgh.errors import check_int, check_real
from sgh.hasher import BinaryHasher

# Sample points averaged into each initial pivot (the authors' MATLAB `random_center`).
_POINTS_PER_INITIAL_PIVOT = 5


def _squared_distances(points: np.ndarray, pivots: np.ndarray) -> np.ndarray:
    """``(n, n_bits)`` squared L2 distances, by ``|x|^2 - 2 x.p + |p|^2``, clipped at 0."""
    squared = (np.einsum("ij,ij->i", points, points)[:, None] - 2.0 * points @ pivots.T
               + np.einsum("ij,ij->i", pivots, pivots)[None, :])
    return np.maximum(squared, 0.0)


class SpH(BinaryHasher):
    """Spherical Hashing (the module docstring): bit k = 1 iff ``||x - pivots_[k]|| <= radii_[k]``,
    by squared distances ``|x|^2 - 2 x.p + |p|^2``, so a point within rounding of a sphere may land
    on either side. Also learns ``n_iter_``, ``converged_``, and ``overlap_mean_error_`` and
    ``overlap_std_`` (the final ``mean |o_ij - n/4|`` and ``std o_ij``, over n/4)."""

    def __init__(self, n_bits: int = 32, n_samples: int = 10_000, max_iter: int = 50,
                 epsilon_mean: float = 0.1, epsilon_stddev: float = 0.15, random_state=None):
        self.n_bits = n_bits
        self.n_samples = n_samples
        self.max_iter = max_iter
        self.epsilon_mean = epsilon_mean
        self.epsilon_stddev = epsilon_stddev
        self.random_state = random_state

    def _fit(self, X: np.ndarray, n_bits: int) -> None:
        n_samples = check_int("n_samples", self.n_samples, 2)
        max_iter = check_int("max_iter", self.max_iter, 0)
        epsilon_mean = check_real("epsilon_mean", self.epsilon_mean, 0, 1, low_open=True)
        epsilon_stddev = check_real("epsilon_stddev", self.epsilon_stddev, 0, 1, low_open=True)
        rng = check_random_state(self.random_state)
        n = min(n_samples, X.shape[0])
        sample = np.asarray(X[np.sort(rng.choice(X.shape[0], n, replace=False))], np.float64)
        starts = np.stack([rng.permutation(n)[:_POINTS_PER_INITIAL_PIVOT] for _ in range(n_bits)])
        pivots = sample[starts].mean(axis=1)

        quarter = n / 4.0
        upper = np.triu_indices(n_bits, k=1)
        rank = (n + 1) // 2 - 1  # the ceil(n/2)-th smallest distance, 0-based

        def statistics(pivots):
            squared = _squared_distances(sample, pivots)
            radii_squared = np.partition(squared, rank, axis=0)[rank]
            inside = (squared <= radii_squared).astype(np.float64)
            overlaps = inside.T @ inside  # o_ij; integers, exact in float64
            pairs = overlaps[upper]
            mean_error = np.abs(pairs - quarter).mean() / quarter if pairs.size else 0.0
            std = pairs.std() / quarter if pairs.size else 0.0
            return radii_squared, overlaps, float(mean_error), float(std)

        radii_squared, overlaps, mean_error, std = statistics(pivots)
        converged, moves = False, 0
        while moves < max_iter and not converged:
            strength = 0.5 * (overlaps - quarter) / quarter
            np.fill_diagonal(strength, 0.0)
            # sum_j strength_ij (p_i - p_j) = (sum_j strength_ij) p_i - (strength @ P)_i
            forces = strength.sum(axis=1)[:, None] * pivots - strength @ pivots
            pivots = pivots + forces / n_bits
            moves += 1
            radii_squared, overlaps, mean_error, std = statistics(pivots)
            converged = mean_error <= epsilon_mean and std <= epsilon_stddev

        self.pivots_, self.radii_ = pivots, np.sqrt(radii_squared)
        self._radii_squared = radii_squared
        self.n_iter_, self.converged_ = moves, converged
        self.overlap_mean_error_, self.overlap_std_ = mean_error, std

    def _encode(self, block: np.ndarray) -> np.ndarray:
        return _squared_distances(block, self.pivots_) <= self._radii_squared
