"""Who is relevant to whom: validated relevance between queries and database items.

Three kinds, all answering the same questions for the metrics engine (:mod:`sgh.metrics`):

* **single labels** — 1-D arrays, one class label per item (ints, or any values ``np.unique``
  orders, e.g. strings); relevant = same label.
* **multi-label** — 2-D 0/1 (or boolean) indicator matrices ``(n, n_labels)``; relevant = the
  two items share at least one label. An item with no label is relevant to nothing.
* **neighbours** — a query's first ``k`` ground-truth database ids (Recall K@N); relevant = in
  that list (each distinct id once).

For speed the database is partitioned into *classes* of items that every query treats alike (the
distinct labels, or label sets): a query's relevant items are a union of classes
(:meth:`Relevance.class_relevance`), so the engine sorts the database by class once and needs no
per-item lookup. The neighbour kind is sparse and gives its ids directly.
"""

from __future__ import annotations

import copy

import numpy as np

from sgh.codes import as_words
from sgh.errors import check_int


class Relevance:
    """Relevance of ``n_queries`` queries to ``n_database`` database items (see module doc):
    ``kind`` ``"single"``, ``"multi"`` or ``"neighbours"``; the classes (none for neighbours)."""

    kind: str = ""
    database_classes: np.ndarray | None = None
    n_classes: int = 0

    def __init__(self, n_queries: int, n_database: int) -> None:
        self.n_queries, self.n_database = int(n_queries), int(n_database)

    def class_relevance(self, queries: slice) -> np.ndarray:
        """``(b, n_classes)`` bool: which classes are relevant to each query of the slice."""
        raise NotImplementedError

    def shard(self, start: int, stop: int) -> Relevance:
        """The same relevance for database items ``start..stop - 1`` only, as items 0.. of a
        database shard."""
        shard = copy.copy(self)
        shard.n_database = stop - start
        shard.database_classes = self.database_classes[start:stop]
        return shard


class SingleLabelRelevance(Relevance):
    kind = "single"

    def __init__(self, query_ids: np.ndarray, database_ids: np.ndarray, n_classes: int) -> None:
        super().__init__(query_ids.size, database_ids.size)
        # The smallest unsigned dtype: the per-tile comparison streams 1 byte per item.
        compact = np.min_scalar_type(max(n_classes - 1, 0))
        self.query_classes = query_ids.astype(compact)
        self.database_classes = database_ids.astype(compact)
        self.n_classes = n_classes

    def class_relevance(self, queries: slice) -> np.ndarray:
        return self.query_classes[queries, None] == np.arange(self.n_classes)[None, :]


class MultiLabelRelevance(Relevance):
    kind = "multi"

    def __init__(self, query_words: np.ndarray, database_words: np.ndarray) -> None:
        super().__init__(query_words.shape[0], database_words.shape[0])
        # Label sets packed into words: relevant <=> (query AND item) != 0 in some word.
        self.query_words, self.database_words = query_words, database_words
        if database_words.shape[1] == 1:  # <= 64 labels: 1-D class ids, far faster
            classes, inverse = distinct_values(database_words[:, 0])
            self.class_words = classes[:, None]
        else:
            self.class_words, inverse = np.unique(database_words, axis=0, return_inverse=True)
        self.database_classes = inverse.reshape(-1).astype(np.intp)
        self.n_classes = self.class_words.shape[0]

    def class_relevance(self, queries: slice) -> np.ndarray:
        shared = self.query_words[queries, None, :] & self.class_words[None, :, :]
        return np.any(shared != 0, axis=-1)


class NeighbourRelevance(Relevance):
    kind = "neighbours"

    def __init__(self, ids: np.ndarray, n_database: int) -> None:
        super().__init__(ids.shape[0], n_database)
        # Sorted rows with repeated ids masked out, so each distinct id counts once.
        self.ids = np.sort(ids, axis=1)
        self.distinct = np.ones(self.ids.shape, dtype=bool)
        self.distinct[:, 1:] = self.ids[:, 1:] != self.ids[:, :-1]

    def shard(self, start: int, stop: int) -> NeighbourRelevance:
        # Ids shifted to the shard (still sorted); those outside it are masked out of the counts
        # and match no item of the shard.
        shard = copy.copy(self)
        shard.n_database = stop - start
        shard.ids = self.ids - start
        shard.distinct = self.distinct & (shard.ids >= 0) & (shard.ids < stop - start)
        return shard


