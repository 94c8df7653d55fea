"""The exact k-NN ground truth of a dataset, cached next to it (the user's view:
docs/guide/evaluation.md).

`cached_exact_neighbours` computes a dataset's exact neighbours once (minutes on large datasets)
and caches them in ``<dataset file>.gt-<digest>.v2.npz``, the digest over the method's version,
the similarity and the features as used (the content, not the path or date). The file goes next
to the dataset when its directory may be written (permission bits, even for root), else in the
per-user cache; reads look in both, next to the dataset first. It holds ``ids`` ``(n_queries, K)``
int64, best first, ties by index (a total order, so K >= k serves k), and their ``checksum``; it
is used only if it loads without pickles, its checksum matches (which catches truncation, changed
bytes and another features' file alike) and the ids are in range and distinct along each row;
anything else is logged and recomputed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import zipfile
from pathlib import Path

import numpy as np

from sgh.artifacts.atomic import atomic_file
from sgh.artifacts.user_cache import may_write, user_cache_dir
from sgh.data.ground_truth import checked_ids, computed_source
from sgh.data.neighbours import exact_neighbours
from sgh.data.similarity import NEIGHBOUR_LABELS
from sgh.data.streamed_features import StreamedFeatures
from sgh.errors import UserInputError, check_choice, check_int

logger = logging.getLogger(__name__)

# Part of the digest: bump it when the ground truth's definition changes, so old files go stale.
METHOD = b"sgh exact squared-L2 k-NN, ties by database index, v1"
# The cache file's layout (ids + checksum); a file of another version is stale, not trusted.
CACHE_VERSION = "v2"


def features_digest(query: np.ndarray, database: np.ndarray, similarity: str = "euclidean") -> str:
    """Hex BLAKE2b-128 of :data:`METHOD`, the similarity and both arrays' dtype, shape and bytes.
    Euclidean is not hashed, so its files keep the digest they had before it was stated."""
    digest = hashlib.blake2b(METHOD, digest_size=16)
    if similarity != "euclidean":
        digest.update(f"|similarity={similarity}|".encode())
    for array in (query, database):
        digest.update(f"|{np.dtype(array.dtype).str}|{tuple(array.shape)}|".encode())
        # A streamed database is hashed chunk by chunk: the same bytes, so the same digest.
        parts = array.chunks() if isinstance(array, StreamedFeatures) else [(0, array)]
        for _, rows in parts:  # the bytes in place, no copy
            digest.update(np.ascontiguousarray(rows).reshape(-1).view(np.uint8))
    return digest.hexdigest()


def cache_candidates(dataset_path: str | os.PathLike, digest: str) -> list[Path]:
    """Where the cache file of a dataset may be: next to it, then in the per-user cache."""
    dataset_path = Path(dataset_path).expanduser().absolute()
    name = f"{dataset_path.name}.gt-{digest}.{CACHE_VERSION}.npz"
    user_dir = user_cache_dir()
    return [dataset_path.parent / name] + ([] if user_dir is None else [user_dir / name])


def ids_checksum(digest: str, ids: np.ndarray) -> str:
    """BLAKE2b-128 of the features digest and the ids' shape and bytes."""
    checksum = hashlib.blake2b(digest.encode(), digest_size=16)
    checksum.update(f"|{ids.shape}|".encode())
    checksum.update(np.ascontiguousarray(ids, np.int64).reshape(-1).view(np.uint8))
    return checksum.hexdigest()


def _trusted(path: Path, n_queries: int, n_database: int, k: int, digest: str
             ) -> np.ndarray | None:
    """The cached ids of ``path`` if every check of the module doc passes, else None."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            ids, checksum = data["ids"], str(data["checksum"])
    except (OSError, ValueError, EOFError, KeyError, AttributeError, zipfile.BadZipFile) as error:
        logger.warning("ground-truth cache %s is unreadable (%s); ignored", path, error)
        return None
    problem = None
    if not isinstance(ids, np.ndarray) or ids.dtype != np.int64 or ids.ndim != 2:
        problem = f"expected a 2-D int64 array, found {getattr(ids, 'dtype', type(ids))}"
    elif checksum != ids_checksum(digest, ids):
        problem = "its checksum does not match its ids"
    elif ids.shape[0] != n_queries:
        problem = f"{ids.shape[0]} rows for {n_queries} queries"
    elif ids.shape[1] < k:  # a valid file for a smaller k: to be replaced, not a warning
        logger.info("ground-truth cache %s has %d neighbours per query, %d needed", path,
                    ids.shape[1], k)
        return None
    else:
        try:
            checked_ids("its ids", ids, n_database)
        except UserInputError as error:
            problem = str(error)
    if problem is not None:
        logger.warning("ground-truth cache %s is not trusted (%s); ignored", path, problem)
        return None
    return ids[:, :k]


def _write(path: Path, ids: np.ndarray, digest: str) -> bool:
    if not may_write(path.parent):
        return False
    try:
        with atomic_file(path, suffix=".npz") as temporary:
            np.savez(temporary, ids=ids, checksum=np.str_(ids_checksum(digest, ids)))
    except OSError as error:
        logger.info("cannot write the ground-truth cache %s (%s)", path, error)
        return False
    return True


def cached_exact_neighbours(query: np.ndarray, database: np.ndarray, k: int,
                            dataset_path: str | os.PathLike | None,
                            similarity: str = "euclidean") -> tuple[np.ndarray, str]:
    """``(ids, source)``: :func:`sgh.data.neighbours.exact_neighbours` of the features as scored,
    through the cache beside `dataset_path` (None: no cache); `source` says which neighbours and
    where they come from. A cache problem only means computing them."""
    check_int("k", k, 1, len(database), maximum_is="the database size")
    check_choice("similarity", similarity, tuple(NEIGHBOUR_LABELS))
    exact = computed_source(similarity)
    if dataset_path is None:
        return exact_neighbours(query, database, k, similarity), exact
    digest = features_digest(query, database, similarity)
    candidates = cache_candidates(dataset_path, digest)
    for path in candidates:
        ids = _trusted(path, len(query), len(database), k, digest)
        if ids is not None:
            return ids, f"{exact} earlier; read from the cache {path}"
    ids = exact_neighbours(query, database, k, similarity)
    for path in candidates:
        if _write(path, ids, digest):
            return ids, f"{exact}; cached in {path}"
    return ids, f"{exact} (no writable cache location)"
