"""Reading a user's `.npz` dataset safely: layout detection and validation at the edge.

Everything wrong with the file becomes one `UserInputError` line that names the file, the key and
what is accepted. Pickled (object) arrays are refused, never unpickled.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from sgh.errors import UserInputError

LAYOUTS = {
    "labelled": ("X_train", "y_train", "X_test", "y_test"),
    "ann": ("base", "query"),
    "pooled": ("X", "y"),
}
ACCEPTED_LAYOUTS = ("labelled (X_train, y_train, X_test, y_test), ANN (base, query, optional "
                    "groundtruth and learn) or pooled (X, y)")


def open_npz(path: Path) -> dict[str, np.ndarray]:
    """Load every array of an `.npz` file eagerly, refusing pickles and corrupt archives."""
    if not path.exists():
        raise UserInputError(f"{path}: no such file")
    if path.is_dir():
        raise UserInputError(f"{path}: is a directory; expected an .npz file")
    if path.suffix != ".npz":
        raise UserInputError(f"{path}: unknown extension {path.suffix!r}; accepted: .npz")
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except ValueError as error:
        if "pickle" in str(error).lower():
            raise UserInputError(f"{path}: holds object (pickled) arrays, which are refused; "
                                 "save plain numeric arrays") from None
        raise UserInputError(f"{path}: not a readable .npz file ({error})") from None
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        raise UserInputError(f"{path}: corrupt or truncated .npz file ({error})") from None


def detect_layout(path: Path, arrays: dict[str, np.ndarray]) -> str:
    for layout, keys in LAYOUTS.items():
        if all(key in arrays for key in keys):
            return layout
    found = ", ".join(sorted(arrays)) or "none"
    raise UserInputError(f"{path}: keys found: {found}; expected {ACCEPTED_LAYOUTS}")


def features(path: Path, key: str, array: np.ndarray, dim: int | None = None):
    """Validate one feature matrix and convert it to float32; return (features, conversion)."""
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise UserInputError(f"{path}: key {key!r} has shape {array.shape}; expected a non-empty "
                             "2-D array (items x features)")
    if dim is not None and array.shape[1] != dim:
        raise UserInputError(f"{path}: key {key!r} has {array.shape[1]} features per item but "
                             f"the other splits have {dim}; all splits must agree")
    if array.dtype == np.uint8:
        converted, conversion = array.astype(np.float32) / np.float32(255), "uint8 / 255"
    elif np.issubdtype(array.dtype, np.integer) or array.dtype == np.bool_:
        converted, conversion = array.astype(np.float32), f"{array.dtype} -> float32"
    elif np.issubdtype(array.dtype, np.floating):
        converted = array.astype(np.float32, copy=False)
        conversion = ("float32 as stored" if array.dtype == np.float32
                      else f"{array.dtype} -> float32")
    else:
        raise UserInputError(f"{path}: key {key!r} has non-numeric dtype {array.dtype}; expected "
                             "integer or floating-point features")
    finite = np.isfinite(converted)
    if not finite.all():
        bad = np.argwhere(~finite)
        row, column = bad[0]
        raise UserInputError(
            f"{path}: key {key!r} has {len(bad)} NaN/Inf values (first at row {row}, column "
            f"{column}: {array[row, column]}); clean the features before training")
    return converted, conversion


def labels(path: Path, key: str, array: np.ndarray, n_items: int, items_key: str) -> np.ndarray:
    if array.ndim != 1 or not (np.issubdtype(array.dtype, np.integer)
                               or array.dtype == np.bool_):
        raise UserInputError(f"{path}: key {key!r} has shape {array.shape} and dtype "
                             f"{array.dtype}; expected a 1-D integer label array")
    if len(array) != n_items:
        raise UserInputError(f"{path}: key {key!r} has {len(array)} labels but {items_key!r} has "
                             f"{n_items} items; they must match")
    return array.astype(np.int64)


def groundtruth(path: Path, array: np.ndarray, n_queries: int, n_database: int) -> np.ndarray:
    key = "groundtruth"
    if array.ndim != 2 or array.shape[0] != n_queries or not np.issubdtype(array.dtype,
                                                                          np.integer):
        raise UserInputError(f"{path}: key {key!r} has shape {array.shape}, dtype {array.dtype};"
                             f" expected integer ids of shape ({n_queries}, K)")
    if array.size and (array.min() < 0 or array.max() >= n_database):
        raise UserInputError(f"{path}: key {key!r} has ids outside 0..{n_database - 1} (min "
                             f"{array.min()}, max {array.max()}); ids index the database rows")
    return array.astype(np.int64)
