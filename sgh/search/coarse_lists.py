"""The coarse quantizer of an index's inverted lists, as faiss's IVF indexes have one: ``nlist``
k-means centroids of training features, and the lists nearest each vector (flat L2 search)."""

from __future__ import annotations

import numpy as np

KMEANS_POINTS_PER_LIST = 256  # training points per list for the k-means: faiss's own cap


def learned_centroids(x: np.ndarray, nlist: int, seed: int) -> np.ndarray:
    """``(nlist, dim)`` float32 k-means centroids of ``x`` (20 iterations, faiss's k-means)."""
    import faiss

    kmeans = faiss.Kmeans(x.shape[1], nlist, niter=20, seed=seed,
                          max_points_per_centroid=KMEANS_POINTS_PER_LIST)
    kmeans.train(np.ascontiguousarray(x, np.float32))
    return kmeans.centroids


def coarse_quantizer(centroids: np.ndarray):
    """faiss's flat L2 index of the lists' centroids, which `nearest_lists` searches."""
    import faiss

    quantizer = faiss.IndexFlatL2(centroids.shape[1])
    quantizer.add(np.ascontiguousarray(centroids, np.float32))
    return quantizer


def nearest_lists(quantizer, x: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``(n, count)`` squared distances (float32) to the nearest centroids, their lists;
    ValueError naming the row where no distance is finite (faiss answers -1 there)."""
    distances, lists = quantizer.search(np.ascontiguousarray(x, np.float32),
                                        min(count, quantizer.ntotal))
    unplaced = (lists < 0) | ~np.isfinite(distances)
    if unplaced.any():
        row = int(np.argmax(unplaced.any(axis=1)))
        raise ValueError(f"row {row} of the features: its distances to the lists' centroids "
                         "overflow float32 (features far beyond the scale the model was "
                         "trained on); scale them as its training features were")
    return distances, lists
