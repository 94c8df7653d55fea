"""Model selection during training: a validation split carved from the training set.

The test queries are never looked at before the end. Instead `carve` holds out
`validation.queries` training items (at most a tenth of them; never trained on) as validation
queries, and ranks them against a fixed sample of `validation.database` of the remaining
training items. At every validation point the model encodes both afresh (codes of the current
weights, not stale ones) and the score decides which weights are kept as the best.

The metric (`validation.metric`): Recall K@100 (tie-aware) against the exact Euclidean K
nearest validation-database items, K = `eval.recall_k` — the paper's task, and what SGH's
reconstruction objective serves — or mAP@all (tie-aware, same label = relevant) for labelled
data. Both are the test-time definitions; recall values run higher than on the test protocol
because the validation database is smaller (10,000 items instead of MNIST's 69,000, so the top
100 is a larger share of it). Selecting by label mAP on MNIST keeps earlier weights that lose
Euclidean recall (64 bits: test Recall10@100 0.797 instead of 0.852).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sgh.config import ValidationConfig
from sgh.data import RetrievalSplit
from sgh.errors import UserInputError
from sgh.metrics import mean_average_precision, recall_at_n
from sgh.neighbours import euclidean_neighbours

# The rank cut-off of the recall metric: the paper's headline Recall10@100.
RECALL_CUTOFF = 100
# Validation never takes more than a tenth of the training set, whatever validation.queries says.
MAX_HELD_OUT_SHARE = 10
# Seeds of the held-out draw: fixed, so the validation split does not move with trainer.seed.
_QUERY_SEED, _DATABASE_SEED = 2, 3


@dataclass(frozen=True)
class ValidationSet:
    metric: str  # the key the score is reported under, e.g. "map" or "recall10@100"
    convention: str  # one line: what the number is
    query: np.ndarray
    database: np.ndarray
    query_labels: np.ndarray | None = None
    database_labels: np.ndarray | None = None
    groundtruth: np.ndarray | None = None
    k: int = 10

    def score(self, query_codes: np.ndarray, database_codes: np.ndarray, bits: int) -> float:
        if self.groundtruth is None:
            return mean_average_precision(query_codes, database_codes, bits, self.query_labels,
                                          self.database_labels)["map"]
        return recall_at_n(query_codes, database_codes, bits, self.groundtruth, RECALL_CUTOFF,
                           k=self.k)[RECALL_CUTOFF]


def carve(split: RetrievalSplit, config: ValidationConfig,
          recall_k: int) -> tuple[np.ndarray, ValidationSet]:
    """Split the training set into (training items, validation set); see the module doc."""
    train = split.train
    n_queries = min(config.queries, len(train) // MAX_HELD_OUT_SHARE)
    if n_queries < 1:
        raise UserInputError(
            f"{split.name!r} has {len(train)} training items, too few to hold out validation "
            f"queries (at most 1 in {MAX_HELD_OUT_SHARE}); train without validation: "
            "validation.every=0")
    held_out = np.random.default_rng(_QUERY_SEED).permutation(len(train))[:n_queries]
    kept = np.setdiff1d(np.arange(len(train)), held_out)  # sorted: training order is unchanged
    sample = np.sort(np.random.default_rng(_DATABASE_SEED).permutation(kept)[: config.database])
    metric = config.metric
    if metric == "map" and not split.has_labels:
        raise UserInputError(f"validation.metric=map needs labels, and {split.name!r} has none; "
                             "accepted here: recall")
    size = f"{len(held_out)} held-out training queries vs {len(sample)} training items"
    if metric == "map":
        # The training set is the head of the database in every labelled layout.
        labels = split.database_labels[: len(train)]
        validation = ValidationSet(
            metric="map", query=train[held_out], database=train[sample],
            query_labels=labels[held_out], database_labels=labels[sample],
            convention=f"validation mAP@all, tie-aware, relevant = same label; {size}")
    else:
        k = min(recall_k, len(sample))
        validation = ValidationSet(
            metric=f"recall{k}@{RECALL_CUTOFF}", query=train[held_out], database=train[sample],
            groundtruth=euclidean_neighbours(train[held_out], train[sample], k), k=k,
            convention=(f"validation Recall{k}@{RECALL_CUTOFF}, tie-aware, exact Euclidean "
                        f"neighbours; {size}"))
    return train[kept], validation
