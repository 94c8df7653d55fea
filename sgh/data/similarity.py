"""The similarity a split is searched by (`dataset.similarity`, docs/guide/data.md), and what it
does to the features: with `angular`, every row of the training set, database and queries is
divided by its L2 norm when read, in memory and streamed alike, so that training, the ground
truth and search all see unit vectors, whose Euclidean order is the angular one.
"""

from __future__ import annotations

import numpy as np

from sgh.errors import UserInputError, check_choice

SIMILARITIES = ("euclidean", "angular", "inner_product")
# How results files and ground-truth sources name each similarity's neighbours.
NEIGHBOUR_LABELS = {"euclidean": "Euclidean", "angular": "angular",
                    "inner_product": "inner-product"}
# Rows normalised at a time in memory: 8 MiB of float64 at 128 dimensions.
_NORMALISE_ROWS = 1 << 13


def resolve_similarity(setting: str, stated: str | None = None, source: str = "") -> str:
    """The similarity a split uses: `setting` (`dataset.similarity`), or with `auto` the one the
    file states (`stated`, named in messages by `source`), else euclidean."""
    if setting == "auto":
        return stated or "euclidean"
    check_choice("dataset.similarity", setting, ("auto", *SIMILARITIES))
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
    """float32 rows divided by their L2 norms (in float64, rounded once), as a new array;
    `where` and `row_numbers` (default ``0..n-1``) name a zero row in the message."""
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
    """`unit_normalised` over an in-memory float32 array, in place, a block of rows at a time."""
    for start in range(0, len(features), _NORMALISE_ROWS):
        stop = min(start + _NORMALISE_ROWS, len(features))
        features[start:stop] = unit_normalised(features[start:stop], where,
                                                np.arange(start, stop))
    return features


def nearness(items: np.ndarray, queries: np.ndarray, similarity: str) -> np.ndarray:
    """The key that ranks ``items`` for ``queries``, smaller = nearer: the squared L2 distance
    (euclidean; angular on unit vectors), or minus the inner product; over the last axis, in
    the arrays' precision. The one definition the ground truth, its cache check and exact
    rescoring share."""
    if similarity == "inner_product":
        return -np.einsum("...j,...j->...", items, queries)
    difference = items - queries
    return np.einsum("...j,...j->...", difference, difference)
