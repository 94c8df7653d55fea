"""What an index accepts as features: float32 rows as the model saw them, checked against what
its run recorded, at every entry point of `SGHIndex` (encode, add, train, search); and the
refusal of a search whose distances overflow float32."""

from __future__ import annotations

import numpy as np

from sgh.data.feature_conversion import UINT8_CONVERSION, refuse_outside_unit_range
from sgh.data.similarity import unit_normalised
from sgh.scores.asymmetric import check_queries


def served_features(x: np.ndarray, scores, name: str = "x") -> np.ndarray:
    """float32 features ``x`` (the argument ``name``) as the model saw them, checked against
    what its run recorded, for every entry point: float, of its dimension, finite as
    float32, on its training features' scale (`refuse_outside_unit_range`, the rule
    sgh-index applies to files), unit-normalised for an angular model."""
    x = np.asarray(x)
    conversion = scores.feature_conversion
    uint8 = conversion in (None, UINT8_CONVERSION)
    how = ("convert them first, e.g. x.astype(np.float32) / 255" if uint8 else
           "convert them first, e.g. x.astype(np.float32)")
    if x.dtype.kind in "iub":
        trained = ("sgh-train divides uint8 features by 255" if uint8 else f"its training "
                   f"features were converted as '{conversion}'")
        raise ValueError(f"features of dtype {x.dtype}: SGHIndex takes float features as "
                         f"the model saw them ({trained}); {how}")
    x = np.ascontiguousarray(check_queries(x, scores.scores["encoder"].dim, name), np.float32)
    refuse_outside_unit_range(x, conversion, name, "the model", f"{how} (the run recorded "
                              f"its features' conversion, '{conversion}')")
    if scores.similarity == "angular":
        x = unit_normalised(x, "the features (angular: divided by their length)")
    return x


def refuse_overflow(D: np.ndarray, found: np.ndarray) -> None:
    """A found item's distance beyond float32 (inf, every one alike): features far off scale.
    The per-bit scores refuse it in their weights (`AsymmetricScore.bit_weights`)."""
    if not np.isfinite(D).all() and not np.isfinite(D[found]).all():
        row = int(np.argmax(~np.isfinite(np.where(found, D, 0)).all(axis=1)))
        raise ValueError(f"queries row {row}: its scores overflow float32 (features far beyond "
                         "the scale the model was trained on); scale them as its training "
                         "features were")
