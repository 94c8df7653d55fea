"""The ground truth of a split for Recall K@N: the dataset file's neighbours when it has enough,
else the exact ones by the split's similarity, computed each time or found through the cache a
run keeps beside the dataset (`sgh.artifacts.ground_truth_cache.cached_exact_neighbours`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from sgh.data.similarity import NEIGHBOUR_LABELS
from sgh.data.split import RetrievalSplit
from sgh.errors import UserInputError

logger = logging.getLogger(__name__)


def checked_ids(where: str, ids: np.ndarray, n_database: int,
                database: str = "the database") -> np.ndarray:
    """A ground truth's ids (int64, a row per query) if each is a 0-based row of `database`
    and no row lists one twice (Recall K@N would count that neighbour twice); else one line
    naming the first fault. Every reader of a ground truth checks through here."""
    outside = np.argwhere((ids < 0) | (ids >= n_database))
    if outside.size:
        row, column = outside[0]
        raise UserInputError(
            f"{where} has ids outside 0..{n_database - 1} (min {ids.min()}, max {ids.max()}; "
            f"first at row {row}: {ids[row, column]}); ids index the rows of {database} from 0")
    ordered = np.sort(ids, axis=1)
    repeated = np.argwhere(np.diff(ordered, axis=1) == 0)
    if repeated.size:
        row, column = repeated[0]
        raise UserInputError(f"{where} row {row} lists the id {ordered[row, column]} more than "
                             f"once; each row lists distinct rows of {database}, nearest first")
    return ids


def computed_source(similarity: str) -> str:
    """Where exact neighbours come from, as metrics.json says it."""
    return f"exact {NEIGHBOUR_LABELS[similarity]} neighbours, computed blockwise"


def exact_ground_truth(query: np.ndarray, database, k: int,
                       similarity: str = "euclidean") -> tuple[np.ndarray, str]:
    """Each query's exact ``k`` best database items, computed now, and where they come from."""
    from sgh.data.neighbours import exact_neighbours  # numba: only where neighbours are computed

    return exact_neighbours(query, database, k, similarity), computed_source(similarity)


def split_ground_truth(split: RetrievalSplit, k: int,
                       exact: Callable[..., tuple[np.ndarray, str]] = exact_ground_truth,
                       ) -> tuple[np.ndarray, str]:
    """The split's neighbours by its similarity, and where they come from (for metrics.json):
    the dataset's own if it has k per query, else (with a warning if it has fewer) those of
    ``exact(query, database, k, similarity=...) -> (ids, source)``."""
    if split.groundtruth is not None and split.groundtruth.shape[1] >= k:
        return split.groundtruth, "from the dataset file"
    if split.groundtruth is not None:
        logger.warning("the dataset's ground truth has %d neighbours per query, fewer than "
                       "eval.recall_k=%d: computing the exact %d instead (eval.recall_k=%d "
                       "uses the file's)", split.groundtruth.shape[1], k, k,
                       split.groundtruth.shape[1])
    return exact(split.query, split.database, k, similarity=split.similarity)
