"""Vectors read from a file, converted to the scale the model's training features had.

As at training (`as_float32_features`: uint8 / 255, others as they are), so input stored unlike
the training features would land 255 times off, silently: uint8 input for a model of other
features is refused unless ``input_scale`` states the scale, ``none`` (as stored) or ``uint8``
(divided by 255). Whatever it states, the values must agree with it and with the run's record:
``uint8`` means whole numbers 0..255, and a model that saw uint8 / 255 takes features in [0, 1]
only (`refuse_outside_unit_range`, the rule `SGHIndex` applies in Python too). ``training``
below: ``(conversion, where it is recorded, input_scale)``, e.g. ``("uint8 / 255", "run=RUN",
"auto")``, or None (the run recorded no conversion: nothing to compare).
"""

from __future__ import annotations

import numpy as np

from sgh.data.feature_conversion import (
    UINT8_CONVERSION,
    as_float32_features,
    refuse_outside_unit_range,
)
from sgh.errors import UserInputError


def training_scale(conversion: str | None, input_scale: str,
                   where: str) -> tuple[str, str, str] | None:
    """``training`` for the checks below: None where the run recorded no conversion."""
    return None if conversion is None else (conversion, where, input_scale)


def refuse_another_scale(vectors, training: tuple[str, str, str] | None) -> None:
    """uint8 input for a model trained on features of another dtype, its scale unstated."""
    if training is not None and training[2] == "auto" and vectors.dtype == np.uint8 \
            and training[0] != UINT8_CONVERSION:
        raise UserInputError(
            f"{vectors.where} is uint8 (converted as '{UINT8_CONVERSION}') but {training[1]} was "
            f"trained on features converted as '{training[0]}'; accepted: input_scale=none to "
            "take its values as they are (uint8 0..255 against features on the same scale, "
            "e.g. BIGANN .bvecs through a SIFT .fvecs run), or the input stored as the training "
            "features' dtype")


def needs_unit_range(training, stored) -> bool:
    """Whether converted rows may fall outside [0, 1] where the model saw uint8 / 255: all but
    uint8 input divided by 255."""
    return training is not None and training[0] == UINT8_CONVERSION and not (
        stored == np.uint8 and training[2] != "none")


def refuse_unscaled_rows(features: np.ndarray, stored, training, where: str,
                         first_row: int) -> None:
    """Converted rows beyond [0, 1] for a model trained on uint8 / 255 (raw pixels)."""
    if needs_unit_range(training, stored):
        advice = ("accepted: input_scale=uint8 to divide it by 255, or the input stored as uint8"
                  if training[2] == "auto" else
                  f"input_scale={training[2]} takes them as they are; accepted: input_scale=uint8 "
                  "to divide them by 255, or input within [0, 1]")
        refuse_outside_unit_range(features, training[0], where, training[1], advice, first_row)


def scaled(rows: np.ndarray, vectors, first_row: int, input_scale: str):
    """`rows` as float32 model input, and how they were converted (`input_scale`)."""
    if input_scale == "none" and rows.dtype == np.uint8:  # integers: no NaN/Inf to find
        return rows.astype(np.float32), "uint8 as stored (input_scale=none)"
    features, conversion = as_float32_features(rows, vectors.path, vectors.key, first_row)
    if input_scale == "uint8" and rows.dtype != np.uint8:
        # What uint8 holds, or the statement is wrong (values already divided, or not pixels).
        levels = (features >= 0) & (features <= 255) & (features == np.round(features))
        if not levels.all():
            row, column = np.argwhere(~levels)[0]
            raise UserInputError(
                f"{vectors.where} holds {features[row, column]:g} at row {first_row + row}, "
                f"column {column}, but input_scale=uint8 says its values are uint8 levels "
                "(whole numbers 0..255, divided by 255 here); accepted: input_scale=auto or "
                "none for values already on the training features' scale")
        # A new array (float32 input may come back uncopied), divided as uint8's is.
        return features / np.float32(255), f"{conversion} / 255 (input_scale=uint8)"
    return features, conversion
