"""Fitting a classic baseline (LSH, PCAH, ITQ, SH, SpH) in the same pipeline as SGH.

The estimator is fitted on the training set and encodes database and queries; the run directory
gets the same `codes.npz` and `metrics.json` as an SGH run, so every tool downstream treats all
methods alike.
"""

from __future__ import annotations

import time

import numpy as np

from sgh.baselines import BASELINES
from sgh.config import Config
from sgh.data import RetrievalSplit
from sgh.sgh_training import EncodedSplit


def fit_baseline(config: Config, split: RetrievalSplit) -> EncodedSplit:
    estimator = BASELINES[config.model.name](n_bits=config.model.bits,
                                             random_state=config.trainer.seed)
    started = time.perf_counter()
    estimator.fit(split.train)
    train_seconds = time.perf_counter() - started
    return EncodedSplit(
        database=np.packbits(estimator.transform(split.database), axis=1),
        query=np.packbits(estimator.transform(split.query), axis=1),
        fields={"train_seconds": train_seconds, "estimator_params": {
            key: value for key, value in estimator.get_params().items()
            if isinstance(value, (int, float, str, bool)) or value is None}},
    )
