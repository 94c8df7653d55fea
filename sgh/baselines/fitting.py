"""Fitting a classic baseline (LSH, PCAH, ITQ, SH, SpH) in the same pipeline as SGH, which
writes the same `codes.npz` and `metrics.json` for it. The baselines fit the whole training set,
so a streamed one is read into memory; a streamed database is encoded chunk by chunk.
"""

from __future__ import annotations

import time

import numpy as np

from sgh import baselines
from sgh.config import Config
from sgh.data import RetrievalSplit
from sgh.data.streamed_features import StreamedFeatures, iter_chunks
from sgh.errors import UserInputError
from sgh.methods import METHODS, EncodedSplit
from sgh.scores.score_set import ScoreSet


def baseline_class(name: str) -> type:
    """The scikit-learn class in `sgh.baselines` of the baseline `name`."""
    method = METHODS[name]
    if method.baseline_class is None:
        raise ValueError(f"{name} is not a scikit-learn baseline")
    return getattr(baselines, method.baseline_class)


def refuse_more_bits_than_features(config: Config, n_features: int, dataset: str) -> None:
    """Before fitting, in the settings' words: PCAH and ITQ take at most `n_features` bits."""
    bits, name = config.model.bits, config.model.name
    if bits > n_features and baseline_class(name).bits_at_most_features:
        unlimited = ", ".join(other for other, method in METHODS.items()
                              if method.baseline_class is None
                              or not baseline_class(other).bits_at_most_features)
        raise UserInputError(
            f"model.bits={bits} is more than the {n_features} features of {dataset!r}, and "
            f"model={name} takes one bit per principal component; accepted: "
            f"model.bits <= {n_features}, or a method without that limit (model={unlimited})")


def fit_baseline(config: Config, split: RetrievalSplit) -> EncodedSplit:
    """Fit the configured baseline on the training set; encode database and queries."""
    hasher = baseline_class(config.model.name)(n_bits=config.model.bits,
                                               random_state=config.trainer.seed)
    started = time.perf_counter()
    train = split.train
    hasher.fit(train.load() if isinstance(train, StreamedFeatures) else train)
    train_seconds = time.perf_counter() - started
    database = np.concatenate([hasher.encode(rows) for _, rows in iter_chunks(split.database)])
    scores = (None if hasher.without_asymmetric  # SH, SpH: no per-bit form
              else ScoreSet.of_projection(hasher.asymmetric_score(), config.model.name))
    return EncodedSplit(
        database=database,
        query=hasher.encode(split.query),
        scores=scores, without_scores=hasher.without_asymmetric or "",
        fields={"train_seconds": train_seconds, "estimator_params": {
            key: value for key, value in hasher.get_params().items()
            if isinstance(value, (int, float, str, bool)) or value is None},
            **(scores.metrics_fields(config.eval.recall_k) if scores is not None else {})},
    )