def distinct_values(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` for a 1-D array, inverse as intp; integers
    spanning at most max(65,536, 2 x size) values go through a presence table in O(n), no sort."""
    if np.issubdtype(values.dtype, np.integer) and values.size:
        low, high = int(values.min()), int(values.max())
        if high - low < max(1 << 16, 2 * values.size):
            # Offsets in the values' own width: the subtraction wraps, the unsigned view
            # undoes it (the true offset is < 2**bits), e.g. int8 127 - (-128) = 255.
            unsigned = np.dtype(f"u{values.dtype.itemsize}")
            low_value = values.dtype.type(low)
            offsets = (values - low_value).view(unsigned).astype(np.intp)
            present = np.zeros(high - low + 1, dtype=bool)
            present[offsets] = True
            index_of_offset = np.cumsum(present, dtype=np.intp) - 1
            classes = np.flatnonzero(present).astype(unsigned).view(values.dtype) + low_value
            return classes, index_of_offset[offsets]
    classes, inverse = np.unique(values, return_inverse=True)
    return classes, inverse.reshape(-1).astype(np.intp)


def _as_indicator(labels: np.ndarray, name: str) -> np.ndarray:
    if labels.dtype == np.bool_:
        return labels
    if not (np.issubdtype(labels.dtype, np.integer) or np.issubdtype(labels.dtype, np.floating)):
        raise ValueError(f"{name} is 2-D, so it must be a 0/1 label-indicator matrix (bool or "
                         f"numbers), got dtype {labels.dtype}")
    if not np.all((labels == 0) | (labels == 1)):
        bad = labels[(labels != 0) & (labels != 1)].flat[0].item()
        raise ValueError(f"{name} is 2-D, so it must be a 0/1 label-indicator matrix; found the "
                         f"value {bad!r} (pass 1-D class ids for single-label data)")
    return labels.astype(bool)


def label_relevance(query_labels: np.ndarray, database_labels: np.ndarray) -> Relevance:
    """Relevance from labels: 1-D single labels (same label) or 2-D 0/1 matrices (shared label),
    the same kind for both; a ValueError names the argument at fault."""
    query_labels, database_labels = np.asarray(query_labels), np.asarray(database_labels)
    for name, labels in (("query_labels", query_labels), ("database_labels", database_labels)):
        if labels.ndim not in (1, 2):
            raise ValueError(f"{name} must be 1-D class labels or a 2-D 0/1 label matrix, got "
                             f"shape {labels.shape}")
        if np.issubdtype(labels.dtype, np.floating) and np.isnan(labels).any():
            raise ValueError(f"{name} contains NaN; a NaN label is relevant to nothing defined")
    if query_labels.ndim != database_labels.ndim:
        raise ValueError(f"query_labels is {query_labels.ndim}-D but database_labels is "
                         f"{database_labels.ndim}-D; use 1-D class labels for both or 0/1 label "
                         "matrices for both")
    if query_labels.ndim == 1:
        # Ids shared by queries and database; a query label absent from the database gets a
        # class of size 0 (no relevant item).
        classes, ids = distinct_values(np.concatenate([query_labels, database_labels]))
        return SingleLabelRelevance(ids[: query_labels.size], ids[query_labels.size :],
                                    classes.size)
    if query_labels.shape[1] != database_labels.shape[1] or query_labels.shape[1] == 0:
        raise ValueError(f"query_labels has {query_labels.shape[1]} label columns but "
                         f"database_labels has {database_labels.shape[1]}; both need the same "
                         "(>= 1) label columns")
    query_bits = _as_indicator(query_labels, "query_labels")
    database_bits = _as_indicator(database_labels, "database_labels")
    return MultiLabelRelevance(as_words(np.packbits(query_bits, axis=1)),
                               as_words(np.packbits(database_bits, axis=1)))


def neighbour_relevance(groundtruth: np.ndarray, k: int, n_queries: int,
                        n_database: int) -> Relevance:
    """Relevance = among a query's first ``k`` ground-truth ids (each distinct id once), from
    ``(n_queries, >= k)`` integer database ids, nearest first."""
    groundtruth = np.asarray(groundtruth)
    check_int("k", k, 1)
    if (groundtruth.ndim != 2 or groundtruth.shape[0] != n_queries or groundtruth.shape[1] < k
            or not np.issubdtype(groundtruth.dtype, np.integer)):
        raise ValueError(f"groundtruth must be an integer array of shape ({n_queries}, >= k={k}), "
                         f"got dtype {groundtruth.dtype} and shape {groundtruth.shape}")
    ids = groundtruth[:, :k].astype(np.intp)
    if ids.size and (ids.min() < 0 or ids.max() >= n_database):
        raise ValueError(f"groundtruth ids must be database indices in [0, {n_database}), found "
                         f"{ids.min()}..{ids.max()}")
    return NeighbourRelevance(ids, n_database)
