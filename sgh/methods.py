"""The hashing methods `sgh-train` knows: the one registry of their names, titles and fitting.

    model=sgh                     Stochastic Generative Hashing, trained by `sgh.training`
    model=lsh|pcah|itq|sh|sph     the classic baselines of `sgh.baselines`, fitted in closed form

Every list of methods (the accepted `model.name` values, the order of tables and plot legends,
the titles of results) is read from `METHODS`, and so is how a method is fitted (TensorFlow or a
closed form): the stages ask the method, never its name. What a hasher can do (a bit limit, an
asymmetric score) its class says (`sgh.hasher.BinaryHasher`), as scikit-learn's tags do. Each
method turns a split into an `EncodedSplit`: packed codes of the database and the queries, and
what it reports about its own fitting (`sgh.pipeline` calls the trainer or the baseline fit).
This module imports nothing of the package, so that every stage may read it.
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
    """A method's name and title, and how it is fitted: the stages ask it, never its name."""

    name: str  # the model= option and model.name
    title: str  # how tables and plots name it
    # The class name in `sgh.baselines` for a baseline (`sgh.baselines.fitting.baseline_class`
    # gives the class); None for SGH, which `sgh.training` trains.
    baseline_class: str | None = None
    # Trained with TensorFlow (devices, checkpoints, an exported encoder, the SGH settings of
    # model=sgh), rather than fitted in closed form.
    uses_tensorflow: bool = False


# In the order of every table and legend: SGH first, then the baselines as the docs list them.
METHODS: dict[str, Method] = {method.name: method for method in (
    Method("sgh", "SGH", uses_tensorflow=True),
    Method("lsh", "LSH", baseline_class="LSH"),
    Method("pcah", "PCAH", baseline_class="PCAH"),
    Method("itq", "ITQ", baseline_class="ITQ"),
    Method("sh", "SH", baseline_class="SH"),
    Method("sph", "SpH", baseline_class="SpH"),
)}
BASELINE_NAMES = tuple(name for name, method in METHODS.items()
                       if method.baseline_class is not None)
