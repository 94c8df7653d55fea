"""The hashing methods `sgh-train` knows: the one registry of their names and titles.

    model=sgh                     Stochastic Generative Hashing, trained by `sgh.training`
    model=lsh|pcah|itq|sh|sph     the classic baselines of `sgh.baselines`, fitted in closed form

Every list of methods (the accepted `model.name` values, the order of tables and plot legends,
the titles of results) is read from `METHODS`. Each method turns a split into an `EncodedSplit`:
packed codes of the database and the queries, and what it reports about its own fitting
(`sgh.pipeline` calls the trainer or the baseline fit). This module imports nothing of the
package, so that every stage may read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class EncodedSplit:
    """A fitted method's codes for the split, and what it reports about its fitting."""

    database: np.ndarray  # (n_database, ceil(bits / 8)) packed uint8
    query: np.ndarray  # (n_query, ceil(bits / 8)) packed uint8
    fields: dict = field(default_factory=dict)  # method-specific keys of metrics.json
    # The method's asymmetric scores and the validated choice among them
    # (sgh.search.score_set.ScoreSet) for asymmetric and rescored rankings, or None with the
    # reason in `without_scores`.
    scores: object | None = None
    without_scores: str = ""


@dataclass(frozen=True)
class Method:
    name: str  # the model= option and model.name
    title: str  # how tables and plots name it
    # The class name in `sgh.baselines` for a baseline; None for SGH, which `sgh.training`
    # trains.
    estimator: str | None = None

    @property
    def is_trained(self) -> bool:
        """Trained with TensorFlow (devices, checkpoints, an exported encoder) vs closed form."""
        return self.estimator is None


# In the order of every table and legend: SGH first, then the baselines as the docs list them.
METHODS: dict[str, Method] = {method.name: method for method in (
    Method("sgh", "SGH"),
    Method("lsh", "LSH", "LSH"),
    Method("pcah", "PCAH", "PCAH"),
    Method("itq", "ITQ", "ITQ"),
    Method("sh", "SH", "SH"),
    Method("sph", "SpH", "SpH"),
)}
BASELINE_NAMES = tuple(name for name, method in METHODS.items() if not method.is_trained)
