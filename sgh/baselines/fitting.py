"""Fitting a classic baseline (LSH, PCAH, ITQ, SH, SpH) in the same pipeline as SGH.

The hasher is fitted on the training set and encodes database and queries; the run directory
gets the same `codes.npz` and `metrics.json` as an SGH run, so every tool downstream treats all
methods alike. The baselines are closed-form fits (PCA, rotations) of the whole training set, so
a streamed training set is read into memory for them; a streamed database is encoded chunk by
chunk.
"""

from __future__ import annotations

import time

import numpy as np

from sgh import baselines
from sgh.codes import pack_bits
from sgh.config import Config
from sgh.data import RetrievalSplit
from sgh.data.streamed_features import StreamedFeatures, iter_chunks
from sgh.methods import METHODS, EncodedSplit
from sgh.search.score_set import ScoreSet


def baseline_class(name: str) -> type:
    """The scikit-learn class in `sgh.baselines` of the baseline `name`
    (`sgh.methods.METHODS[name].baseline_class`)."""
    method = METHODS[name]
    if method.baseline_class is None:
        raise ValueError(f"{name} is not a scikit-learn baseline")
    return getattr(baselines, method.baseline_class)


def fit_baseline(config: Config, split: RetrievalSplit) -> EncodedSplit:
    """Fit the configured baseline on the training set; encode database and queries."""
    hasher = baseline_class(config.model.name)(n_bits=config.model.bits,
                                               random_state=config.trainer.seed)
    started = time.perf_counter()
    train = split.train
    hasher.fit(train.load() if isinstance(train, StreamedFeatures) else train)
    train_seconds = time.perf_counter() - started
    database = np.concatenate([pack_bits(hasher.transform(rows))
                               for _, rows in iter_chunks(split.database)])
    try:
        score = hasher.asymmetric_score()
        scores, without_scores = ScoreSet.of_projection(score, config.model.name), ""
    except ValueError as reason:  # SH, SpH: no per-bit form
        scores, without_scores = None, str(reason)
    return EncodedSplit(
        database=database,
        query=pack_bits(hasher.transform(split.query)),
        scores=scores, without_scores=without_scores,
        fields={"train_seconds": train_seconds, "estimator_params": {
            key: value for key, value in hasher.get_params().items()
            if isinstance(value, (int, float, str, bool)) or value is None},
            **(scores.metrics_fields(config.eval.recall_k) if scores is not None else {})},
    )
