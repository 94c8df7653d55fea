"""SpH: Spherical Hashing.

Heo, Lee, He, Chang & Yoon, "Spherical Hashing", CVPR 2012 (Algorithm 1). Bit k is 1 when a
point lies inside hypersphere k: ``||x - p_k|| <= r_k``. The pivots ``p_k`` and radii ``r_k`` are
learned on a random sample of the training set (``n_samples`` items) so that

* each sphere holds half of the sample: ``r_k`` = the ceil(n/2)-th smallest distance from
  ``p_k`` to the sample (ties at the radius count as inside), re-chosen after every move;
* each pair of spheres shares about a quarter of it: with ``o_ij`` = number of sample points in
  both spheres i and j, pivots repel (``o_ij > n/4``) or attract (``o_ij < n/4``):
  ``f_i<-j = 1/2 (o_ij - n/4) / (n/4) (p_i - p_j)``, ``p_i += (1/n_bits) sum_j f_i<-j``.

Iteration stops when ``mean_ij |o_ij - n/4| <= epsilon_mean n/4`` and ``std_ij(o_ij) <=
epsilon_stddev n/4`` (the paper's 0.1 and 0.15; population standard deviation, over pairs
i < j) after a move, or after ``max_iter`` moves. The pivots start at the mean of 5 random sample
points each, as in the authors' MATLAB release (``random_center``). Data are used as given (no
centring).

Distance: the paper ranks with its "spherical Hamming distance" (|a XOR b| / |a AND b|). This
project ranks every method by the plain Hamming distance, so SpH numbers here are *SpH codes
under Hamming ranking*, as in most comparison tables that re-run SpH; expect them to be lower
than the paper's SHD numbers.
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
    squared = (
        np.einsum("ij,ij->i", points, points)[:, None]
        - 2.0 * points @ pivots.T
        + np.einsum("ij,ij->i", pivots, pivots)[None, :]
    )
    return np.maximum(squared, 0.0)


class SpH(BinaryHasher):
    """Spherical Hashing: bit k = 1 iff ``||x - pivots_[k]|| <= radii_[k]``.

    ``fit`` draws ``min(n_samples, n)`` training items without replacement (``random_state``),
    starts each pivot at the mean of 5 of them, and runs the balancing iteration of the module
    docstring. ``transform`` compares squared distances, computed as
    ``|x|^2 - 2 x.p + |p|^2`` in float64 (one matrix product), with the squared radii; a point
    within rounding (~1e-15 relative) of a sphere may therefore land on either side of it.

    Args:
        n_bits: code length (number of spheres); any positive integer.
        n_samples: training items used to learn the spheres (the rest are ignored).
        max_iter: maximum number of pivot moves (>= 0; 0 keeps the random initial pivots).
        epsilon_mean: tolerance on the mean of ``|o_ij - n/4|``, as a fraction of n/4.
        epsilon_stddev: tolerance on the standard deviation of ``o_ij``, as a fraction of n/4.
        random_state: seed, ``np.random.RandomState`` or None (sample and initial pivots).

    Attributes:
        pivots_: ``(n_bits, d)`` float64. radii_: ``(n_bits,)`` float64.
        n_iter_: pivot moves made. converged_: whether the tolerances were met.
        overlap_mean_error_, overlap_std_: final ``mean |o_ij - n/4|`` and ``std o_ij`` divided by
            n/4 (0 when n_bits = 1). n_bits_: code length. n_features_in_: d.
    """

    def __init__(
        self,
        n_bits: int = 32,
        n_samples: int = 10_000,
        max_iter: int = 50,
        epsilon_mean: float = 0.1,
        epsilon_stddev: float = 0.15,
        random_state=None,
    ):
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
        epsilon_stddev = check_real("epsilon_stddev", self.epsilon_stddev, 0, 1,
                                    low_open=True)
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

        self.pivots_ = pivots
        self.radii_ = np.sqrt(radii_squared)
        self._radii_squared = radii_squared
        self.n_iter_ = moves
        self.converged_ = converged
        self.overlap_mean_error_ = mean_error
        self.overlap_std_ = std

    def _encode(self, block: np.ndarray) -> np.ndarray:
        return _squared_distances(block, self.pivots_) <= self._radii_squared
