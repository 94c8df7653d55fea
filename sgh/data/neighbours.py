"""Exact nearest neighbours in the original feature space (ground truth for Recall K@N).

`exact_neighbours` ranks an in-memory or streamed database in bounded memory by the split's
similarity (`sgh.data.similarity.nearness`), ties by database index. "Exact" matters: float32
keys can swap near-tied neighbours, and then Recall K@N of a perfect hash is not 1. So items are
ranked by float64 keys of the given features, and only candidates are found the fast way, one
database chunk at a time: the chunk is centred on its mean (small norms, small rounding errors),
multiplied with the queries in float32 (float64 where float32 does not hold the features
exactly), and scanned (`sgh.data.neighbour_kernels`) for every item within a rigorous margin
(`_margins`) of each query's k-th approximate key and below a ceiling from the exact k-th key of
earlier chunks; the candidates' float64 keys are then merged with the k best so far by (key,
database index). The results are those of ranking every item by its float64 key, so a cached
ground truth (`sgh/artifacts/ground_truth_cache.py`) stays valid across changes of method.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import threadpool_limits  # a dependency of scikit-learn

from sgh.compiled import resolved_workers
from sgh.data.neighbour_kernels import centre_rows, column_sums, offer_items
from sgh.data.similarity import SIMILARITIES, nearness
from sgh.errors import check_choice, check_int

# Database rows per chunk of `exact_neighbours`: 64 MiB as float64.
_DATABASE_CHUNK_BYTES = 1 << 26
# The products of one block of database rows with one worker's block of queries, sized to stay
# in cache between the matrix product that writes it and the scan that reads it.
_PRODUCT_BLOCK_BYTES = 1 << 22
# Queries per product block (a worker's share if smaller).
_QUERY_BLOCK = 1024
# Candidate rows gathered as float64 for their exact keys at a time.
_CANDIDATE_PIECE_BYTES = 1 << 25
# The heaps and candidate lists of one group of queries at a time.
_STATE_BYTES = 1 << 26
# float32 products are used only when no value can come near float32's range.
_FLOAT32_SAFE = float(np.finfo(np.float32).max) / 16
_UNIT_ROUNDOFF_64 = float(np.finfo(np.float64).eps) / 2


def _as_features(array: np.ndarray, name: str, finite_checked: bool = False) -> np.ndarray:
    """``array`` as a 2-D real array; ValueError naming ``name`` otherwise, or for NaN/Inf
    unless the caller checks those itself (`finite_checked`)."""
    array = np.asarray(array)
    if array.ndim != 2 or array.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be a 2-D real array (n, dim), got dtype {array.dtype} "
                         f"and shape {array.shape}")
    if not finite_checked and array.dtype.kind == "f" and not np.isfinite(array).all():
        raise ValueError(f"{name} contains NaN or infinite values; neighbours are undefined")
    return array


def _holds_float32_exactly(dtype: np.dtype) -> bool:
    """Whether float32 represents every value of ``dtype`` (float16/32, integers up to 16 bits)."""
    return dtype.itemsize <= (2 if np.issubdtype(dtype, np.integer) else 4)


def _kernel_input(rows: np.ndarray) -> np.ndarray:
    """``rows`` in a dtype the compiled kernels take: integers and float32/64 as they are;
    float16 as float32 and wider floats as float64 (numba has neither)."""
    if np.issubdtype(rows.dtype, np.integer) or rows.dtype in (np.float32, np.float64):
        return rows
    return rows.astype(np.float32 if rows.dtype.itemsize < 4 else np.float64)


def _refuse_overflow(name: str, array: np.ndarray) -> None:
    raise ValueError(f"{name} values are too large: their squared distances overflow float64 "
                     f"(largest |value| {np.abs(array).max()})")


def _gamma(terms: int, unit_roundoff: float) -> float:
    """gamma_n = n u / (1 - n u): the relative error bound of a sum of n rounded terms."""
    return terms * unit_roundoff / (1 - terms * unit_roundoff)


# --- one chunk of the database -----------------------------------------------------------------

class _Threads:
    """Runs work over row ranges on the worker threads (products and kernels release the GIL)."""

    def __init__(self, pool: ThreadPoolExecutor, workers: int):
        self.pool = pool
        self.workers = workers

    def over_rows(self, n_rows: int, task, min_rows: int) -> None:
        """``task(part, start, stop)`` over at most ``workers`` consecutive ranges of
        ``0..n_rows``, numbered ``part`` = 0, 1, ..., of at least ``min_rows`` rows each."""
        parts = max(1, min(self.workers, n_rows // min_rows))
        ranges = [(part, n_rows * part // parts, n_rows * (part + 1) // parts)
                  for part in range(parts)]
        if parts == 1:
            task(0, 0, n_rows)
        else:
            list(self.pool.map(lambda bound: task(*bound), ranges))  # re-raises errors


# Rows of centring or summing, and queries of a scan, per thread at least.
_ROWS_PER_THREAD = 4096
_QUERIES_PER_THREAD = 64


def _centred(rows: np.ndarray, shift: np.ndarray, work, threads: _Threads
             ) -> tuple[np.ndarray, np.ndarray]:
    """``rows - shift`` rounded once to ``work``, and the rounded rows' float64 squared norms."""
    rows = _kernel_input(rows)
    centred = np.empty(rows.shape, work)
    squared_norms = np.empty(len(rows))

    def centre(_part, start, stop):
        centre_rows(rows[start:stop], shift, centred[start:stop], squared_norms[start:stop])

    threads.over_rows(len(rows), centre, _ROWS_PER_THREAD)
    return centred, squared_norms


