"""The codes file, `codes.npz`: the contract `sgh-train` writes and any method may follow.

    database, query     packed uint8 codes, np.packbits(bits, axis=1) (first bit = MSB of byte 0,
                        pad bits 0); at least one row each
    bits                the code length (scalar integer)
    database_labels, query_labels   optional: 1-D integer labels, or 2-D 0/1 matrices (both alike)
    groundtruth         optional: (n_query, K) ids of each query's exact Euclidean neighbours
    fingerprint         optional: the model that made the codes (`sgh.codes.model_fingerprint`),
                        so that another model's asymmetric score is never used with them

At least one kind of relevance (labels or ground truth) must be present. `load_codes` reports
every problem as one `UserInputError` line naming the file and the key.

`sgh-encode` writes codes alone, as ``OUT.npy`` (a .npy has no room for more), and their record
beside it, ``OUT.npy.json`` (`record_path`): ``written_by: sgh-encode``, ``fingerprint``, ...;
`encoded_codes` reads them back only where the record names the model expected.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sgh.artifacts.atomic import atomic_file
from sgh.codes import stored_bits
from sgh.data.npz_file import groundtruth as checked_groundtruth
from sgh.data.npz_file import open_npz
from sgh.data.vector_files import open_vectors, refuse_special_file
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
    fingerprint: str | None = None

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
    if len(codes) == 0:  # every metric would be NaN (no queries) or undefined (no database)
        raise UserInputError(f"{path}: key {key!r} holds no codes (shape {codes.shape}); "
                             f"expected at least one {'query' if key == 'query' else 'item'}")
    # The pad bits of the last byte would count in every Hamming distance.
    pad = (1 << (width * 8 - bits)) - 1
    rows = np.flatnonzero(codes[:, -1] & pad) if pad else ()
    if len(rows):
        raise UserInputError(f"{path}: key {key!r} has bits set in the padding after bit {bits} "
                             f"({len(rows)} rows, the first row {rows[0]}: last byte "
                             f"{codes[rows[0], -1]:08b}); expected np.packbits of (n, {bits}) "
                             "0/1 bits, whose pad bits are 0")
    return codes


def _labels(path: Path, arrays: dict, key: str, n: int) -> np.ndarray | None:
    if key not in arrays:
        return None
    labels = arrays[key]
    if labels.ndim not in (1, 2) or len(labels) != n or not (
            np.issubdtype(labels.dtype, np.integer) or labels.dtype == np.bool_):
        raise UserInputError(f"{path}: key {key!r} has dtype {labels.dtype}, shape {labels.shape}; "
                             f"expected {n} integer labels (1-D) or a ({n}, n_labels) 0/1 matrix")
    if labels.ndim == 2:
        if labels.shape[1] == 0:
            raise UserInputError(f"{path}: key {key!r} is a label matrix of shape "
                                 f"{labels.shape}, with no label column; expected a ({n}, "
                                 "n_labels) 0/1 matrix with n_labels >= 1, or 1-D class ids")
        wrong = np.argwhere((labels != 0) & (labels != 1))
        if len(wrong):
            row, column = wrong[0]
            raise UserInputError(
                f"{path}: key {key!r} is a 2-D label matrix, so a 0/1 multi-hot one (1 = the "
                f"item has that label), and holds {labels[row, column]} at row {row}, column "
                f"{column} (entries neither 0 nor 1: {len(wrong)} of {labels.size}); expected "
                "only 0 and 1, or 1-D integer class ids for single-label data")
    return labels


def load_codes(path) -> SavedCodes:
    path = Path(path)
    # Before anything opens it: a FIFO would block forever.
    refuse_special_file(path, expected="a codes.npz file, as sgh-train writes it")
    arrays = open_npz(path)
    bits = stored_bits(arrays, str(path))
    database = _codes(path, arrays, "database", bits)
    query = _codes(path, arrays, "query", bits)
    database_labels = _labels(path, arrays, "database_labels", len(database))
    query_labels = _labels(path, arrays, "query_labels", len(query))
    if (database_labels is None) != (query_labels is None):
        raise UserInputError(f"{path}: has only one of 'database_labels' and 'query_labels'; "
                             "give both or neither")
    if database_labels is not None and (database_labels.ndim != query_labels.ndim or (
            database_labels.ndim == 2 and database_labels.shape[1] != query_labels.shape[1])):
        raise UserInputError(f"{path}: 'query_labels' has shape {query_labels.shape} but "
                             f"'database_labels' {database_labels.shape}; give both as 1-D class "
                             "ids, or both as (n, n_labels) 0/1 matrices of the same labels")
    groundtruth = (checked_groundtruth(path, arrays["groundtruth"], len(query), len(database))
                   if "groundtruth" in arrays else None)
    if database_labels is None and groundtruth is None:
        raise UserInputError(f"{path}: has no relevance data; expected 'database_labels' and "
                             "'query_labels', and/or 'groundtruth'")
    fingerprint = arrays.get("fingerprint")
    if fingerprint is not None:
        if fingerprint.shape != () or fingerprint.dtype.kind != "U":
            raise UserInputError(f"{path}: key 'fingerprint' has dtype {fingerprint.dtype}, "
                                 f"shape {fingerprint.shape}; expected one string, as "
                                 "sgh-train writes it")
        fingerprint = str(fingerprint)
    return SavedCodes(path, bits, database, query, database_labels, query_labels, groundtruth,
                      fingerprint)


def write_codes(path, **arrays: np.ndarray) -> None:
    """Write the arrays of the contract above to `path`, atomically."""
    with atomic_file(path, suffix=".npz") as temporary:
        np.savez(temporary, **arrays)


def refuse_another_models_scores(codes: SavedCodes, scores, scores_path) -> None:
    """UserInputError naming both files when ``scores`` (a `ScoreSet`) are of another model than
    ``codes``: scored together they give a wrong ranking, without a word."""
    if codes.fingerprint is None:
        raise UserInputError(f"{codes.path}: has no key 'fingerprint', so nothing says that "
                             f"{scores_path} scores these codes; accepted: the codes.npz and "
                             "asymmetric.npz one sgh-train run wrote (train it again to get both)")
    if codes.fingerprint != scores.fingerprint:
        raise UserInputError(f"{codes.path} (model {codes.fingerprint}) and {scores_path} (model "
                             f"{scores.fingerprint}) come from different models; accepted: the "
                             "codes.npz and asymmetric.npz of one sgh-train run")


def record_path(out: str | os.PathLike) -> Path:
    """Where the record of `sgh-encode`'s codes at `out` goes: `codes.npy` -> `codes.npy.json`."""
    return Path(f"{out}.json")


