"""ann-benchmarks datasets (github.com/erikbern/ann-benchmarks): an HDF5 file as a split.

`train` is the database and training set, `test` the queries, `neighbors` (optional) the ground
truth, and the root attribute `distance` the similarity `dataset.similarity=auto` follows.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from sgh.data.ann_files import loaded_features, refuse_companion_paths
from sgh.data.feature_conversion import conversion_of, require_same_scaling
from sgh.data.ground_truth import checked_ids
from sgh.data.hdf5_files import _ANN_FILE, Hdf5Vectors, _member_names, _opened, _string_attribute
from sgh.data.similarity import conversion_with, nearness, resolve_similarity
from sgh.data.split import RetrievalSplit, ann_split
from sgh.data.streamed_features import choose_streaming, evenly_spaced
from sgh.data.vector_file import _where
from sgh.errors import UserInputError

# ann-benchmarks' `distance` attribute -> dataset.similarity. Its binary datasets (hamming,
# jaccard) hold bit vectors and sets, which SGH's real-valued model does not take.
ANN_BENCHMARKS_DISTANCES = {"euclidean": "euclidean", "angular": "angular",
                            "dot": "inner_product"}


def _stated_similarity(file, path: Path) -> tuple[str | None, str]:
    """(the similarity the `distance` attribute states or None, the attribute for messages)."""
    distance = _string_attribute(file, "distance", str(path))
    if distance is None:
        return None, ""
    source = f"{path}: attribute distance={distance!r}"
    if distance in ANN_BENCHMARKS_DISTANCES:
        return ANN_BENCHMARKS_DISTANCES[distance], source
    accepted = "accepted: euclidean, angular, dot (inner product)"
    if distance in ("hamming", "jaccard"):
        raise UserInputError(f"{source}: ann-benchmarks' binary and set datasets are not "
                             f"supported (SGH hashes real-valued features); {accepted}")
    raise UserInputError(f"{source} is not known; {accepted}")


def _checked_neighbours(path: Path, n_queries: int, n_database: int) -> np.ndarray:
    """`neighbors` as int64 (n_queries, K) after checking it: integers, a row per query, ids of
    `train` rows, distinct within each row."""
    vectors = Hdf5Vectors(path, "neighbors")
    where = vectors.where
    if vectors.dtype.kind not in "iu":
        raise UserInputError(f"{where} has dtype {vectors.dtype}; expected integer ids (test x "
                             "K, 0-based rows of 'train')")
    if len(vectors) != n_queries:
        raise UserInputError(f"{where} has {len(vectors)} rows but 'test' has {n_queries} "
                             "queries; expected one row of neighbour ids per query")
    return checked_ids(where, vectors.read(0, len(vectors)).astype(np.int64), n_database,
                       "'train'")


# Queries whose listed neighbours are checked against exact ones, and how many of each.
_SPOT_CHECKED_QUERIES, _SPOT_CHECKED_NEIGHBOURS = 8, 10


def _spot_check_neighbours(where: str, truth: np.ndarray, query: np.ndarray,
                           database: np.ndarray, similarity: str) -> None:
    """A sample of queries: their first listed neighbours must be their nearest `train` items
    (exact keys equal up to float32 rounding; ties may list either), else every method would
    be scored on a wrong ground truth, silently."""
    k = min(_SPOT_CHECKED_NEIGHBOURS, truth.shape[1])
    key = "minus the inner product" if similarity == "inner_product" else "squared distance"
    rows = evenly_spaced(len(query), _SPOT_CHECKED_QUERIES)
    # Imported here: `import sgh.data` should not load numba (a streaming reader's whole memory
    # budget is smaller than numba's import).
    from sgh.data.neighbours import exact_neighbours

    nearest = exact_neighbours(query[rows], database, k, similarity)
    for row, exact in zip(rows, nearest, strict=True):
        q = query[row].astype(np.float64)
        listed = np.sort(nearness(database[truth[row, :k]].astype(np.float64), q, similarity))
        best = np.sort(nearness(database[exact].astype(np.float64), q, similarity))
        if not np.allclose(listed, best, rtol=1e-4, atol=1e-6 * max(1.0, abs(best).max())):
            raise UserInputError(
                f"{where}: the neighbours of query {row} are not its {k} nearest 'train' items "
                f"under {similarity} (the nearest is at {best[0]:.6g}, the file's first at "
                f"{listed[0]:.6g}, as {key}); "
                "the ground truth does not fit the vectors: fix the file, or remove "
                "'neighbors' to have it computed exactly")


def load_hdf5_split(dataset, path: Path) -> RetrievalSplit:
    """The split of an ann-benchmarks HDF5 file, its similarity from `dataset.similarity` and
    the file's `distance`; every header is checked before any data is read."""
    refuse_companion_paths(dataset, f"{path} is {_ANN_FILE}")
    with _opened(path, _ANN_FILE) as file:
        names = _member_names(file, path)
        for key in ("train", "test"):
            if key not in names:
                raise UserInputError(f"{path}: has no dataset {key!r} (found: "
                                     f"{', '.join(names) or 'none'}); expected {_ANN_FILE}")
        stated, source = _stated_similarity(file, path)
    similarity = resolve_similarity(dataset.similarity, stated, source)
    train, test = Hdf5Vectors(path, "train"), Hdf5Vectors(path, "test")
    if test.shape[1] != train.shape[1]:
        raise UserInputError(f"{test.where} has {test.shape[1]} features per item but "
                             f"{train.where} has {train.shape[1]}; all splits must agree")
    require_same_scaling(train.where, train.dtype, test.where, test.dtype)
    truth = _checked_neighbours(path, len(test), len(train)) if "neighbors" in names else None
    query = loaded_features(test, similarity)
    streamed = choose_streaming(dataset.streaming, [train])
    database = loaded_features(train, similarity, streamed)
    if truth is not None and not streamed:
        _spot_check_neighbours(_where(path, "neighbors"), truth, query, database, similarity)
    split = ann_split(dataset.name, database, query, truth, None,
                      conversion_with(conversion_of(test.dtype), similarity), similarity)
    return replace(split, protocol=("ann-benchmarks HDF5: database = training set = train, "
                                    "queries = test"))
