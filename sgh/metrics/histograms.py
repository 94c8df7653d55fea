"""The metrics engine: per-query histograms of Hamming distances, from compiled kernels on threads.

With ``bits``-bit codes a ranking has only ``bits + 1`` distinct distances, so everything a
tie-aware metric needs about a query is two histograms over the distances 0..bits: how many
database items, and how many relevant items, lie at each distance. Every tie-aware metric is a
function of those histograms (no sort), so one scan serves any number of metrics. Tie-broken
("stable") top-K metrics also need each relevant item's rank with ties broken by database index;
one more pass in database order gets those from the histograms and running counters.

The scan (:mod:`sgh.metrics.kernels`): the database is sorted once by relevance class (label,
or label set) so that, for a given query, relevance is constant over each class segment. Queries
are split into tasks on a thread pool; the kernels release the GIL. Results never depend on the
number of workers: every count is an exact integer, and each query's stable sums are accumulated
by one thread in database order.

Memory (bytes; W = 8 * ceil(bits / 64)) is linear in the database and the queries, never in
their product:
* shared: the database words grouped by class, W per item (while grouping, also the words in
  index order, W, and the sort order, 8); with stable cut-offs the index-order words and the
  item classes (8 per item); the query words, W per query; the output, 16 * (bits + 1) per
  query (+ 16 per stable cut-off); the relevance's class ids (1 to 8 per item);
* per task (one per worker at a time): the class relevance table, at most
  max(:data:`TABLE_CELLS`, 4 x classes) bytes (multi-label: plus 8 per cell and label word
  while built), and 16 * (bits + 1) per task query.
"The database" is one shard: beyond :data:`SHARD_ITEMS` items it is scanned shard by shard, so
the shared copies stop growing, and the database codes may be a memory map.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import numpy as np

from sgh.codes import popcount, validate_codes
from sgh.errors import check_int
from sgh.metrics import kernels
from sgh.metrics.relevance import Relevance, label_relevance

DEFAULT_WORKERS = max(1, min(8, os.cpu_count() or 1))
# Tasks per worker: enough to balance uneven finishing times, few enough that the per-task
# Python overhead is nothing next to a task's scan.
TASKS_PER_WORKER = 4
# Cells (task queries x classes) of a task's class relevance table: bounds its memory when
# multi-label data have very many distinct label sets.
TABLE_CELLS = 1 << 21
# Database items scanned at a time, in index order: the histograms add up over shards and the
# stable ranks carry over from one to the next, so the results are the same.
SHARD_ITEMS = 1 << 24


@dataclass(frozen=True)
class DistanceHistograms:
    """Per-query distance histograms, and stable top-K statistics if requested.

    ``counts`` and ``relevant``: ``(n_queries, bits + 1)`` int64, all / relevant database items
    at each Hamming distance. With ties broken by database index, for each of the sorted,
    distinct ``stable_cutoffs`` K (<= n_database), ``(n_queries, n_cutoffs)`` or None:
    ``stable_precision_sums``, the sum of precision at the ranks <= K of relevant items, and
    ``stable_relevant_retrieved``, the relevant items among the first K.
    """

    counts: np.ndarray
    relevant: np.ndarray
    n_database: int
    stable_cutoffs: np.ndarray
    stable_precision_sums: np.ndarray | None = None
    stable_relevant_retrieved: np.ndarray | None = None


class _Scan:
    """Shared read-only state of one scan of a database (or shard); :meth:`histograms` and
    :meth:`stable` are called once per task, on threads. ``grouped=False`` skips grouping the
    database by class, which only :meth:`histograms` needs."""

    def __init__(self, query_codes, database_codes, bits, relevance: Relevance, cutoffs,
                 grouped: bool = True):
        self.relevance, self.levels, self.cutoffs = relevance, bits + 1, cutoffs
        self.query_words = kernels.code_words(query_codes)
        words = kernels.code_words(database_codes)
        n_database = words.shape[0]
        self.by_ids = relevance.kind == "neighbours"
        if self.by_ids:
            # Ground-truth relevance is per item, not per class: one segment, nothing relevant
            # in the scan; the few relevant items are counted apart (_neighbour_histogram).
            self.grouped_words = words
            self.segment_starts = np.array([0, n_database], dtype=np.int64)
            self.item_classes = np.zeros(0, dtype=np.int64)
        elif not grouped:
            self.item_classes = relevance.database_classes.astype(np.int64)
        else:
            classes = relevance.database_classes
            # Narrowest dtype first: numpy's stable sort is a radix sort for 8- and 16-bit keys.
            narrow = classes.astype(np.min_scalar_type(max(relevance.n_classes - 1, 0)))
            order = np.argsort(narrow, kind="stable")
            del narrow
            self.grouped_words = words[order]
            del order
            sizes = np.bincount(classes, minlength=relevance.n_classes)
            self.segment_starts = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
            self.item_classes = classes.astype(np.int64) if cutoffs.size else None
        # The stable pass walks the database in index order; the neighbour counts gather from it.
        self.index_words = words if (cutoffs.size or self.by_ids) else None

    @property
    def n_segments(self) -> int:
        return 1 if self.by_ids else self.relevance.n_classes

    def _segment_relevance(self, queries: slice) -> np.ndarray:
        """``(b, n_segments)`` uint8: which class segments are relevant to each query."""
        if self.by_ids:
            return np.zeros((queries.stop - queries.start, 1), dtype=np.uint8)
        table = self.relevance.class_relevance(queries)
        return np.ascontiguousarray(table, dtype=bool).view(np.uint8)

    def _neighbour_histogram(self, queries: slice) -> np.ndarray:
        """``(b, levels)`` int64: each query's distinct ground-truth ids per distance."""
        ids, distinct = self.relevance.ids[queries], self.relevance.distinct[queries]
        ids = np.clip(ids, 0, len(self.index_words) - 1)  # a shard's outside ids: not distinct
        differing = self.index_words[ids] ^ self.query_words[queries][:, None, :]
        distances = popcount(differing).sum(axis=2, dtype=np.intp)  # (b, k)
        keys = distances + np.arange(ids.shape[0])[:, None] * self.levels
        counts = np.bincount(keys[distinct], minlength=ids.shape[0] * self.levels)
        return counts.reshape(ids.shape[0], self.levels)

    def histograms(self, queries: slice) -> np.ndarray:
        """``(b, 2, levels)`` int64 of a task (a contiguous range of queries): non-relevant and
        relevant items at each distance."""
        n_task = queries.stop - queries.start
        query_words = self.query_words[queries]
        table = self._segment_relevance(queries)
        split = np.zeros((n_task, 2, self.levels), dtype=np.int64)
        kernels.relevance_histograms(query_words, self.grouped_words.reshape(-1),
                                     self.segment_starts, table, split,
                                     kernels.items_per_tile(self.grouped_words),
                                     kernels.word_count(self.grouped_words))
        if self.by_ids:
            relevant = self._neighbour_histogram(queries)
            split[:, 0] -= relevant
            split[:, 1] = relevant
        return split

    def stable(self, queries: slice, ranks: tuple[np.ndarray, np.ndarray],
               precision_sums: np.ndarray, found: np.ndarray) -> None:
        """Add this database's (shard's) stable statistics of a task to ``precision_sums`` and
        ``found``, carrying the task's ``ranks`` (:func:`kernels.initial_ranks`) along."""
        ids = (self.relevance.ids[queries].astype(np.int64) if self.by_ids
               else np.zeros((queries.stop - queries.start, 0), dtype=np.int64))
        kernels.stable_statistics(self.query_words[queries], self.index_words.reshape(-1),
                                  self.item_classes, self._segment_relevance(queries), ids,
                                  ranks[0][queries], ranks[1][queries], self.cutoffs,
                                  precision_sums[queries], found[queries],
                                  kernels.items_per_tile(self.index_words),
                                  kernels.word_count(self.index_words))


