"""Per-dimension mean and variance of a training set in one streaming pass, all the model's
normaliser and initial weights need (`SGH.from_statistics`). Chunks are merged with the pairwise
update of Chan, Golub and LeVeque in float64, which stays accurate where the textbook
sum-of-squares formula cancels; in-memory and streamed features are chunked at the same
boundaries (`iter_chunks`), so both give the same statistics bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sgh.data.streamed_features import Features, iter_chunks


@dataclass(frozen=True)
class FeatureStatistics:
    count: int
    mean: np.ndarray  # (d,) float64
    squared_deviations: np.ndarray  # (d,) float64: sum over items of (x - mean)^2

    @property
    def variance(self) -> np.ndarray:
        """Per-dimension population variance."""
        return self.squared_deviations / self.count


def feature_statistics(features: Features) -> FeatureStatistics:
    """Count, mean and summed squared deviations of `features` (in memory or streamed)."""
    dim = features.shape[1]
    count, mean, deviations = 0, np.zeros(dim), np.zeros(dim)
    widened = None  # one float64 buffer for every chunk, faulted in once
    for _, rows in iter_chunks(features):
        if widened is None or len(widened) < len(rows):
            widened = np.empty(rows.shape, np.float64)
        chunk = widened[:len(rows)]
        np.copyto(chunk, rows)
        n = len(chunk)
        chunk_mean = chunk.mean(axis=0)
        chunk -= chunk_mean  # in place: one float64 copy of the chunk at a time
        chunk_deviations = np.square(chunk, out=chunk).sum(axis=0)
        delta = chunk_mean - mean
        total = count + n
        mean = mean + delta * (n / total)
        deviations = deviations + chunk_deviations + np.square(delta) * (count * n / total)
        count = total
    return FeatureStatistics(count, mean, deviations)


def principal_directions(features: Features, mean: np.ndarray, count: int) -> np.ndarray | None:
    """The ``count`` leading principal directions of ``features`` about ``mean``, ``(dim,
    count)`` float32 orthonormal columns, from one pass (in memory or streamed; the covariance
    in float64); None if ``count >= dim``, where the features' own axes serve."""
    dim = features.shape[1]
    if count >= dim:
        return None
    scatter = np.zeros((dim, dim))
    for _, rows in iter_chunks(features):
        centred = np.asarray(rows, np.float64) - mean
        scatter += centred.T @ centred
    _, vectors = np.linalg.eigh(scatter)  # ascending eigenvalues
    return np.ascontiguousarray(vectors[:, ::-1][:, :count], np.float32)
