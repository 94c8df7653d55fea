"""The hashing methods `sgh-train` knows: the one registry of their names, titles and fitting.

SGH (`model=sgh`), trained by `sgh.training`, and the baselines of `sgh.baselines` (`model=lsh`,
`pcah`, `itq`, `sh`, `sph`), fitted in closed form. The stages ask the method, never its name;
this module imports nothing of the package, so that every stage may read it.
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
    scores: object | None = None  # its asymmetric scores (sgh.scores.score_set.ScoreSet), or None
    without_scores: str = ""  # ...and why


@dataclass(frozen=True)
class Method:
    """A method's name and title, and how it is fitted."""

    name: str  # the model= option and model.name
    title: str  # how tables and plots name it
    baseline_class: str | None = None  # its class in `sgh.baselines`; None for SGH
    uses_tensorflow: bool = False  # trained with TensorFlow rather than fitted in closed form


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
