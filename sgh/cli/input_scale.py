"""Vectors read from a file, converted to the scale the model's training features had.

As at training (`as_float32_features`: uint8 / 255, others as they are), so input stored unlike
the training features would land 255 times off, silently: refused unless ``input_scale`` states
the scale, ``none`` (as stored) or ``uint8`` (divided by 255). ``training`` below: ``(conversion,
where it is recorded)``, e.g. ``("uint8 / 255", "run=RUN")``, or None (nothing is checked).
"""

from __future__ import annotations

import numpy as np

from sgh.data.feature_conversion import UINT8_CONVERSION, as_float32_features
from sgh.errors import UserInputError


def training_scale(conversion: str | None, input_scale: str,
                   where: str) -> tuple[str, str] | None:
    """``training`` for the checks below: None where ``input_scale`` states the scale or the run
    recorded no conversion (nothing to compare)."""
    return None if conversion is None or input_scale != "auto" else (conversion, where)


def refuse_another_scale(vectors, training: tuple[str, str] | None) -> None:
    """uint8 input for a model trained on features of another dtype."""
    if training is not None and vectors.dtype == np.uint8 and training[0] != UINT8_CONVERSION:
        raise UserInputError(
            f"{vectors.where} is uint8 (converted as '{UINT8_CONVERSION}') but {training[1]} was "
            f"trained on features converted as '{training[0]}'; accepted: input_scale=none to "
            "take its values as they are (uint8 0..255 against features on the same scale, "
            "e.g. BIGANN .bvecs through a SIFT .fvecs run), or the input stored as the training "
            "features' dtype")


def needs_unit_range(training: tuple[str, str] | None, stored) -> bool:
    """Whether float input must lie in [0, 1]: the model saw uint8 / 255, the file has no uint8."""
    return training is not None and training[0] == UINT8_CONVERSION and stored != np.uint8


def refuse_unscaled_rows(features: np.ndarray, stored, training, where: str,
                         first_row: int) -> None:
    """Float rows beyond [0, 1] for a model trained on uint8 / 255 (raw pixels)."""
    if not needs_unit_range(training, stored) or (
            features.size == 0 or (features.min() >= 0 and features.max() <= 1)):
        return  # min and max: a fraction of the cost of locating the first value outside
    outside = np.argwhere((features < 0) | (features > 1))
    if len(outside):
        row, column = outside[0]
        raise UserInputError(
            f"{where} has values outside [0, 1] (first at row {first_row + row}, column "
            f"{column}: {features[row, column]:g}) but {training[1]} was trained on uint8 "
            "features divided by 255; accepted: input_scale=uint8 to divide it by 255, or the "
            "input stored as uint8")


def scaled(rows: np.ndarray, vectors, first_row: int, input_scale: str):
    """`rows` as float32 model input, and how they were converted (`input_scale`)."""
    if input_scale == "none" and rows.dtype == np.uint8:  # integers: no NaN/Inf to find
        return rows.astype(np.float32), "uint8 as stored (input_scale=none)"
    features, conversion = as_float32_features(rows, vectors.path, vectors.key, first_row)
    if input_scale == "uint8" and rows.dtype != np.uint8:
        # A new array (float32 input may come back uncopied), divided as uint8's is.
        return features / np.float32(255), f"{conversion} / 255 (input_scale=uint8)"
    return features, conversion
