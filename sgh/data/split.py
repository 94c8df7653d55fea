"""The retrieval split every method trains and is scored on, and the protocols that make it.

Protocols (docs/guide/data.md):
- labelled files (`X_train, y_train, X_test, y_test`), query_selection=random (protocol A):
  queries = the first min(n_queries, n_test) of `default_rng(0).permutation(n_test)`;
  database = all of X_train, then the remaining test items in their original order;
  training set = X_train.
- labelled, query_selection=per_class (protocol B): `rng = default_rng(0)`; for each class c in
  increasing order, `rng.permutation(nonzero(y_test == c))[:n_queries // n_classes]`.
- ANN files (`base, query[, groundtruth, learn]`, protocol C): database = base, queries = query,
  training set = learn if present else base, ground truth = the file's if present. An
  ann-benchmarks HDF5 file is the same with base = `train`, query = `test`, ground truth =
  `neighbors` (`sgh/data/ann_benchmarks.py`).
- pooled labelled files (`X, y`): queries = the first n_queries of `default_rng(0).permutation(n)`,
  database = the rest in order, training set = the database.
- split=validation: model selection never looks at the queries. A sixth of the training set is
  held out (`default_rng(1).permutation(n_train)[:n_train // 6]`); the queries are the first
  n_queries of it, the database is the other training items followed by the remaining held-out
  items, and training uses the other training items only (see `training_set_split`; not the
  validation set that model selection holds out, `sgh/training/holdout.py`).

Every split carries its similarity (`sgh/data/similarity.py`), resolved from `dataset.similarity`
and the file: the features are already normalised for it (angular), and the ground truth,
validation and search use it.
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


def _queries_and_rest(n: int, query_ids: np.ndarray):
    rest = np.ones(n, dtype=bool)
    rest[query_ids] = False
    return query_ids, np.nonzero(rest)[0]


def random_query_ids(n: int, n_queries: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).permutation(n)[: min(n_queries, n)]


def per_class_query_ids(labels: np.ndarray, n_queries: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    classes = np.unique(labels)
    per_class = max(1, n_queries // len(classes))
    return np.concatenate([rng.permutation(np.nonzero(labels == c)[0])[:per_class]
                           for c in classes])


def labelled_split(name, x_train, y_train, x_test, y_test, query_selection, n_queries,
                   conversion, similarity: str = "euclidean") -> RetrievalSplit:
    if query_selection == "per_class":
        ids = per_class_query_ids(y_test, n_queries)
        rule = f"protocol B: {len(ids)} test queries, per class, rng(0)"
    else:
        ids = random_query_ids(len(x_test), n_queries)
        rule = f"protocol A: {len(ids)} test queries = rng(0).permutation(n_test)[:{len(ids)}]"
    query_ids, rest = _queries_and_rest(len(x_test), ids)
    database = np.concatenate([x_train, x_test[rest]],
                              out=aligned_empty((len(x_train) + len(rest), x_train.shape[1]),
                                                x_train.dtype))
    return RetrievalSplit(
        name=name,
        protocol=rule + "; database = train + remaining test; training set = train",
        # The database's head, not a second copy of it (MNIST: 188 MB less), and aligned for
        # training to adopt as it is (sgh.data.aligned); no stage writes into a split's arrays.
        train=database[:len(x_train)],
        database=database,
        query=x_test[query_ids],
        database_labels=np.concatenate([y_train, y_test[rest]]),
        query_labels=y_test[query_ids],
        feature_conversion=conversion,
        similarity=similarity,
    )


def pooled_split(name, x, y, n_queries, conversion,
                 similarity: str = "euclidean") -> RetrievalSplit:
    query_ids, rest = _queries_and_rest(len(x), random_query_ids(len(x), n_queries))
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
    train = base if learn is None else learn
    return RetrievalSplit(
        name=name,
        protocol=("protocol C: database = base, queries = query, training set = "
                  + ("base" if learn is None else "learn")),
        train=train, database=base, query=query, groundtruth=groundtruth,
        feature_conversion=conversion, similarity=similarity,
    )


def training_set_split(split: RetrievalSplit, n_queries: int) -> RetrievalSplit:
    """Mirror the test protocol inside the training set, so model selection never sees the queries.

    A sixth of the training set (MNIST: 10,000 of 60,000, the size of its test split) is held out
    as unseen data, as a test split is: the queries are the first min(n_queries, held out) of it,
    the database is the rest of the training set followed by the remaining held-out items, and
    the model trains on the rest of the training set only. Queries and part of the database are
    then unseen by training, exactly as in protocols A and B.
    """
    train = split.train
    labels = None
    if split.has_labels:
        # The training set is the head of the database in the labelled layouts.
        labels = split.database_labels[: len(train)]
    held_out, kept = _queries_and_rest(
        len(train), np.random.default_rng(1).permutation(len(train))[: len(train) // 6])
    query_ids = held_out[: min(n_queries, len(held_out))]
    unseen_database_ids = held_out[len(query_ids):]
    unseen_database_ids.sort()
    database_ids = np.concatenate([kept, unseen_database_ids])
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
