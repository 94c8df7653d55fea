"""Exact nearest neighbours in the original feature space (ground truth for Recall K@N).

`exact_neighbours(query, database, k, similarity)` is the entry point: bounded memory, for an
in-memory or streamed database, by the split's similarity (`sgh/data/similarity.py`):

- euclidean (and angular, whose features are unit-normalised when loaded, so that their
  Euclidean order is the angular one): the SGH paper's protocol, the exact k nearest database
  items of each query by squared L2 distance, ties broken by database index;
- inner_product (maximum inner product search): the k database items of largest <q, x>, ties
  broken by database index.

"Exact" matters: a float32 expansion |q|^2 - 2 q.x + |x|^2 (or a float32 q.x) can swap
near-tied neighbours, and then Recall K@N of a perfect hash is not 1. We therefore find
candidates with the fast matrix product plus a rigorous rounding margin, and rank only the
candidates by directly computed float64 values: sum((x - q)^2), or sum(q * x).
"""

from __future__ import annotations

import numpy as np

from sgh.data.similarity import SIMILARITIES, nearness

# Approximate distances of one block of queries against the whole database (float64).
_BLOCK_BYTES = 1 << 26
# A float64 copy of this many bytes of database rows (or of candidate rows) at a time.
_CHUNK_BYTES = 1 << 25
# float32 matrix products are used only when no value can come near float32's range.
_FLOAT32_SAFE = float(np.finfo(np.float32).max) / 16
def _as_features(array: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(array)
    if array.ndim != 2 or not (
        np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)
    ):
        raise ValueError(
            f"{name} must be a 2-D real array (n, dim), got dtype {array.dtype} and shape "
            f"{array.shape}"
        )
    if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
        raise ValueError(f"{name} contains NaN or infinite values; neighbours are undefined")
    return array


def _squared_norms(array: np.ndarray, rows_per_chunk: int) -> np.ndarray:
    norms = np.empty(array.shape[0])
    for start in range(0, array.shape[0], rows_per_chunk):
        chunk = array[start : start + rows_per_chunk].astype(np.float64)
        norms[start : start + rows_per_chunk] = np.einsum("ij,ij->i", chunk, chunk)
    return norms


def euclidean_neighbours(
    query: np.ndarray, database: np.ndarray, k: int, block_size: int | None = None
) -> np.ndarray:
    """The ``k`` nearest database items of each query by squared L2 distance, ties by index.

    Distances are ``sum((x - q) ** 2)`` computed in float64 from the given values (integers and
    float32 are converted exactly). Items are ordered by (distance, database index).

    Method: for a block of queries, approximate distances A = |q|^2 - 2 q.x + |x|^2 (one matrix
    product), in float32 when both arrays are float32 (every dataset's features: twice the
    matrix-product rate and half the memory traffic), else in float64. Each A is within
    E = 2 * gamma_(dim+3) * (|q|^2 + max |x|^2) of the true distance (standard dot-product
    rounding bound, gamma_n = n u / (1 - n u), u = 2^-24 or 2^-53 the unit roundoff of the
    working precision; the norms are computed in float64 and rounded once), and so is the
    direct computation. Every item of the exact top k then satisfies
    A <= A_(k) + 4E, A_(k) the k-th smallest A; those candidates (usually barely more than k) are
    ranked by their direct distances with ``np.lexsort``.

    Args:
        query: ``(n_queries, dim)`` real array (``xq``).
        database: ``(n_database, dim)`` real array (``xb``).
        k: neighbours per query, 1 <= k <= n_database.
        block_size: queries per block; default ``max(1, 2**26 // (8 * n_database))``.

    Returns:
        ``(n_queries, k)`` int64 database indices, nearest first.

    Memory: ``block_size * n_database`` float64 approximate distances, twice (np.partition
    copies), i.e. about 128 MB by default; plus float64 copies of 32 MB of database rows at a
    time. Candidate lists have up to ``block_size * n_database`` entries only when nearly all
    distances tie within the margin (e.g. a database of identical rows). For databases larger
    than memory (or streamed), use `exact_neighbours`.
    """
    return _nearest(query, database, k, block_size)[0]