def _mean(rows: np.ndarray, threads: _Threads) -> np.ndarray:
    """The column means, in float64 (only a centre: any shift keeps the results exact)."""
    rows = _kernel_input(rows)
    partial_sums = np.zeros((threads.workers, rows.shape[1]))

    def add(part, start, stop):
        column_sums(rows[start:stop], partial_sums[part])

    threads.over_rows(len(rows), add, _ROWS_PER_THREAD)
    return partial_sums.sum(axis=0) / len(rows)


def _margins(query_norms: np.ndarray, largest_norm: float, shift_norm: float, dim: int, work,
             maximum: bool) -> np.ndarray:
    """Per query, a margin 4E on the approximate keys, E bounding |approximate key - float64
    key - c| for every item (c a constant per query).

    a = q - m (euclidean) or q (inner product) and b = x - m, rounded to a', b' when centred;
    Q = |a'| (``query_norms``), P = max |b'| (``largest_norm``); u, gamma_n the unit roundoff
    and error constant of the working precision, u64, g_n of float64. The approximate key is
    |b'|^2 - 2 a'.b' (= |a' - b'|^2 - |a'|^2) or -a'.b'. Its errors: the matrix product
    gamma_d Q P; the norms and the key's rounding g_d P^2 + u64 (P^2 + 2QP); the centring
    (each component rounded at most twice, rho = u + u64 + u u64) rho (2 + rho) (Q + P)^2,
    about 2u (Q + P)^2; the float64 key itself g_(d+2) (|a| + |b|)^2, or g_d |q| (P + |m|).
    All fit in E = (gamma_(d+4) + 4 g_(d+4)) (Q + P)^2 for distances, E = Q (gamma_(d+4) P +
    4 g_(d+4) (P + |m|)) for inner products. The k items of smallest key K_(k) have float64
    keys <= K_(k) + E, so every item of the exact top k has a key <= K_(k) + 2E; the margin is
    twice that, so that the rounding of the bound's own arithmetic cannot matter.
    """
    gamma_work = _gamma(dim + 4, float(np.finfo(work).eps) / 2)
    gamma_64 = 4 * _gamma(dim + 4, _UNIT_ROUNDOFF_64)
    if maximum:
        return 4.0 * query_norms * (gamma_work * largest_norm
                                    + gamma_64 * (largest_norm + shift_norm))
    return 4.0 * (gamma_work + gamma_64) * (query_norms + largest_norm) ** 2


