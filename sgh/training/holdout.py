"""Model selection's validation split, carved from the training set (not the protocol
`dataset.split=validation`): held-out training queries against a fixed sample of the others, so
the test queries are never looked at before the end. The metric (`validation.metric`), by its
test-time definition: Recall K@100 (tie-aware, K = `eval.recall_k`), the same recall of the
encoder score's ranking (`encoder_recall`), or mAP@all (tie-aware) for labelled data.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from sgh.config import (
    RECALL_CUTOFF,
    ValidationConfig,
    refuse_a_validation_database_within_the_cutoff,
)
from sgh.data import RetrievalSplit
from sgh.data.neighbours import exact_neighbours
from sgh.data.similarity import NEIGHBOUR_LABELS
from sgh.data.streamed_features import Features, take_rows, without_rows
from sgh.errors import UserInputError
from sgh.metrics import mean_average_precision, recall_at_n
from sgh.metrics.neighbour_recall import recall_of_results
from sgh.scores.asymmetric import AsymmetricScore
from sgh.scores.asymmetric_index import AsymmetricIndex

logger = logging.getLogger(__name__)

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
    by_encoder: bool = False  # rank by the encoder's score of the query features, not Hamming

    def score(self, query_codes: np.ndarray, database_codes: np.ndarray, bits: int,
              encoder: AsymmetricScore | None = None) -> float:
        """The metric of these codes; ``encoder``: the current encoder's score (`by_encoder`)."""
        if self.groundtruth is None:
            return mean_average_precision(query_codes, database_codes, bits, self.query_labels,
                                          self.database_labels)["map"]
        if self.by_encoder:
            found = AsymmetricIndex(encoder, database_codes).search(self.query, RECALL_CUTOFF)[1]
            return recall_of_results(found, self.groundtruth, self.k)  # ties by id
        return recall_at_n(query_codes, database_codes, bits, self.groundtruth, RECALL_CUTOFF,
                           k=self.k)[RECALL_CUTOFF]


# Up to this many training items the draws are permutations of all of them (every run's split so
# far: changing the limit changes their validation splits); beyond, samplers whose memory does
# not grow with the training set. Streamed and in-memory runs both draw here.
PERMUTATION_LIMIT = 10_000_000


def _draw(n: int, n_queries: int, n_database: int) -> tuple[np.ndarray, np.ndarray]:
    """(held-out query ids, sorted validation-database ids) among n training items."""
    query_rng, database_rng = map(np.random.default_rng, (_QUERY_SEED, _DATABASE_SEED))
    if n <= PERMUTATION_LIMIT:
        held_out = query_rng.permutation(n)[:n_queries]
        kept = np.setdiff1d(np.arange(n), held_out)  # sorted: training order is unchanged
        return held_out, np.sort(database_rng.permutation(kept)[:n_database])
    held_out = query_rng.choice(n, n_queries, replace=False)
    # Positions among the kept items, then their ids: each held-out id shifts the later ones.
    positions = np.sort(database_rng.choice(n - n_queries, min(n_database, n - n_queries),
                                            replace=False))
    hidden = np.sort(held_out)
    return held_out, positions + np.searchsorted(hidden - np.arange(n_queries), positions,
                                                 side="right")


def split_training_labels(split: RetrievalSplit) -> np.ndarray | None:
    """The labels of the split's training items (the database's head), or None."""
    return split.database_labels[: len(split.train)] if split.has_labels else None


def carve(train: Features, config: ValidationConfig, recall_k: int,
          labels: np.ndarray | None = None, name: str = "the training set",
          similarity: str = "euclidean") -> tuple[Features, ValidationSet]:
    """Split `train` into (training items, validation set); a streamed one stays on disk."""
    n_queries = min(config.queries, len(train) // MAX_HELD_OUT_SHARE)
    if n_queries < 1:
        raise UserInputError(
            f"{name} has {len(train)} training items, too few to hold out validation "
            f"queries (at most 1 in {MAX_HELD_OUT_SHARE}); train without validation: "
            "validation.every=0")
    held_out, sample = _draw(len(train), n_queries, config.database)
    query, database = take_rows(train, held_out), take_rows(train, sample)
    metric = config.metric
    if metric == "map" and labels is None:
        raise UserInputError(f"validation.metric=map needs labels, and {name} has none; "
                             "accepted here: recall")
    size = f"{len(held_out)} held-out training queries vs {len(sample)} training items"
    if metric == "map":
        validation = ValidationSet(
            metric="map", query=query, database=database,
            query_labels=labels[held_out], database_labels=labels[sample],
            convention=f"validation mAP@all, tie-aware, relevant = same label; {size}")
    else:
        if recall_k > len(sample):  # a smaller K would select on another metric than asked
            raise UserInputError(
                f"eval.recall_k={recall_k} is more than the {len(sample)} validation database "
                f"items of {name}; accepted: eval.recall_k <= {len(sample)}, or "
                "validation.metric=map, or validation.every=0")
        refuse_a_validation_database_within_the_cutoff(config.database, recall_k)
        if len(sample) <= RECALL_CUTOFF:
            logger.warning(
                "%s leaves %d items for the validation database, not more than the recall "
                "cut-off %d: every validation Recall%d@%d is 1.0, so the model selection keeps "
                "the first validated weights; validation.every=0 keeps the last step's instead",
                name, len(sample), RECALL_CUTOFF, recall_k, RECALL_CUTOFF)
        by_encoder = metric == "encoder_recall"
        ranking = ("the encoder score's ranking of the query features, ties by id" if by_encoder
                   else "tie-aware")
        validation = ValidationSet(
            metric=f"{'encoder_' if by_encoder else ''}recall{recall_k}@{RECALL_CUTOFF}",
            query=query, database=database, k=recall_k, by_encoder=by_encoder,
            groundtruth=exact_neighbours(query, database, recall_k, similarity),
            convention=(f"validation Recall{recall_k}@{RECALL_CUTOFF}, {ranking}, exact "
                        f"{NEIGHBOUR_LABELS[similarity]} neighbours; {size}"))
    return without_rows(train, held_out), validation