def encoded_codes(path: str | os.PathLike, fingerprint: str, bits: int) -> np.ndarray:
    """The packed codes `sgh-encode` wrote to `path`, if its record says that the model of
    ``fingerprint`` made them; UserInputError otherwise (no record, no model named in it,
    another model, codes not as recorded), as codes that cannot be checked are not used."""
    path, record = Path(path), record_path(path)
    try:
        written = json.loads(record.read_text())
    except (OSError, ValueError):
        written = None
    if not isinstance(written, dict) or written.get("written_by") != "sgh-encode":
        raise UserInputError(f"{path}: no record of sgh-encode beside it ({record.name}), so "
                             "nothing says which model made these codes; accepted: codes "
                             "sgh-encode wrote with their record, or a codes.npz of sgh-train")
    made_by = written.get("fingerprint")
    if made_by != fingerprint:
        why = (f"come from model {made_by}, this index's is {fingerprint}" if made_by
               else "name no model (the run had no asymmetric.npz), so they cannot be checked")
        raise UserInputError(f"{path}: its record ({record.name}) says these codes {why}; "
                             "accepted: codes of this index's model (sgh-encode run=RUN of the "
                             "run it was built from)")
    vectors = open_vectors(path)
    if vectors.dtype != np.uint8 or list(vectors.shape) != written.get("shape") \
            or vectors.shape[1] != -(-bits // 8):
        raise UserInputError(f"{path}: holds {vectors.dtype} of shape {vectors.shape}, but its "
                             f"record {written.get('shape')} packed codes of {bits} bits; the "
                             "file was replaced since sgh-encode wrote it: encode it again")
    return vectors.read(0, len(vectors))