def _chunk_candidates(query: np.ndarray, rows: np.ndarray, k: int, similarity: str,
                      best_kth: np.ndarray, threads: _Threads
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The items of ``rows`` that may belong to a query's k best, given the k-th best float64
    key ``best_kth`` of earlier chunks: ``(queries, ids into rows, float64 keys)``, aligned;
    see the module doc."""
    maximum = similarity == "inner_product"
    n_rows, dim = rows.shape
    work = (np.float32 if _holds_float32_exactly(query.dtype)
            and _holds_float32_exactly(rows.dtype) else np.float64)
    # Any shift m keeps the order over x: |(q - m) - (x - m)| = |q - x|, and <q, x - m> differs
    # from <q, x> by a constant per query (shifting the queries too would not keep that).
    shift = _mean(rows, threads)
    query_shift = np.zeros(dim) if maximum else shift
    while True:
        centred, item_norms = _centred(rows, shift, work, threads)
        if not np.isfinite(item_norms).all():
            # NaN or infinite rows make every norm so: the norms replace a pass over each chunk.
            _as_features(rows, "database")
            _refuse_overflow("database", rows)
        centred_query, query_squared_norms = _centred(query, query_shift, work, threads)
        if not np.isfinite(query_squared_norms).all():
            _refuse_overflow("query", query)
        largest_norm = float(np.sqrt(item_norms.max()))
        query_norms = np.sqrt(query_squared_norms)
        # The largest approximate key or product, against float32's range.
        extreme = (float(query_norms.max()) * largest_norm if maximum
                   else (float(query_norms.max()) + largest_norm) ** 2)
        if work is np.float64 or extreme <= _FLOAT32_SAFE:
            break
        work = np.float64
    # hypot: |m| without overflowing where m's squares would.
    margins = _margins(query_norms, largest_norm, float(np.hypot.reduce(shift)), dim, work,
                       maximum)
    item_terms = np.zeros(n_rows) if maximum else item_norms
    product_scale = -1.0 if maximum else -2.0
    offsets = query.astype(np.float64) @ shift if maximum else -query_squared_norms
    # The largest approximate key an item of this chunk may have and still enter the k best
    # (+inf while fewer than k are known): its ids come later, so it enters only if its float64
    # key F < best_kth, and its key is within E = margins / 4 of F + offsets; E more covers the
    # rounding of the offsets and of the sum.
    ceilings = best_kth + offsets + margins / 2

    # A list is expected to hold about k (1 + ln(rows / k)) entries in the first chunk, far
    # fewer later; queries whose list overflows are scanned again with a 16 times longer one.
    capacity = 4 * k + 64
    pending = np.arange(len(query))
    candidate_queries, candidate_ids = [], []
    while len(pending):
        group_size = max(1, _STATE_BYTES // (16 * (k + capacity)))
        overflowed = []
        for group_start in range(0, len(pending), group_size):
            members = pending[group_start:group_start + group_size]
            positions, ids, counts = _scan(centred_query[members], margins[members],
                                           ceilings[members], centred, item_terms,
                                           product_scale, k, capacity, threads)
            candidate_queries.append(members[positions])
            candidate_ids.append(ids)
            overflowed.append(members[counts < 0])
        pending = np.concatenate(overflowed)
        # A list of 2 n_rows + 2 entries is never over half full: the loop ends.
        capacity = min(16 * capacity, 2 * n_rows + 2)
    candidate_queries = np.concatenate(candidate_queries)
    candidate_ids = np.concatenate(candidate_ids)
    return candidate_queries, candidate_ids, _exact_keys(query, rows, candidate_queries,
                                                         candidate_ids, similarity)


def _scan(centred_query, margins, ceilings, centred, item_terms, product_scale, k, capacity,
          threads):
    """Candidates of a group of queries against a centred chunk: ``(positions, ids, counts)``,
    each candidate's query (position in the group) and row id, and each query's list length,
    -1 where its list overflowed (such queries list no candidate)."""
    n_queries, n_rows = len(centred_query), len(centred)
    heaps = np.full((n_queries, k), np.inf)
    thresholds = ceilings.copy()
    keys = np.empty((n_queries, capacity))
    ids = np.empty((n_queries, capacity), np.int64)
    counts = np.zeros(n_queries, np.int64)

    def scan_queries(_part, first, last):
        """One worker's queries: its own matrix products (BLAS limited to one thread by
        `exact_neighbours`) and scans, on its own heaps and lists."""
        block = min(_QUERY_BLOCK, last - first)
        item_block = min(n_rows, max(64, _PRODUCT_BLOCK_BYTES // (block * centred.itemsize)))
        buffer = np.empty(block * item_block, centred.dtype)
        for q0 in range(first, last, block):
            mine = slice(q0, min(q0 + block, last))
            for i0 in range(0, n_rows, item_block):
                i1 = min(i0 + item_block, n_rows)
                # Items x queries (packs the small query block once), into a contiguous view.
                products = buffer[:(i1 - i0) * (mine.stop - q0)].reshape(i1 - i0, -1)
                np.matmul(centred[i0:i1], centred_query[mine].T, out=products)
                offer_items(products, item_terms[i0:i1], product_scale, i0, margins[mine],
                             ceilings[mine], thresholds[mine], heaps[mine], keys[mine],
                             ids[mine], counts[mine])

    threads.over_rows(n_queries, scan_queries, _QUERIES_PER_THREAD)
    # The final threshold: the k-th smallest key plus the margin, or the ceiling if lower.
    listed = np.arange(capacity)[None, :] < counts[:, None]
    listed &= keys <= np.minimum(ceilings, heaps[:, 0] + margins)[:, None]
    positions, slots = np.nonzero(listed)
    return positions, ids[positions, slots], counts


def _exact_keys(query, rows, candidate_queries, candidate_ids, similarity) -> np.ndarray:
    """The float64 key of each (query, row) candidate, a piece of rows at a time."""
    rows_per_piece = max(1, _CANDIDATE_PIECE_BYTES // (8 * max(rows.shape[1], 1)))
    exact = np.empty(len(candidate_ids))
    for start in range(0, len(candidate_ids), rows_per_piece):
        piece = slice(start, start + rows_per_piece)
        items = rows[candidate_ids[piece]].astype(np.float64)
        exact[piece] = nearness(items, query[candidate_queries[piece]].astype(np.float64),
                                similarity)
    return exact


def _merged(best_ids, best_keys, candidate_queries, candidate_ids, candidate_keys):
    """The k best of each query's best so far and its new candidates, by (key, id)."""
    n_queries, k = best_ids.shape
    queries = np.concatenate([np.repeat(np.arange(n_queries), k), candidate_queries])
    keys = np.concatenate([best_keys.ravel(), candidate_keys])
    ids = np.concatenate([best_ids.ravel(), candidate_ids])
    order = np.lexsort((ids, keys, queries))
    per_query = k + np.bincount(candidate_queries, minlength=n_queries)
    first = np.cumsum(per_query) - per_query
    best = order[first[:, None] + np.arange(k)]
    return ids[best], keys[best]


