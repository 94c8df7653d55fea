"""Exact nearest neighbours in the original feature space (ground truth for Recall K@N).

`exact_neighbours(query, database, k, similarity)` is the entry point: bounded memory, for an
in-memory or streamed database, by the split's similarity (`sgh/data/similarity.py`):

- euclidean (and angular, whose features are unit-normalised when loaded, so that their
  Euclidean order is the angular one): the SGH paper's protocol, the exact k nearest database
  items of each query by squared L2 distance, ties broken by database index;
- inner_product (maximum inner product search): the k database items of largest <q, x>, ties
  broken by database index.

"Exact" matters: a float32 expansion |q|^2 - 2 q.x + |x|^2 (or a float32 q.x) can swap
near-tied neighbours, and then Recall K@N of a perfect hash is not 1. So the ranking keys are
float64 values computed directly from the given features (`sgh.data.similarity.nearness`:
sum((x - q)^2), or -sum(q * x)), and only candidates are found the fast way, one database
chunk at a time:

1. Centre. The chunk is shifted by its mean m, and for distances the queries by the same m:
   |(q - m) - (x - m)|^2 = |q - x|^2, and <q, x - m> = <q, x> - <q, m> differs from <q, x> by
   a constant per query, so neither order over x changes (shifting the queries too would not
   keep the inner-product order: <q - m, x> - <q, x> = -<m, x> depends on x). The shift is no
   part of the keys, so any m is exact, and each chunk may have its own (a streamed database
   is read once); the mean only makes the norms small. The rounding error of the fast product
   grows with the norms: uncentred, data far from the origin (SIFT-like items + 1000) put
   every item within the margin, and the exact ranking of all of them dominates.
2. Fast product. The centred values, rounded once to float32, go through one float32 matrix
   product (sgemm, faster than float64's: `docs/performance.md`); features whose values float32
   does not hold exactly (float64, wide integers) keep float64 products, since their
   neighbours may differ below float32's resolution. A compiled scan
   (`sgh.data.neighbour_kernels`, as is the centring) keeps each query's k smallest
   approximate keys in a heap and lists every item within a rigorous margin of the k-th
   (`_margins`), so no item of the chunk's exact top k is missed; nor, below a ceiling from
   the exact k-th key found in earlier chunks, any item that could still enter the k best
   (`_ceilings`): after the first chunks few items pass.
3. Exact ranking. The listed candidates' float64 keys are merged with the k best so far,
   ordered by (key, database index) with `np.lexsort`.

The results are those of ranking every item by its float64 key: a cached ground truth
(`sgh/artifacts/ground_truth_cache.py`) stays valid across changes of method.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import threadpool_limits  # a dependency of scikit-learn

from sgh.data.neighbour_kernels import centre_rows, column_sums, offer_items
from sgh.data.similarity import SIMILARITIES, nearness
from sgh.errors import check_choice, check_int

# Database rows per chunk of `exact_neighbours`: 64 MiB as float64 (65,536 rows at 128
# dimensions); each chunk is centred on its own mean, into one float32 copy of half that.
_DATABASE_CHUNK_BYTES = 1 << 26
# The products of one block of database rows against one worker's block of queries: 4 MiB
# (2,048 rows by 500 queries), which stays in cache between the matrix product that writes it
# and the scan that reads it.
_PRODUCT_BLOCK_BYTES = 1 << 22
# Queries per product block by default (a worker's share if smaller): enough for an efficient
# matrix product.
_QUERY_BLOCK = 1024
# Candidate rows gathered as float64 for their exact keys at a time.
_CANDIDATE_PIECE_BYTES = 1 << 25
# The heaps and candidate lists of one group of queries at a time.
_STATE_BYTES = 1 << 26
# float32 products are used only when no value can come near float32's range.
_FLOAT32_SAFE = float(np.finfo(np.float32).max) / 16
_UNIT_ROUNDOFF_64 = float(np.finfo(np.float64).eps) / 2


def default_workers() -> int:
    """Threads of the centring and the scan: one per core, at most 8."""
    return max(1, min(8, os.cpu_count() or 1))


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


def _holds_float32_exactly(dtype: np.dtype) -> bool:
    """Whether float32 represents every value of ``dtype`` (float16/32, integers up to 16 bits)."""
    if np.issubdtype(dtype, np.integer):
        return dtype.itemsize <= 2
    return dtype.itemsize <= 4


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
    """Runs work over row ranges on the worker threads (the matrix products and the compiled
    kernels release the GIL)."""

    def __init__(self, pool: ThreadPoolExecutor | None, workers: int):
        self.pool = pool
        self.workers = workers

    def over_rows(self, n_rows: int, task, min_rows: int) -> None:
        """``task(part, start, stop)`` over at most ``workers`` consecutive ranges of
        ``0..n_rows`` of ``min_rows`` rows at least (less work than that is not worth a
        thread), numbered ``part`` = 0, 1, ..."""
        parts = max(1, min(self.workers, n_rows // min_rows))
        ranges = [(part, n_rows * part // parts, n_rows * (part + 1) // parts)
                  for part in range(parts)]
        if self.pool is None or parts == 1:
            for bound in ranges:
                task(*bound)
            return
        for _ in self.pool.map(lambda bound: task(*bound), ranges):  # re-raises errors
            pass


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

    Notation: a = q - m (euclidean) or q (inner product) and b = x - m exactly, their rounded
    centred values a', b' with Q = |a'| (``query_norms``), P = max |b'| (``largest_norm``);
    u, gamma_n the unit roundoff and error constant of the working precision, u64, g_n of
    float64. The approximate key is |b'|^2 - 2 a'.b' (= |a' - b'|^2 - |a'|^2) or -a'.b'.

    - The matrix product: |computed a'.b' - a'.b'| <= gamma_d Q P (any summation order); the
      squared norms (float64 sums) and the key's own rounding add g_d P^2 + u64 (P^2 + 2QP).
    - The centring: each component is rounded at most twice (float64 difference, then the
      working precision), |b' - b| <= rho |b|, rho = u + u64 + u u64, so
      | |a' - b'|^2 - |a - b|^2 | <= rho (2 + rho) (|a| + |b|)^2, about 2u (Q + P)^2.
    - The float64 key itself: sum((x - q)^2) is within g_(d+2) |q - x|^2 of the exact value,
      and |q - x| <= |a| + |b|; -sum(q * x) within g_d |q| |x|, |x| <= P + |m|.

    Every term fits in E = (gamma_(d+4) + 4 g_(d+4)) (Q + P)^2 for distances, and in
    E = Q (gamma_(d+4) P + 4 g_(d+4) (P + |m|)) for inner products (2QP <= (Q + P)^2; the
    extra 4 terms of gamma_(d+4) cover the centring, the g slack the threshold's float64
    rounding). Then every item of the exact top k has a key <= K_(k) + 2E, K_(k) the k-th
    smallest key: the k items of smallest key have float64 keys <= K_(k) + E, so the k-th
    float64 key is too. The margin is twice that, so that the rounding of the bound's own
    arithmetic (norms, square roots) cannot matter.
    """
    gamma_work = _gamma(dim + 4, float(np.finfo(work).eps) / 2)
    gamma_64 = 4 * _gamma(dim + 4, _UNIT_ROUNDOFF_64)
    if maximum:
        return 4.0 * query_norms * (gamma_work * largest_norm
                                    + gamma_64 * (largest_norm + shift_norm))
    return 4.0 * (gamma_work + gamma_64) * (query_norms + largest_norm) ** 2


