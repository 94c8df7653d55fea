"""Labelled Gaussian clusters: a dataset that needs no file, for tests and quick checks."""

from __future__ import annotations

import numpy as np


def gaussian_clusters(n_train: int, n_test: int, dim: int, n_classes: int, seed: int):
    """(X_train, y_train, X_test, y_test): unit-variance clusters around random centres, drawn
    at a spread of 2 per dimension so that classes overlap but are learnable."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 2.0, size=(n_classes, dim))

    def draw(n):
        y = rng.integers(0, n_classes, size=n)
        return (centres[y] + rng.normal(size=(n, dim))).astype(np.float32), y

    return (*draw(n_train), *draw(n_test))  # the training set drawn first