# --- the entry points --------------------------------------------------------------------------

def exact_neighbours(query: np.ndarray, database, k: int, similarity: str = "euclidean", *,
                     workers: int | None = None) -> np.ndarray:
    """Each query's exact ``k`` best items of ``database`` (an array, `StreamedFeatures`, or any
    sized source of ``(first row, rows)`` from ``database.chunks(chunk_rows)``) by
    ``similarity``, ties by database index: ``(n_queries, k)`` int64 ids, best first, the same
    whatever the chunks and ``workers`` (threads, each scanning its share of the queries; by
    default one per core, at most 8)."""
    check_choice("similarity", similarity, SIMILARITIES)
    query = _as_features(query, "query")
    check_int("k", k, 1, len(database), maximum_is="the database size")
    if not len(query):
        return np.zeros((0, k), np.int64)
    chunk_rows = max(1, _DATABASE_CHUNK_BYTES // (8 * query.shape[1]))
    if hasattr(database, "chunks"):  # StreamedFeatures, or another source of (first row, rows)
        chunks = database.chunks(chunk_rows)
    else:  # in memory: slices in the given dtype
        database = np.asarray(database)
        chunks = ((start, database[start:start + chunk_rows])
                  for start in range(0, len(database), chunk_rows))
    workers = resolved_workers(workers)
    # Until k items are known: placeholders of key +inf and an id after every real one.
    best_ids = np.full((len(query), k), np.iinfo(np.int64).max)
    best_keys = np.full((len(query), k), np.inf)
    # One BLAS thread per worker: BLAS's own threads spin between calls, taking the scan's cores.
    with ThreadPoolExecutor(workers) as pool, threadpool_limits(limits=1, user_api="blas"):
        threads = _Threads(pool, workers)
        for start, rows in chunks:
            rows = _as_features(rows, "database", finite_checked=True)  # by _chunk_candidates
            if rows.shape[1] != query.shape[1]:
                raise ValueError(f"query has dimension {query.shape[1]} but database has "
                                 f"dimension {rows.shape[1]}")
            queries, ids, keys = _chunk_candidates(query, rows, k, similarity, best_keys[:, -1],
                                                   threads)
            best_ids, best_keys = _merged(best_ids, best_keys, queries, ids + start, keys)
    return best_ids


def euclidean_neighbours(query: np.ndarray, database: np.ndarray, k: int) -> np.ndarray:
    """`exact_neighbours` with ``similarity="euclidean"``: ``(n_queries, k)`` int64 ids."""
    return exact_neighbours(query, database, k, "euclidean")

