"""Reading a user's dataset of named arrays (`.npz`, or `.mat` v4/v5/v7.3): layout detection and
validation at the edge. Labels and ground-truth ids are accepted as MATLAB stores them: (1, n)
or (n, 1) matrices of whole-valued doubles.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from sgh.data.feature_conversion import as_float32_features
from sgh.data.ground_truth import checked_ids
from sgh.data.vector_file import _where
from sgh.data.vector_files import MALFORMED_FILE_ERRORS
from sgh.errors import UserInputError, one_line

logger = logging.getLogger(__name__)

LAYOUTS = {"labelled": ("X_train", "y_train", "X_test", "y_test"), "ann": ("base", "query"),
           "pooled": ("X", "y")}
ACCEPTED_LAYOUTS = ("labelled (X_train, y_train, X_test, y_test), ANN (base, query, optional "
                    "groundtruth and learn) or pooled (X, y)")
# Every key a layout reads: its required keys, and the ANN layout's optional ones.
LAYOUT_KEYS = {**LAYOUTS, "ann": (*LAYOUTS["ann"], "groundtruth", "learn")}
_LAYOUT_NAMES = {"labelled": "labelled", "ann": "ANN", "pooled": "pooled"}
# A zip archive (np.savez's) starts with a local file header, or, when empty, its end record.
_ZIP_STARTS = (b"PK\x03\x04", b"PK\x05\x06")


def open_npz(path: Path) -> dict[str, np.ndarray]:
    """Load every array of an `.npz` file eagerly, refusing pickles and corrupt archives. The
    caller refuses special files first (`refuse_special_file`), with its own words."""
    if not path.exists():
        raise UserInputError(f"{path}: no such file")
    if path.is_dir():
        raise UserInputError(f"{path}: is a directory; expected an .npz file")
    if path.suffix.lower() != ".npz":
        raise UserInputError(f"{path}: unknown extension {path.suffix!r}; accepted: .npz")
    return read_npz_arrays(path)


def read_npz_arrays(path: Path, names: list[str] | None = None) -> dict[str, np.ndarray]:
    """The arrays `names` (None: every one) of an `.npz` archive, read with `allow_pickle=False`;
    whatever numpy, zipfile or zlib raise on damaged bytes becomes one `UserInputError` line
    naming the file."""
    try:
        with open(path, "rb") as file:
            start = file.read(16)
        # numpy takes any bytes but a zip's (an .npz) or an .npy's for a pickle, and would
        # refuse them as one: say what the file starts with.
        if start.startswith(b"\x93NUMPY"):
            raise UserInputError(f"{path}: an .npy array, not an .npz archive")
        if not start.startswith(_ZIP_STARTS):
            found = f"it starts with {start!r}" if start else "it is empty"
            raise UserInputError(f"{path}: not an .npz archive (a zip of .npy arrays): the file "
                                 f"is corrupt or of another format ({found}; a zip starts with "
                                 "b'PK\\x03\\x04')")
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in (archive.files if names is None else names)}
    except UserInputError:
        raise
    except FileNotFoundError:
        raise UserInputError(f"{path}: no such file") from None
    except ValueError as error:
        if "pickle" in str(error).lower():
            raise UserInputError(f"{path}: holds object (pickled) arrays, which are refused; "
                                 "save plain numeric arrays") from None
        raise UserInputError(f"{path}: not a readable .npz file ({one_line(error)})") from None
    except (*MALFORMED_FILE_ERRORS, AttributeError) as error:
        raise UserInputError(f"{path}: corrupt or truncated .npz file ({one_line(error)})") \
            from None


def match_layout(keys) -> str | None:
    """The layout whose required keys are all present (`LAYOUTS` order), or None."""
    return next((layout for layout, required in LAYOUTS.items()
                 if all(key in keys for key in required)), None)


def _spelling(key: str) -> str:
    return key.lower().replace("_", "").replace("-", "")


def refuse_mixed_layouts(path: Path, layout: str, keys) -> None:
    """Refuse a file whose arrays beside `layout`'s include a key of a layout (another one's, or
    one spelt like a layout's key, `ground_truth`): which arrays are meant is unclear, and the
    others would be ignored without a word. Other arrays are not read."""
    own = LAYOUT_KEYS[layout]
    stray = sorted(key for key in keys if key not in own)
    reasons = []
    for key in stray:
        for other, names in LAYOUT_KEYS.items():
            like = next((name for name in names if _spelling(name) == _spelling(key)), None)
            if like is not None:
                reasons.append(f"{key} is a key of the {_LAYOUT_NAMES[other]} layout" if like == key
                               else f"{key} looks like the {_LAYOUT_NAMES[other]} layout's {like}")
                break
    if reasons:
        raise UserInputError(
            f"{path}: holds the {_LAYOUT_NAMES[layout]} layout "
            f"({', '.join(key for key in own if key in keys)}) and also {', '.join(stray)}; "
            f"{'; '.join(reasons)}, so which arrays are meant is unclear; a file holds the keys "
            f"of one layout: {ACCEPTED_LAYOUTS}; move the other arrays to another file")
    if stray:  # said, so that an array meant as data is not dropped without a word
        logger.info("%s: %s not read (the %s layout reads %s)", path, ", ".join(stray),
                    _LAYOUT_NAMES[layout], ", ".join(own))


def features(path: Path, key: str, array: np.ndarray, dim: int | None = None):
    """Validate one feature matrix and convert it to float32; return (features, conversion)."""
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise UserInputError(f"{path}: key {key!r} has shape {array.shape}; expected a non-empty "
                             "2-D array (items x features)")
    if dim is not None and array.shape[1] != dim:
        raise UserInputError(f"{path}: key {key!r} has {array.shape[1]} features per item but "
                             f"the other splits have {dim}; all splits must agree")
    return as_float32_features(array, path, key)


def _ids(where: str, array: np.ndarray, what: str) -> np.ndarray:
    """Integer ids (labels, neighbour ids) as int64; whole-valued floats are accepted."""
    if array.dtype.kind in "biu" or (array.dtype.kind == "f" and np.isfinite(array).all()
                                     and (array == np.rint(array)).all()):
        return array.astype(np.int64)
    raise UserInputError(f"{where} has dtype {array.dtype} with values that are not whole "
                         f"numbers; expected {what}")


def labels(path: Path, key: str, array: np.ndarray, n_items: int, items_key: str) -> np.ndarray:
    where = _where(path, key)
    if array.ndim == 2 and 1 in array.shape:  # MATLAB's row or column vector
        array = array.ravel()
    if array.ndim != 1:
        raise UserInputError(f"{where} has shape {array.shape}; expected a 1-D integer label "
                             "array")
    if len(array) != n_items:
        raise UserInputError(f"{where} has {len(array)} labels but {items_key!r} has "
                             f"{n_items} items; they must match")
    return _ids(where, array, "integer labels")


def groundtruth(path: Path, array: np.ndarray, n_queries: int, n_database: int,
                key: str | None = "groundtruth") -> np.ndarray:
    """Validate query x K ids of each query's nearest database items (0-based); as int64."""
    where = _where(path, key)
    if array.ndim != 2 or array.shape[0] != n_queries or array.dtype.kind not in "biuf":
        raise UserInputError(f"{where} has shape {array.shape}, dtype {array.dtype}; expected "
                             f"integer ids of shape ({n_queries}, K), one row per query")
    ids = _ids(where, array, f"integer ids of shape ({n_queries}, K)")
    return checked_ids(where, ids, n_database)
