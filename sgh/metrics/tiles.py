"""Counting kernels of the metrics engine: per-query histograms of one tile of distances.

A tile is a ``(b, c)`` block of Hamming distances (b queries x c database items). Each query
needs two histograms over the distances 0..bits: all items and relevant items. Three ways to get
them, all exact and giving identical integers:

* ``"bincount-classes"``: one ``np.bincount`` of keys (query, class, distance), classes being
  the distinct labels or label sets of :mod:`sgh.relevance`; the relevant histogram is then the
  sum over the query's relevant classes. No relevance mask is built. Needs few classes.
* ``"bincount-mask"``: one ``np.bincount`` of keys (query, relevant?, distance) from a boolean
  relevance block. Any number of classes.
* ``"sort-mask"``: the same keys, 8-bit (16-bit beyond 127 bits), sorted in place per row
  (numpy's radix sort) and cut with ``searchsorted``.

Why two counting methods: measured with numpy 2.4, ``np.bincount`` holds the GIL for its whole
run (so does ``np.add.at``), while XOR, popcount, comparisons and sorting release it. On the
2-core development machine (200 queries x 1M 64-bit codes, 10 labels, tiles of 2**18 pairs, idle
machine): bincount-classes 518 M pairs/s on 1 thread and 719 on 2 (1.39x); bincount-mask 450 and
663; sort-mask 413 and 749 (1.81x). Bincount is faster on one core, sorting scales with cores, so
the engine counts with bincount on one worker and sorts on two or more.

For ground-truth relevance (Recall K@N) the keys are the distances alone and the relevant
histogram comes from the distances of the few ground-truth ids.
"""

from __future__ import annotations

import numpy as np

from sgh.codes import popcount
from sgh.relevance import Relevance

STRATEGIES = ("bincount-classes", "bincount-mask", "sort-mask")
# Per-(class, distance) counting pays while one query's bins are few compared with a tile's
# items; beyond that a relevance mask is cheaper.
_MAX_BINS_PER_TILE_ITEM = 0.25


def choose_strategy(relevance: Relevance, levels: int, tile_items: int, workers: int) -> str:
    """The fastest kernel measured for this relevance and number of workers (module doc)."""
    if workers >= 2:
        return "sort-mask"
    if relevance.n_classes * levels <= _MAX_BINS_PER_TILE_ITEM * tile_items:
        return "bincount-classes"
    return "bincount-mask"


def _bincount_key_dtype(largest_key: int) -> np.dtype:
    # Unsigned 16/32-bit keys cast safely to intp inside bincount; uint64 would not.
    for dtype in (np.uint16, np.uint32):
        if largest_key <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.intp)


class TileCounter:
    """Adds tiles of distances to per-query ``(bins,)`` counts; splits them into histograms."""

    def __init__(self, relevance: Relevance, levels: int, tile_queries: int, strategy: str):
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES} or None, got {strategy!r}")
        self.relevance, self.levels, self.strategy = relevance, levels, strategy
        self.sparse = relevance.kind == "neighbours"  # keys are the distances alone
        if self.sparse:
            self.bins = levels
        elif strategy == "bincount-classes":
            self.bins = levels * relevance.n_classes
        else:
            self.bins = 2 * levels
        if strategy == "sort-mask":
            # Row offsets would widen the keys and slow the radix sort: rows are sorted
            # separately and offsets added to a copy only when a tile has several rows.
            self.key_dtype = np.dtype(np.uint8 if self.bins <= 256 else np.uint16)
            self.edges = np.arange(self.bins).astype(self.key_dtype)
        else:
            self.key_dtype = _bincount_key_dtype(tile_queries * self.bins - 1)
            self.row_offsets = (np.arange(tile_queries) * self.bins).astype(self.key_dtype)
        if strategy == "bincount-classes" and not self.sparse:
            classes = relevance.database_classes.astype(self.key_dtype)  # no uint8 overflow
            self.class_keys = classes * self.key_dtype.type(levels)

    def _keys(self, distances, queries, items, out) -> None:
        if self.sparse:
            out[...] = distances
        elif self.strategy == "bincount-classes":
            np.add(distances, self.class_keys[None, items], out=out)
        else:
            relevant = self.relevance.block(queries, items)
            np.multiply(relevant, self.key_dtype.type(self.levels), out=out)
            out += distances

    def add(self, histogram, distances, queries: slice, items: slice, keys) -> None:
        """Add the tile ``distances`` (b, c) to ``histogram`` (b, bins) int64; ``keys`` scratch."""
        n_tile, size = distances.shape[0], distances.size
        self._keys(distances, queries, items, keys)
        if self.strategy != "sort-mask":
            if n_tile > 1:  # a single row needs no offset (the common case for big databases)
                keys += self.row_offsets[:n_tile, None]
            counts = np.bincount(keys.reshape(-1), minlength=n_tile * self.bins)
        else:
            keys.sort(axis=1, kind="stable")  # radix sort, in place; releases the GIL
            if n_tile == 1:
                starts = np.searchsorted(keys[0], self.edges)
            else:  # rows sorted and offset by row: the flattened keys are sorted too
                wide = keys.astype(np.uint32)
                wide += (np.arange(n_tile, dtype=np.uint32) * self.bins)[:, None]
                edges = np.arange(n_tile * self.bins, dtype=np.uint32)
                starts = np.searchsorted(wide.reshape(-1), edges)
            counts = np.diff(starts, append=size)
        histogram += counts.reshape(n_tile, self.bins)

    def split(self, histogram, queries: slice, query_words, database_columns):
        """(all-items, relevant-items) ``(b, levels)`` histograms from ``(b, bins)`` counts."""
        n_tile = histogram.shape[0]
        if self.sparse:
            # Ground-truth ids: their distances directly, one small gather per query.
            ids, distinct = self.relevance.ids[queries], self.relevance.distinct[queries]
            gathered = database_columns[:, ids]  # (n_words, b, k)
            words = query_words[queries].T[:, :, None]
            id_distances = popcount(gathered ^ words).sum(axis=0, dtype=np.intp)
            id_distances += np.arange(n_tile)[:, None] * self.levels
            relevant = np.bincount(id_distances[distinct], minlength=n_tile * self.levels)
            return histogram, relevant.reshape(n_tile, self.levels)
        if self.strategy == "bincount-classes":
            by_class = histogram.reshape(n_tile, -1, self.levels)
            relevant_classes = self.relevance.class_relevance(queries).astype(np.int64)
            return by_class.sum(axis=1), (relevant_classes[:, None, :] @ by_class)[:, 0]
        by_relevance = histogram.reshape(n_tile, 2, self.levels)
        return by_relevance.sum(axis=1), by_relevance[:, 1]