def _nearest(query, database, k: int, block_size: int | None,
             similarity: str = "euclidean") -> tuple[np.ndarray, np.ndarray]:
    """The ids of the best ``k`` database items of each query, and their exact float64 keys,
    smaller first: squared distances (euclidean), or minus the inner products (inner_product).

    Inner products are approximated by one matrix product S = q.x, within
    E = gamma_(dim+2) * |q| * max |x| of the exact value (the same rounding bound; |q.x| <=
    |q| |x|). The k items of largest S have exact values >= S_(k) - E, so every item of the exact
    top k has S >= S_(k) - 2E; the margin taken is twice that, as for distances.
    """
    query = _as_features(query, "query")
    database = _as_features(database, "database")
    if query.shape[1] != database.shape[1]:
        raise ValueError(
            f"query has dimension {query.shape[1]} but database has dimension {database.shape[1]}"
        )
    n_queries, dim = query.shape
    n_database = database.shape[0]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n_database:
        raise ValueError(
            f"k must be an integer between 1 and the database size {n_database}, got {k!r}"
        )
    maximum = similarity == "inner_product"
    rows_per_chunk = max(1, _CHUNK_BYTES // (8 * max(dim, 1)))
    database_norms = _squared_norms(database, rows_per_chunk)
    largest = float(database_norms.max())
    largest_query = float(_squared_norms(query, rows_per_chunk).max())
    work = np.float32 if query.dtype == database.dtype == np.float32 else np.float64
    # Every approximation is at most 2 (|q|^2 + |x|^2) (distances) or |q| |x| (products).
    if work is np.float32 and 2 * (largest + largest_query) > _FLOAT32_SAFE:
        work = np.float64
    itemsize = np.dtype(work).itemsize
    if block_size is None:
        block_size = max(1, _BLOCK_BYTES // (itemsize * n_database))
    if (
        isinstance(block_size, bool)
        or not isinstance(block_size, (int, np.integer))
        or (block_size < 1)
    ):
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")

    database_norms_work = database_norms.astype(work)
    unit_roundoff = np.finfo(work).eps / 2
    terms = dim + 2 if maximum else dim + 3
    gamma = terms * unit_roundoff / (1 - terms * unit_roundoff)
    # Input in the working precision needs no conversion; otherwise reuse one buffer (a fresh
    # allocation per chunk costs more in page faults than the copy itself).
    needs_copy = database.dtype != work
    chunk_buffer = (np.empty((min(rows_per_chunk, n_database), dim), dtype=work) if needs_copy
                    else None)

    neighbours = np.empty((n_queries, k), dtype=np.int64)
    keys = np.empty((n_queries, k))
    for start in range(0, n_queries, block_size):
        block = slice(start, min(start + block_size, n_queries))
        block_query = query[block].astype(np.float64)
        query_norms = np.einsum("ij,ij->i", block_query, block_query)
        block_query_work = block_query.astype(work)  # exact: float32 input stays float32
        query_norms_work = query_norms.astype(work)
        approx = np.empty((block_query.shape[0], n_database), dtype=work)
        for chunk_start in range(0, n_database, rows_per_chunk):
            chunk = slice(chunk_start, min(chunk_start + rows_per_chunk, n_database))
            if needs_copy:
                rows = chunk_buffer[: chunk.stop - chunk.start]
                np.copyto(rows, database[chunk], casting="unsafe")
            else:
                rows = database[chunk]
            if maximum:  # minus the product: smaller is better for both kinds of key
                np.negative(block_query_work @ rows.T, out=approx[:, chunk])
            else:
                approx[:, chunk] = (query_norms_work[:, None] - 2.0 * (block_query_work @ rows.T)
                                    + database_norms_work[None, chunk])
        kth = np.partition(approx, k - 1, axis=1)[:, k - 1].astype(np.float64)
        if maximum:
            margin = 4.0 * gamma * np.sqrt(query_norms) * np.sqrt(largest)
        else:
            margin = 4.0 * 2.0 * gamma * (query_norms + largest)
        # Compared in float64 (approx promoted exactly): the threshold is not rounded down.
        rows_idx, candidates = np.nonzero(approx <= (kth + margin)[:, None])
        del approx

        exact = np.empty(candidates.size)
        for part in range(0, candidates.size, rows_per_chunk):
            piece = slice(part, part + rows_per_chunk)
            items = database[candidates[piece]].astype(np.float64)
            exact[piece] = nearness(items, block_query[rows_idx[piece]],
                                    "inner_product" if maximum else "euclidean")
        order = np.lexsort((candidates, exact, rows_idx))
        per_query = np.bincount(rows_idx, minlength=block_query.shape[0])
        first = np.cumsum(per_query) - per_query
        nearest = order[first[:, None] + np.arange(k)]
        neighbours[block] = candidates[nearest]
        keys[block] = exact[nearest]
    return neighbours, keys


# Database rows per chunk of `exact_neighbours`: 64 MiB as float64.
_DATABASE_CHUNK_BYTES = 1 << 26


def exact_neighbours(query: np.ndarray, database, k: int, similarity: str = "euclidean",
                     chunk_rows: int | None = None) -> np.ndarray:
    """Each query's exact ``k`` best database items by ``similarity``, ties by database index.

    The entry point for ground truth: any database size (in memory, or
    `sgh.data.streamed_features.StreamedFeatures` read from disk) in bounded memory.

    Args:
        query: ``(n_queries, dim)`` real array (``xq``).
        database: ``(n_database, dim)`` real array, or streamed features (``xb``).
        k: neighbours per query, 1 <= k <= n_database.
        similarity: ``euclidean`` (smallest squared L2 distance), ``angular`` (the same on
            the given vectors, which the loader has unit-normalised: the Euclidean order of
            unit vectors is the angular one) or ``inner_product`` (largest ``q . x``).
        chunk_rows: database rows per chunk; default 64 MiB as float64.

    Returns:
        ``(n_queries, k)`` int64 database indices, best first; the same ids, in the same order,
        whatever ``chunk_rows``.

    Method: each chunk's exact k best are found as in `euclidean_neighbours` (the rigorous
    margin, then float64 ranking; see `_nearest` for inner products); their exact keys (the same
    float64 sums for every chunk, so equal values compare equal) and global ids are merged with
    the best so far, ordered by (key, database index). The global k best are among the chunks' k
    best, so the merge is exact. Memory: one chunk with the block distances, and (n_queries, 2k)
    candidates, whatever the database's size. Unlike a single `euclidean_neighbours` call, whose
    query blocks shrink as the database grows (one query per block beyond 8 M items, each
    converting the whole database), the work per query block stays the same.
    """
    from sgh.data.streamed_features import StreamedFeatures

    if similarity not in SIMILARITIES:
        raise ValueError(f"similarity must be one of {', '.join(SIMILARITIES)}, got "
                         f"{similarity!r}")
    query = _as_features(query, "query")
    n_database = len(database)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n_database:
        raise ValueError(
            f"k must be an integer between 1 and the database size {n_database}, got {k!r}"
        )
    kind = "inner_product" if similarity == "inner_product" else "euclidean"
    if chunk_rows is None:
        chunk_rows = max(1, _DATABASE_CHUNK_BYTES // (8 * query.shape[1]))
    if isinstance(database, StreamedFeatures):
        chunks = database.chunks(chunk_rows)
    else:  # in memory: slices in the given dtype (float64 features stay float64), each checked
        database = np.asarray(database)
        chunks = ((start, database[start:start + chunk_rows])
                  for start in range(0, len(database), chunk_rows))
    best_ids = np.zeros((len(query), 0), np.int64)
    best_keys = np.zeros((len(query), 0))
    for start, rows in chunks:
        ids, keys = _nearest(query, rows, min(k, len(rows)), None, kind)
        merged_ids = np.concatenate([best_ids, ids + start], axis=1)
        merged_keys = np.concatenate([best_keys, keys], axis=1)
        order = np.lexsort((merged_ids, merged_keys), axis=1)[:, :k]
        best_ids = np.take_along_axis(merged_ids, order, axis=1)
        best_keys = np.take_along_axis(merged_keys, order, axis=1)
    return best_ids


def chunked_euclidean_neighbours(query: np.ndarray, database, k: int,
                                 chunk_rows: int | None = None) -> np.ndarray:
    """`exact_neighbours` by Euclidean distance (the name earlier code and tests use)."""
    return exact_neighbours(query, database, k, "euclidean", chunk_rows)