def _task_slices(n_queries: int, n_segments: int, workers: int) -> list[slice]:
    """Contiguous query ranges, multiples of the kernel's query block, table-bounded."""
    block = kernels.QUERY_BLOCK
    per_task = n_queries if workers == 1 else -(-n_queries // (TASKS_PER_WORKER * workers))
    per_task = min(per_task, TABLE_CELLS // max(1, n_segments))
    per_task = max(block, -(-per_task // block) * block)
    return [slice(start, min(start + per_task, n_queries))
            for start in range(0, n_queries, per_task)]


def distance_histograms(query_codes: np.ndarray, database_codes: np.ndarray, bits: int,
                        relevance: Relevance, stable_cutoffs: Iterable[int] = (),
                        workers: int | None = None) -> DistanceHistograms:
    """Scan all (query, database item) pairs of packed uint8 codes once (see the module doc).

    ``relevance``: of :mod:`sgh.metrics.relevance`, sized to these codes. ``stable_cutoffs``: K
    >= 1 of the stable statistics, clipped to n_database (empty: histograms only).
    """
    query_codes = validate_codes(query_codes, bits, "query codes")
    database_codes = validate_codes(database_codes, bits, "database codes")
    n_queries, n_database = query_codes.shape[0], database_codes.shape[0]
    if n_database == 0:
        raise ValueError("the database is empty (0 codes); nothing can be retrieved")
    if (relevance.n_queries, relevance.n_database) != (n_queries, n_database):
        raise ValueError(f"relevance is for {relevance.n_queries} queries x "
                         f"{relevance.n_database} database items but the codes are "
                         f"{n_queries} x {n_database}")
    workers = DEFAULT_WORKERS if workers is None else check_int("workers", workers, 1)
    cutoffs = np.unique(np.minimum(np.asarray(list(stable_cutoffs), dtype=np.int64), n_database))
    shards = [(start, min(start + SHARD_ITEMS, n_database))
              for start in range(0, n_database, SHARD_ITEMS)]

    def scan_of(shard: tuple[int, int], stage_cutoffs: np.ndarray, grouped: bool) -> _Scan:
        start, stop = shard
        return _Scan(query_codes, database_codes[start:stop], bits,
                     relevance if len(shards) == 1 else relevance.shard(start, stop),
                     stage_cutoffs, grouped)

    # Pass 1: the histograms, summed over the shards. With one shard its scan also serves
    # pass 2; with several, each pass builds only what it needs of a shard.
    split = np.zeros((n_queries, 2, bits + 1), dtype=np.int64)
    scan = None
    for shard in shards:
        scan = scan_of(shard, cutoffs if len(shards) == 1 else cutoffs[:0], grouped=True)
        tasks = _task_slices(n_queries, scan.n_segments, workers)
        for task, part in zip(tasks, _map(scan.histograms, tasks, workers), strict=True):
            split[task] += part
    # Pass 2 (stable cut-offs): ranks carried from shard to shard, in index order.
    precision_sums = np.zeros((n_queries, cutoffs.size))
    found = np.zeros((n_queries, cutoffs.size), dtype=np.int64)
    if cutoffs.size:
        ranks = kernels.initial_ranks(split)
        for shard in shards:
            if len(shards) > 1:
                scan = scan_of(shard, cutoffs, grouped=False)
            tasks = _task_slices(n_queries, scan.n_segments, workers)
            _map(partial(scan.stable, ranks=ranks, precision_sums=precision_sums, found=found),
                 tasks, workers)
    return DistanceHistograms(counts=split.sum(axis=1), relevant=split[:, 1].copy(),
                              n_database=n_database, stable_cutoffs=cutoffs,
                              stable_precision_sums=precision_sums if cutoffs.size else None,
                              stable_relevant_retrieved=found if cutoffs.size else None)


def _map(function, tasks: list[slice], workers: int) -> list:
    if workers == 1 or len(tasks) <= 1:
        return [function(task) for task in tasks]
    with ThreadPoolExecutor(max_workers=min(workers, len(tasks))) as pool:
        return list(pool.map(function, tasks))


def label_histograms(query_codes: np.ndarray, database_codes: np.ndarray, bits: int,
                     query_labels: np.ndarray, database_labels: np.ndarray,
                     stable_cutoffs: Iterable[int] = (),
                     workers: int | None = None) -> DistanceHistograms:
    """:func:`distance_histograms` with relevance from labels (1-D single or 2-D multi-label)."""
    query_codes = validate_codes(query_codes, bits, "query codes")
    database_codes = validate_codes(database_codes, bits, "database codes")
    for name, labels, codes in (("query", query_labels, query_codes),
                                ("database", database_labels, database_codes)):
        shape = np.shape(labels)
        if len(shape) not in (1, 2) or shape[0] != codes.shape[0]:
            raise ValueError(f"{name}_labels must have one label (1-D) or one 0/1 label row "
                             f"(2-D) per {name} code ({codes.shape[0]}), got shape {shape}")
    relevance = label_relevance(query_labels, database_labels)
    return distance_histograms(query_codes, database_codes, bits, relevance, stable_cutoffs,
                               workers)
