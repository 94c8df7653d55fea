"""The codes file, `codes.npz`: the contract `sgh-train` writes and any method may follow.

    database, query     packed uint8 codes, np.packbits(bits, axis=1) (first bit = MSB of byte 0)
    bits                the code length (scalar integer)
    database_labels, query_labels   optional: 1-D integer labels, or 2-D 0/1 label matrices
    groundtruth         optional: (n_query, K) ids of each query's exact Euclidean neighbours

At least one kind of relevance (labels or ground truth) must be present. `load_codes` reports
every problem as one `UserInputError` line naming the file and the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sgh.artifacts.atomic import atomic_file
from sgh.data.npz_file import groundtruth as checked_groundtruth
from sgh.data.npz_file import open_npz
from sgh.errors import UserInputError


@dataclass(frozen=True)
class SavedCodes:
    path: Path
    bits: int
    database: np.ndarray
    query: np.ndarray
    database_labels: np.ndarray | None
    query_labels: np.ndarray | None
    groundtruth: np.ndarray | None

    @property
    def has_labels(self) -> bool:
        return self.database_labels is not None


def _codes(path: Path, arrays: dict, key: str, bits: int) -> np.ndarray:
    if key not in arrays:
        raise UserInputError(f"{path}: missing key {key!r}; keys found: "
                             f"{', '.join(sorted(arrays))}")
    codes = arrays[key]
    width = (bits + 7) // 8
    if codes.dtype != np.uint8 or codes.ndim != 2 or codes.shape[1] != width:
        raise UserInputError(f"{path}: key {key!r} has dtype {codes.dtype}, shape {codes.shape}; "
                             f"expected packed uint8 codes of shape (n, {width}) for bits={bits}")
    return codes


def _labels(path: Path, arrays: dict, key: str, n: int) -> np.ndarray | None:
    if key not in arrays:
        return None
    labels = arrays[key]
    if labels.ndim not in (1, 2) or len(labels) != n or not (
            np.issubdtype(labels.dtype, np.integer) or labels.dtype == np.bool_):
        raise UserInputError(f"{path}: key {key!r} has dtype {labels.dtype}, shape "
                             f"{labels.shape}; expected {n} integer labels (1-D) or a (n, "
                             "n_labels) 0/1 matrix")
    return labels


def load_codes(path) -> SavedCodes:
    path = Path(path)
    arrays = open_npz(path)
    if "bits" not in arrays or arrays["bits"].ndim != 0 or not np.issubdtype(
            arrays["bits"].dtype, np.integer):
        raise UserInputError(f"{path}: key 'bits' must hold the code length as an integer "
                             f"scalar; keys found: {', '.join(sorted(arrays))}")
    bits = int(arrays["bits"])
    if bits <= 0:
        raise UserInputError(f"{path}: bits={bits} is impossible; accepted: >= 1")
    database = _codes(path, arrays, "database", bits)
    query = _codes(path, arrays, "query", bits)
    database_labels = _labels(path, arrays, "database_labels", len(database))
    query_labels = _labels(path, arrays, "query_labels", len(query))
    if (database_labels is None) != (query_labels is None):
        raise UserInputError(f"{path}: has only one of 'database_labels' and 'query_labels'; "
                             "give both or neither")
    groundtruth = None
    if "groundtruth" in arrays:
        groundtruth = checked_groundtruth(path, arrays["groundtruth"], len(query), len(database))
    if database_labels is None and groundtruth is None:
        raise UserInputError(f"{path}: has no relevance data; expected 'database_labels' and "
                             "'query_labels', and/or 'groundtruth'")
    return SavedCodes(path, bits, database, query, database_labels, query_labels, groundtruth)


def write_codes(path, **arrays: np.ndarray) -> None:
    """Write the arrays of the contract above to `path`, atomically."""
    # np.savez appends ".npz" to names without it, so the temporary name must end in it.
    with atomic_file(path, suffix=".npz") as temporary:
        np.savez(temporary, **arrays)
