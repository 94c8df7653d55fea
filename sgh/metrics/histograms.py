"""The metrics engine: per-query histograms of Hamming distances, computed tile by tile on threads.

With ``bits``-bit codes a ranking has only ``bits + 1`` distinct distances, so everything a
tie-aware metric needs about a query is two histograms over the distances 0..bits: how many
database items, and how many relevant items, lie at each distance. Every tie-aware metric of
this package is a function of those histograms (O(n_database + bits) per query, no sort), so one
scan serves any number of metrics. Tie-broken ("stable") top-K metrics also need the order of the
items inside the cut-off level; the scan then keeps each query's distance row and ranks only the
items up to the cut-off distance (a full stable sort only for K >= n_database, i.e. mAP@all).

Work is split into tiles of about :data:`TILE_PAIRS` (query, item) pairs: XOR + popcount into
reused buffers, then the tile is counted by one of the kernels of :mod:`sgh.metrics.tiles`
(``bincount`` of (query, class, distance) keys, or a radix sort of (relevant?, distance) keys).
Tiles are grouped into tasks of about :data:`TASK_PAIRS` pairs run by a thread pool over query
ranges. XOR, popcount and sorting release the GIL but ``np.bincount`` does not (numpy 2.4), so
the engine uses bincount on one worker and the sort kernel, which scales ~1.8x on 2 cores, on
more.
Results never depend on the number of workers or the kernel: every count is an exact integer.

Memory, per worker: the tile buffers, about 21 bytes per tile pair (XOR word 8, distance 1,
key <= 4, ``bincount``'s intp copy 8), i.e. ~5.5 MB (plus a relevance mask, 1 byte per pair and
its temporaries, for the mask kernels); the task's per-query counts (at most ~4 MB with the
class kernel, whose bins are kept <= tile items / 4); with ``stable`` cut-offs also one distance
row per tile query (``n_database`` bytes each) and its sort (8 bytes per candidate item, so
8 x n_database for K >= n_database). Shared: the database words (8 bytes per item per 64 bits),
the class keys (<= 4 bytes per item) and the output, 16 x (bits + 1) bytes per query. For 1,000
queries x 1,000,000 64-bit codes on 2 workers that is ~35 MB, whatever the number of queries.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from sgh.codes import as_words, distance_dtype, hamming_tile, validate_codes
from sgh.metrics.tiles import TileCounter, choose_strategy
from sgh.relevance import Relevance, label_relevance

# Measured on the 2-core EPYC (1 MB L2 per core, 1,000 x 1M 64-bit codes): tiles of 2**16, 2**17
# and 2**18 pairs gave 490, 505, 509 M pairs/s on 1 thread and 538, 669, 728 on 2: fewer, larger
# tiles mean fewer numpy calls, whose Python overhead holds the GIL.
TILE_PAIRS = 1 << 18
TASK_PAIRS = 1 << 21
DEFAULT_WORKERS = max(1, min(8, os.cpu_count() or 1))


@dataclass(frozen=True)
class DistanceHistograms:
    """Per-query distance histograms, and stable top-K statistics if requested.

    Attributes:
        counts: ``(n_queries, bits + 1)`` int64, database items at each Hamming distance.
        relevant: ``(n_queries, bits + 1)`` int64, relevant database items at each distance.
        n_database: number of database items.
        stable_cutoffs: ``(n_cutoffs,)`` int64 cut-offs K (<= n_database) of the stable arrays.
        stable_precision_sums: ``(n_queries, n_cutoffs)`` float64 or None: with ties broken by
            database index, the sum over relevant items ranked <= K of precision at their rank.
        stable_relevant_retrieved: ``(n_queries, n_cutoffs)`` int64 or None: relevant items
            among the first K of that ranking.
    """

    counts: np.ndarray
    relevant: np.ndarray
    n_database: int
    stable_cutoffs: np.ndarray
    stable_precision_sums: np.ndarray | None = None
    stable_relevant_retrieved: np.ndarray | None = None


def tile_shape(n_database: int) -> tuple[int, int]:
    """(queries, items) of a tile: about :data:`TILE_PAIRS` pairs, database split evenly."""
    tile_queries = int(np.clip(TILE_PAIRS // n_database, 1, 1024))
    # Equal chunks (69,000 items -> 2 x 34,500, not 65,536 + 3,464).
    n_chunks = -(-n_database // max(1, TILE_PAIRS // tile_queries))
    return tile_queries, -(-n_database // n_chunks)


def check_workers(workers: int | None) -> int:
    if workers is None:
        return DEFAULT_WORKERS
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers must be a positive integer or None, got {workers!r}")
    return int(workers)


class _Scan:
    """Shared read-only state of one scan; :meth:`run` is called once per task, on threads."""

    def __init__(self, query_codes, database_codes, bits, relevance, stable_cutoffs, counter):
        self.query_words = as_words(query_codes)
        self.database_columns = np.ascontiguousarray(as_words(database_codes).T)
        self.distance_dtype = distance_dtype(query_codes.shape[1])
        self.relevance, self.levels = relevance, bits + 1
        self.n_database = database_codes.shape[0]
        self.tile_queries, self.tile_items = tile_shape(self.n_database)
        self.stable_cutoffs = stable_cutoffs
        self.stable_kmax = int(stable_cutoffs.max()) if stable_cutoffs.size else 0
        self.counter = counter

    def add_tile_row(self, queries: slice, histogram, buffers, rows) -> None:
        """Add to ``histogram`` (``(b, bins)`` int64) the counts of queries x whole database."""
        n_tile = queries.stop - queries.start
        scratch, distances, keys = buffers
        for start in range(0, self.n_database, self.tile_items):
            items = slice(start, min(start + self.tile_items, self.n_database))
            size = n_tile * (items.stop - items.start)
            # Flat buffers reshaped per tile keep every view contiguous (ravel without a copy).
            tile = distances[:size].reshape(n_tile, -1)
            hamming_tile(
                self.query_words[queries],
                self.database_columns[:, items],
                out=tile,
                scratch=scratch[:size].reshape(n_tile, -1),
            )
            if rows is not None:
                rows[:n_tile, items] = tile
            self.counter.add(histogram, tile, queries, items, keys[:size].reshape(n_tile, -1))

    def split(self, histogram: np.ndarray, queries: slice) -> tuple[np.ndarray, np.ndarray]:
        return self.counter.split(histogram, queries, self.query_words, self.database_columns)

    def stable_row(self, query: int, row: np.ndarray, counts: np.ndarray):
        """Stable top-K statistics of one query: precision sums and relevant retrieved per K."""
        if self.stable_kmax >= self.n_database:
            order = np.argsort(row, kind="stable")
        else:
            # Only items up to the cut-off distance can be in the top K: rank just those.
            cut = int(np.searchsorted(np.cumsum(counts), self.stable_kmax))
            candidates = np.flatnonzero(row <= cut)
            order = candidates[np.argsort(row[candidates], kind="stable")[: self.stable_kmax]]
        positions = np.flatnonzero(self.relevance.gather(query, order))
        precisions = np.arange(1, positions.size + 1) / (positions + 1.0)
        prefix_sums = np.concatenate(([0.0], np.cumsum(precisions)))
        found = np.searchsorted(positions, self.stable_cutoffs)  # relevant items ranked <= K
        return prefix_sums[found], found

    def run(self, queries: slice):
        """Histograms (and stable statistics) of a task: a contiguous range of queries."""
        n_task = queries.stop - queries.start
        histogram = np.zeros((n_task, self.counter.bins), dtype=np.int64)
        counts = np.empty((n_task, self.levels), dtype=np.int64)
        relevant = np.empty_like(counts)
        precision_sums = np.empty((n_task, self.stable_cutoffs.size))
        found = np.empty((n_task, self.stable_cutoffs.size), dtype=np.int64)
        tile_pairs = self.tile_queries * self.tile_items
        buffers = (
            np.empty(tile_pairs, dtype=self.query_words.dtype),
            np.empty(tile_pairs, dtype=self.distance_dtype),
            np.empty(tile_pairs, dtype=self.counter.key_dtype),
        )
        rows = None
        if self.stable_cutoffs.size:
            rows = np.empty((self.tile_queries, self.n_database), dtype=self.distance_dtype)
        for start in range(queries.start, queries.stop, self.tile_queries):
            tile = slice(start, min(start + self.tile_queries, queries.stop))
            local = slice(tile.start - queries.start, tile.stop - queries.start)
            self.add_tile_row(tile, histogram[local], buffers, rows)
            if rows is None:
                continue
            # Stable statistics need the tile's rows now, before the buffer is reused.
            counts[local], relevant[local] = self.split(histogram[local], tile)
            for offset, query in enumerate(range(tile.start, tile.stop)):
                row_local = local.start + offset
                precision_sums[row_local], found[row_local] = self.stable_row(
                    query, rows[offset], counts[row_local]
                )
        if rows is None:  # one split per task: per-query Python overhead matters at ~70k items
            counts[:], relevant[:] = self.split(histogram, queries)
        return counts, relevant, precision_sums, found


def distance_histograms(
    query_codes: np.ndarray,
    database_codes: np.ndarray,
    bits: int,
    relevance: Relevance,
    stable_cutoffs: Iterable[int] = (),
    workers: int | None = None,
    strategy: str | None = None,
) -> DistanceHistograms:
    """Scan all (query, database item) pairs once; see the module docstring for the method.

    Args:
        query_codes: ``(n_queries, ceil(bits/8))`` uint8 packed codes.
        database_codes: ``(n_database, ceil(bits/8))`` uint8 packed codes, n_database >= 1.
        bits: code length.
        relevance: from :func:`sgh.relevance.label_relevance` or ``neighbour_relevance``, sized
            to these queries and database.
        stable_cutoffs: cut-offs K >= 1 of the stable (ties by index) statistics; values above
            n_database are clipped to it. Empty: histograms only.
        workers: threads (default :data:`DEFAULT_WORKERS`); results do not depend on it.
        strategy: one of :data:`sgh.metrics.tiles.STRATEGIES` to force a counting method
            (tests, benchmarks); None chooses by speed (:func:`sgh.metrics.tiles.choose_strategy`).

    Returns:
        :class:`DistanceHistograms`.
    """
    query_codes = validate_codes(query_codes, bits, "query codes")
    database_codes = validate_codes(database_codes, bits, "database codes")
    n_queries, n_database = query_codes.shape[0], database_codes.shape[0]
    if n_database == 0:
        raise ValueError("the database is empty (0 codes); nothing can be retrieved")
    if (relevance.n_queries, relevance.n_database) != (n_queries, n_database):
        raise ValueError(
            f"relevance is for {relevance.n_queries} queries x {relevance.n_database} database "
            f"items but the codes are {n_queries} x {n_database}"
        )
    workers = check_workers(workers)
    cutoffs = np.minimum(np.asarray(list(stable_cutoffs), dtype=np.int64), n_database)
    tile_queries, tile_items = tile_shape(n_database)
    if strategy is None:
        strategy = choose_strategy(relevance, bits + 1, tile_items, workers)
    counter = TileCounter(relevance, bits + 1, tile_queries, strategy)
    scan = _Scan(query_codes, database_codes, bits, relevance, cutoffs, counter)
    queries_per_task = scan.tile_queries * max(1, TASK_PAIRS // (scan.tile_queries * n_database))
    tasks = [
        slice(start, min(start + queries_per_task, n_queries))
        for start in range(0, n_queries, queries_per_task)
    ]
    if workers == 1 or len(tasks) <= 1:
        parts = [scan.run(task) for task in tasks]
    else:
        with ThreadPoolExecutor(max_workers=min(workers, len(tasks))) as pool:
            parts = list(pool.map(scan.run, tasks))
    levels = bits + 1
    if not parts:
        parts = [(np.zeros((0, levels), np.int64),) * 2 + (np.zeros((0, cutoffs.size)),) * 2]
    counts, relevant, precision_sums, found = (
        np.concatenate(arrays) for arrays in zip(*parts, strict=True)
    )
    return DistanceHistograms(
        counts=counts,
        relevant=relevant,
        n_database=n_database,
        stable_cutoffs=cutoffs,
        stable_precision_sums=precision_sums if cutoffs.size else None,
        stable_relevant_retrieved=found.astype(np.int64) if cutoffs.size else None,
    )


def label_histograms(
    query_codes: np.ndarray,
    database_codes: np.ndarray,
    bits: int,
    query_labels: np.ndarray,
    database_labels: np.ndarray,
    stable_cutoffs: Iterable[int] = (),
    workers: int | None = None,
) -> DistanceHistograms:
    """:func:`distance_histograms` with relevance from labels (1-D single or 2-D multi-label)."""
    query_codes = validate_codes(query_codes, bits, "query codes")
    database_codes = validate_codes(database_codes, bits, "database codes")
    for name, labels, codes in (
        ("query", query_labels, query_codes),
        ("database", database_labels, database_codes),
    ):
        shape = np.shape(labels)
        if len(shape) not in (1, 2) or shape[0] != codes.shape[0]:
            raise ValueError(
                f"{name}_labels must have one label (1-D) or one 0/1 label row (2-D) per {name} "
                f"code ({codes.shape[0]}), got shape {shape}"
            )
    relevance = label_relevance(query_labels, database_labels)
    return distance_histograms(
        query_codes, database_codes, bits, relevance, stable_cutoffs, workers
    )