def _ceilings(best_kth: np.ndarray, offsets: np.ndarray, margins: np.ndarray) -> np.ndarray:
    """Per query, the largest approximate key an item of this chunk may have and still enter
    the k best: ``best_kth + offsets + margins / 2`` (+inf while fewer than k are known).

    ``best_kth`` is the k-th smallest float64 key of the earlier chunks; an item of this chunk
    (whose ids come later, so it loses ties) enters only if its float64 key F is below it. Its
    approximate key is within E (``margins`` = 4E, `_margins`) of F + c, c = -|a'|^2 for
    distances and <q, m> for inner products, computed here as ``offsets`` within far less
    than E; so F < best_kth implies a key < best_kth + c + E, and the ceiling, with E of
    slack for the rounding of c and of the sum, is above that.
    """
    return best_kth + offsets + margins / 2


def _chunk_candidates(query: np.ndarray, rows: np.ndarray, k: int, similarity: str,
                      best_kth: np.ndarray, block_size: int | None, threads: _Threads
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The items of ``rows`` that may belong to a query's k best, given the k-th best float64
    key ``best_kth`` of earlier chunks: ``(queries, ids into rows, float64 keys)``, aligned;
    see the module doc."""
    maximum = similarity == "inner_product"
    n_rows, dim = rows.shape
    work = (np.float32 if _holds_float32_exactly(query.dtype)
            and _holds_float32_exactly(rows.dtype) else np.float64)
    shift = _mean(rows, threads)
    query_shift = np.zeros(dim) if maximum else shift
    while True:
        centred, item_norms = _centred(rows, shift, work, threads)
        if not np.isfinite(item_norms).all():
            # NaN or infinite rows make every norm so; a precise check names them (the norms
            # replace a separate pass over every chunk).
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
    # Keys: |b'|^2 - 2 a'.b' = |a' - b'|^2 - |a'|^2 (euclidean), or -a'.b' (inner product).
    item_terms = np.zeros(n_rows) if maximum else item_norms
    product_scale = -1.0 if maximum else -2.0
    offsets = query.astype(np.float64) @ shift if maximum else -query_squared_norms
    ceilings = _ceilings(best_kth, offsets, margins)

    # A list is expected to hold about k (1 + ln(rows / k)) entries in the first chunk, far
    # fewer later, plus the margin's near ties; queries whose list overflows are scanned again
    # with a 16 times longer one.
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
                                           product_scale, k, capacity, block_size, threads)
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
          block_size, threads):
    """Candidates of a group of queries against a centred chunk: ``(positions, ids, counts)``,
    each candidate's query (position in the group) and row id, and each query's list length,
    -1 where its list overflowed (such queries list no candidate)."""
    n_queries, n_rows = len(centred_query), len(centred)
    heaps = np.full((n_queries, k), np.inf)
    thresholds = ceilings.copy()
    keys = np.empty((n_queries, capacity))
    ids = np.empty((n_queries, capacity), np.int64)
    counts = np.zeros(n_queries, np.int64)
    query_block = block_size or _QUERY_BLOCK

    def scan_queries(_part, first, last):
        """One worker's queries: its own matrix products (BLAS limited to one thread by
        `exact_neighbours`) and scans, on its own heaps and lists."""
        block = min(query_block, last - first)
        item_block = min(n_rows, max(64, _PRODUCT_BLOCK_BYTES // (block * centred.itemsize)))
        buffer = np.empty(block * item_block, centred.dtype)
        for q0 in range(first, last, block):
            mine = slice(q0, min(q0 + block, last))
            for i0 in range(0, n_rows, item_block):
                i1 = min(i0 + item_block, n_rows)
                # Items x queries: the matrix product packs the small query block once per
                # call and streams the items, faster than queries x items. A contiguous view
                # of the buffer, which matmul fills in place.
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

def exact_neighbours(query: np.ndarray, database, k: int, similarity: str = "euclidean",
                     chunk_rows: int | None = None, block_size: int | None = None,
                     workers: int | None = None) -> np.ndarray:
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
        block_size: queries per matrix product; default 1024, or a worker's share if fewer.
        workers: threads (default `default_workers`), each running the matrix products and
            scans of its share of the queries, with BLAS limited to one thread meanwhile.

    Returns:
        ``(n_queries, k)`` int64 database indices, best first; the same ids, in the same order,
        whatever ``chunk_rows``, ``block_size`` and ``workers``.

    Method and memory: the module doc.
    """
    from sgh.data.streamed_features import StreamedFeatures

    check_choice("similarity", similarity, SIMILARITIES)
    query = _as_features(query, "query")
    n_database = len(database)
    check_int("k", k, 1, n_database, maximum_is="the database size")
    if block_size is not None:
        check_int("block_size", block_size, 1)
    kind = "inner_product" if similarity == "inner_product" else "euclidean"
    if not len(query):
        return np.zeros((0, k), np.int64)
    if chunk_rows is None:
        chunk_rows = max(1, _DATABASE_CHUNK_BYTES // (8 * query.shape[1]))
    if isinstance(database, StreamedFeatures):
        chunks = database.chunks(chunk_rows)
    else:  # in memory: slices in the given dtype (float64 features stay float64), each checked
        database = np.asarray(database)
        chunks = ((start, database[start:start + chunk_rows])
                  for start in range(0, len(database), chunk_rows))
    workers = default_workers() if workers is None else max(1, int(workers))
    # Placeholders until k items are known: key +inf and an id after every real one, so that
    # any real item displaces them.
    best_ids = np.full((len(query), k), np.iinfo(np.int64).max)
    best_keys = np.full((len(query), k), np.inf)
    # One BLAS thread per worker, each worker running the products and scans of its own
    # queries: BLAS's own threads spin between calls and take the cores from the scan, worst
    # when another job shares the machine.
    with ThreadPoolExecutor(workers) as pool, threadpool_limits(limits=1, user_api="blas"):
        threads = _Threads(pool if workers > 1 else None, workers)
        for start, rows in chunks:
            rows = np.asarray(rows)
            if rows.ndim != 2 or not (np.issubdtype(rows.dtype, np.floating)
                                      or np.issubdtype(rows.dtype, np.integer)):
                _as_features(rows, "database")  # raises, naming what is wrong
            if rows.shape[1] != query.shape[1]:
                raise ValueError(f"query has dimension {query.shape[1]} but database has "
                                 f"dimension {rows.shape[1]}")
            queries, ids, keys = _chunk_candidates(query, rows, k, kind, best_keys[:, -1],
                                                   block_size, threads)
            best_ids, best_keys = _merged(best_ids, best_keys, queries, ids + start, keys)
    return best_ids


def euclidean_neighbours(
    query: np.ndarray, database: np.ndarray, k: int, block_size: int | None = None
) -> np.ndarray:
    """`exact_neighbours` with ``similarity="euclidean"``: ``(n_queries, k)`` int64 ids."""
    return exact_neighbours(query, database, k, "euclidean", block_size=block_size)

