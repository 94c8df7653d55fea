"""The retrieval split every method trains and is scored on, and the protocols that make it
(docs/guide/data.md; each split's `protocol` line states its own).

Every split carries its resolved similarity (`sgh/data/similarity.py`): its features are
already normalised for it, and the ground truth, validation and search use it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from sgh.data.aligned import aligned_empty, aligned_rows


@dataclass(frozen=True)
class RetrievalSplit:
    name: str
    protocol: str  # one line saying how the split was made (goes into metrics.json)
    train: np.ndarray  # (n_train, d) float32
    database: np.ndarray  # (n_database, d) float32
    query: np.ndarray  # (n_query, d) float32
    database_labels: np.ndarray | None = None  # (n_database,) int
    query_labels: np.ndarray | None = None  # (n_query,) int
    groundtruth: np.ndarray | None = None  # (n_query, K) neighbour ids into database
    feature_conversion: str = "float32 as stored"
    # euclidean | angular | inner_product (never "auto": resolved when the split is loaded)
    similarity: str = "euclidean"

    @property
    def has_labels(self) -> bool:
        return self.database_labels is not None


def random_query_ids(n: int, n_queries: int) -> np.ndarray:
    return np.random.default_rng(0).permutation(n)[: min(n_queries, n)]


def labelled_split(name, x_train, y_train, x_test, y_test, query_selection, n_queries,
                   conversion, similarity: str = "euclidean") -> RetrievalSplit:
    if query_selection == "per_class":
        rng = np.random.default_rng(0)
        classes = np.unique(y_test)
        per_class = max(1, n_queries // len(classes))
        ids = np.concatenate([rng.permutation(np.nonzero(y_test == c)[0])[:per_class]
                              for c in classes])
        rule = f"protocol B: {len(ids)} test queries, per class, rng(0)"
    else:
        ids = random_query_ids(len(x_test), n_queries)
        rule = f"protocol A: {len(ids)} test queries = rng(0).permutation(n_test)[:{len(ids)}]"
    rest = np.setdiff1d(np.arange(len(x_test)), ids)
    database = np.concatenate([x_train, x_test[rest]],
                              out=aligned_empty((len(x_train) + len(rest), x_train.shape[1]),
                                                x_train.dtype))
    return RetrievalSplit(
        name=name, protocol=rule + "; database = train, then the remaining test items in index "
                                    "order; training set = train",
        # The database's head, not a second copy, aligned for training to adopt as it is
        # (sgh.data.aligned); no stage writes into a split's arrays.
        train=database[:len(x_train)], database=database, query=x_test[ids],
        database_labels=np.concatenate([y_train, y_test[rest]]), query_labels=y_test[ids],
        feature_conversion=conversion, similarity=similarity,
    )


def pooled_split(name, x, y, n_queries, conversion,
                 similarity: str = "euclidean") -> RetrievalSplit:
    query_ids = random_query_ids(len(x), n_queries)
    rest = np.setdiff1d(np.arange(len(x)), query_ids)
    database = aligned_rows(x, rest)  # one copy, which is also the training set
    return RetrievalSplit(
        name=name,
        protocol=(f"pooled: {len(query_ids)} queries = rng(0).permutation(n)[:{len(query_ids)}]; "
                  "database = training set = the rest"),
        train=database, database=database, query=x[query_ids],
        database_labels=y[rest], query_labels=y[query_ids], feature_conversion=conversion,
        similarity=similarity,
    )


def ann_split(name, base, query, groundtruth, learn, conversion,
              similarity: str = "euclidean") -> RetrievalSplit:
    return RetrievalSplit(
        name=name,
        protocol=("protocol C: database = base, queries = query, training set = "
                  + ("base" if learn is None else "learn")),
        train=base if learn is None else learn, database=base, query=query, groundtruth=groundtruth,
        feature_conversion=conversion, similarity=similarity,
    )


def training_set_split(split: RetrievalSplit, n_queries: int) -> RetrievalSplit:
    """Mirror the test protocol inside the training set, so model selection never sees the queries
    (`dataset.split=validation`; not the validation set of `sgh/training/holdout.py`)."""
    train = split.train
    # The training set is the head of the database in the labelled layouts.
    labels = split.database_labels[: len(train)] if split.has_labels else None
    held_out = np.random.default_rng(1).permutation(len(train))[: len(train) // 6]
    kept = np.setdiff1d(np.arange(len(train)), held_out)
    query_ids = held_out[: min(n_queries, len(held_out))]
    database_ids = np.concatenate([kept, np.sort(held_out[len(query_ids):])])
    return replace(
        split,
        protocol=(f"validation: {len(held_out)} training items held out = "
                  f"rng(1).permutation(n_train)[:n_train // 6]; {len(query_ids)} queries = the "
                  "first of them; database = the other training items, then the remaining "
                  "held-out items in order; training set = the other training items"),
        train=aligned_rows(train, kept), database=train[database_ids], query=train[query_ids],
        database_labels=None if labels is None else labels[database_ids],
        query_labels=None if labels is None else labels[query_ids],
        groundtruth=None,
    )
