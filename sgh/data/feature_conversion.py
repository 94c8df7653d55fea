"""Features as float32: how the values a vector file stores become the features SGH trains on
(docs/guide/data.md, "Feature conversion and normalisation").
"""

from __future__ import annotations

import numpy as np

from sgh.data.vector_file import VectorFile, _check_numeric, _where
from sgh.errors import UserInputError

UINT8_CONVERSION = "uint8 / 255"
CHUNK_ROWS = 1 << 16


def read_float32(vectors: VectorFile, chunk_rows: int = CHUNK_ROWS) -> tuple[np.ndarray, str]:
    """(features, conversion): the whole file as float32, converted chunk by chunk, so that
    only one chunk of the stored array is in memory beside the result."""
    features = np.empty(vectors.shape, np.float32)
    for start in range(0, len(vectors), chunk_rows):
        stop = min(start + chunk_rows, len(vectors))
        features[start:stop] = as_float32_features(vectors.read(start, stop), vectors.path,
                                                   vectors.key, start)[0]
    return features, conversion_of(vectors.dtype)


def conversion_of(dtype) -> str:
    """How features of this dtype become float32."""
    dtype = np.dtype(dtype)
    if dtype == np.uint8:
        return UINT8_CONVERSION
    if dtype == np.float32:
        return "float32 as stored"
    return f"{dtype} -> float32"


def require_same_scaling(reference: str, reference_dtype, other: str, other_dtype) -> None:
    """Refuse splits whose conversions put them on different scales (uint8 is divided by 255,
    other types are not)."""
    if (np.dtype(reference_dtype) == np.uint8) != (np.dtype(other_dtype) == np.uint8):
        raise UserInputError(
            f"{other} is converted as '{conversion_of(other_dtype)}' but {reference} as "
            f"'{conversion_of(reference_dtype)}'; store every split with the same kind of dtype "
            "(uint8 is divided by 255, other types are not)")


def as_float32_features(rows: np.ndarray, path, key: str | None, first_row: int = 0):
    """Convert rows of features to float32; return (features, conversion description). NaN/Inf
    are refused with their count and the first one's row (`first_row + r`) and column."""
    where = _where(path, key)
    dtype = rows.dtype
    _check_numeric(where, dtype)
    if dtype.kind != "f":  # integers: no NaN/Inf possible
        converted = rows.astype(np.float32)
        if dtype == np.uint8:
            converted /= np.float32(255)  # in place: the same float32(x) / float32(255)
        return converted, conversion_of(dtype)
    with np.errstate(over="ignore"):  # reported below
        converted = rows.astype(np.float32, copy=False)
    finite = np.isfinite(converted)
    if not finite.all():
        bad = np.argwhere(~finite)
        row, column = bad[0]
        span = f"rows {first_row}..{first_row + len(rows) - 1}"
        value = rows[row, column]
        # A finite float64 beyond float32's range becomes Inf in the conversion: say so.
        shown = f"{value}" if not np.isfinite(value) else f"{value}, beyond float32's range"
        raise UserInputError(
            f"{where} has {len(bad)} NaN/Inf values (first at row {first_row + row}, column "
            f"{column}: {shown}) in {span} read as float32; clean the features before training")
    return converted, conversion_of(dtype)


def refuse_outside_unit_range(features: np.ndarray, conversion: str | None, where: str,
                              trained: str, advice: str, first_row: int = 0) -> None:
    """The one rule of a model's input scale: a model that saw uint8 / 255 saw features in
    [0, 1], so float features beyond it (raw pixels, 255 times off) are refused, naming the
    first value; ``advice`` says how to convert, in the caller's terms. Nothing else is checked:
    other conversions keep the values as stored, whose range nothing records."""
    if conversion != UINT8_CONVERSION or features.size == 0 or (
            features.min() >= 0 and features.max() <= 1):
        return  # min and max: a fraction of the cost of locating the first value outside
    row, column = np.argwhere(~((features >= 0) & (features <= 1)))[0]
    raise UserInputError(
        f"{where} has values outside [0, 1] (first at row {first_row + row}, column {column}: "
        f"{features[row, column]:g}) but {trained} was trained on uint8 features divided by "
        f"255; {advice}")
