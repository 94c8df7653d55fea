"""Fitting a classic baseline (LSH, PCAH, ITQ, SH, SpH) in the same pipeline as SGH.

The estimator is fitted on the training set and encodes database and queries; the run directory
gets the same `codes.npz` and `metrics.json` as an SGH run, so every tool downstream treats all
methods alike. The baselines are closed-form fits (PCA, rotations) of the whole training set, so
a streamed training set is read into memory for them; a streamed database is encoded chunk by
chunk.
"""

from __future__ import annotations

import time

import numpy as np

from sgh.baselines import BASELINES
from sgh.config import Config
from sgh.data import RetrievalSplit
from sgh.data.streamed_features import StreamedFeatures, iter_chunks
from sgh.sgh_training import EncodedSplit


def fit_baseline(config: Config, split: RetrievalSplit) -> EncodedSplit:
    estimator = BASELINES[config.model.name](n_bits=config.model.bits,
                                             random_state=config.trainer.seed)
    started = time.perf_counter()
    train = split.train
    estimator.fit(train.load() if isinstance(train, StreamedFeatures) else train)
    train_seconds = time.perf_counter() - started
    database = np.concatenate([np.packbits(estimator.transform(rows), axis=1)
                               for _, rows in iter_chunks(split.database)])
    return EncodedSplit(
        database=database,
        query=np.packbits(estimator.transform(split.query), axis=1),
        fields={"train_seconds": train_seconds, "estimator_params": {
            key: value for key, value in estimator.get_params().items()
            if isinstance(value, (int, float, str, bool)) or value is None}},
    )
