"""The similarity a split is searched by (`dataset.similarity`), and what it does to the features.

- `euclidean`: squared L2 distance on the features as converted (the paper's task).
- `angular`: cosine similarity. Every row of the training set, database and queries is divided
  by its L2 norm when it is read (float32 row / its float64 norm, rounded once to float32), in
  memory and streamed alike. Training, the ground truth and search then all see unit vectors,
  on which the Euclidean order is the angular one (|a - b|^2 = 2 - 2 cos(a, b)). An all-zero
  row has no direction and is refused.
- `inner_product`: maximum inner product search on the features as converted; the ground truth
  is each query's k largest <q, x> (`sgh.data.neighbours.exact_neighbours`).

`auto` takes what the file states where it states one (an HDF5 file's `distance` attribute),
else euclidean; an explicit setting that contradicts the file is refused.
"""

from __future__ import annotations

import numpy as np

from sgh.errors import UserInputError

SIMILARITIES = ("euclidean", "angular", "inner_product")
# How results files and ground-truth sources name each similarity's neighbours.
NEIGHBOUR_LABELS = {"euclidean": "Euclidean", "angular": "angular",
                    "inner_product": "inner-product"}
# Rows normalised at a time in memory: 8 MiB of float64 at 128 dimensions.
_NORMALISE_ROWS = 1 << 13


def resolve_similarity(setting: str, stated: str | None = None, source: str = "") -> str:
    """The similarity a split uses: `setting` (`dataset.similarity`), or with `auto` the one the
    file states (`stated`, None when it states none), else euclidean. `source` names what
    states it in messages (`FILE: attribute distance='dot'`)."""
    if setting == "auto":
        return stated or "euclidean"
    if setting not in SIMILARITIES:
        raise UserInputError(f"dataset.similarity={setting!r} is not known; accepted: auto, "
                             f"{', '.join(SIMILARITIES)}")
    if stated is not None and stated != setting:
        raise UserInputError(f"dataset.similarity={setting} contradicts {source}, which means "
                             f"{stated}; use dataset.similarity=auto (or {stated}) for this "
                             "file, or a file made for the similarity you want")
    return setting


def conversion_with(conversion: str, similarity: str) -> str:
    """The feature conversion line of metrics.json, with angular's normalisation stated."""
    if similarity == "angular":
        return f"{conversion}, then unit-normalised (angular)"
    return conversion


def unit_normalised(rows: np.ndarray, where: str, row_numbers: np.ndarray | None = None
                    ) -> np.ndarray:
    """float32 rows divided by their L2 norms (computed and divided in float64, rounded once).

    Args:
        rows: ``(n, d)`` float32 features.
        where: the file (and key) they come from, for the message.
        row_numbers: each row's number in that file (default ``0..n-1``), for the message.

    Returns:
        ``(n, d)`` float32 unit vectors (a new array).
    """
    wide = rows.astype(np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", wide, wide))
    zero = np.flatnonzero(norms == 0)
    if zero.size:
        row = zero[0] if row_numbers is None else row_numbers[zero[0]]
        raise UserInputError(
            f"{where}: row {row} is all zeros, which has no direction (dataset.similarity="
            "angular divides every row by its length); drop the zero rows, or use "
            "dataset.similarity=euclidean or inner_product")
    wide /= norms[:, None]
    return wide.astype(np.float32)


def normalise_in_place(features: np.ndarray, where: str) -> np.ndarray:
    """`unit_normalised` over an in-memory float32 array, a block of rows at a time (memory:
    one float64 block beside the array); returns `features`, normalised."""
    for start in range(0, len(features), _NORMALISE_ROWS):
        stop = min(start + _NORMALISE_ROWS, len(features))
        features[start:stop] = unit_normalised(features[start:stop], where,
                                                np.arange(start, stop))
    return features


def nearness(items: np.ndarray, queries: np.ndarray, similarity: str) -> np.ndarray:
    """The exact key that ranks ``items`` for ``queries`` under a similarity, smaller = nearer:
    the squared L2 distance (euclidean; angular on unit vectors), or minus the inner product.
    Row by row over the last axis (the shapes broadcast), in the arrays' precision: callers pass
    float64 for exact keys. The one definition the ground truth, its cache check and exact
    rescoring share."""
    if similarity == "inner_product":
        return -np.einsum("...j,...j->...", items, queries)
    difference = items - queries
    return np.einsum("...j,...j->...", difference, difference)
