"""Compiled kernels of the metrics engine: fused XOR + popcount + per-distance counting.

Codes arrive as unsigned 64-bit words (:func:`code_words`): queries as ``(b, n_words)`` rows,
the database flattened to ``(n * n_words,)``. numba compiles each kernel once per number of words
(:func:`word_count`), so for codes of up to 64 bits the inner loop is a bare XOR + ``popcnt`` +
increment. Both kernels are ``nogil``, so the engine's threads run them in parallel:

* :func:`relevance_histograms` — for a block of queries, two histograms per query over the
  distances 0..bits: items that are not relevant, and items that are. The database is grouped
  into *segments* inside which relevance is the same for a given query (its label classes), so
  the inner loop is ``hist[query, relevant_of_segment, popcount(q ^ x)] += 1``.
* :func:`stable_statistics` — ties broken by database index, in one more pass in database order
  and without sorting: an item at distance d has rank ``#(items at distance < d) + #(items at
  distance d with a smaller index) + 1``; the first term comes from the histograms, the second
  from running counters. Likewise for the rank among relevant items, hence precision at every
  relevant rank, summed for each cut-off K.

Four queries share each database word load and update four independent histograms, which hides
the store-to-load latency of consecutive increments of one bin; the database is walked in tiles
of :data:`TILE_BYTES`, which stay in cache while every query passes over them.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic
from numba.np.unsafe.ndarray import to_fixed_tuple

from sgh.compiled import compiled

TILE_BYTES = 1 << 17  # database bytes walked by every query before moving on: inside L2
QUERY_BLOCK = 4  # queries sharing each database word load (relevance_histograms' unrolled body)


def code_words(packed: np.ndarray) -> np.ndarray:
    """Packed codes ``(n, n_bytes)`` uint8 as ``(n, ceil(n_bytes / 8))`` uint64 words, each row
    zero-padded (zero padding never adds to a distance)."""
    n_bytes = packed.shape[1]
    n_words = max(1, -(-n_bytes // 8))
    return np.pad(packed, ((0, 0), (0, 8 * n_words - n_bytes))).view(np.uint64)


def word_count(words: np.ndarray) -> tuple:
    """``(0,) * n_words`` for ``(n, n_words)`` words: the kernels' ``word_count`` argument.

    The number of words travels as the *length of a tuple*, part of the argument's type, so numba
    compiles one kernel per code length with the word loop unrolled (a runtime count is slower).
    """
    return (0,) * words.shape[1]


def items_per_tile(words: np.ndarray) -> int:
    """Database items per tile: :data:`TILE_BYTES` of ``words`` (read at call time)."""
    return max(1, TILE_BYTES // words.itemsize // words.shape[1])


@intrinsic
def _popcount64(typingctx, word):
    """The CPU's population count (LLVM ``ctpop``: one ``popcnt`` on x86-64)."""
    signature = types.uint64(types.uint64)

    def codegen(context, builder, sig, args):
        return builder.ctpop(args[0])

    return signature, codegen


@numba.njit(nogil=True, inline="always")
def _distance(query, database_words, item, n_words):
    """Distance of a query (a tuple of words) to item ``item`` of the flat database words."""
    total = 0
    first = item * n_words
    for word in range(n_words):  # unrolled: n_words is a compile-time constant
        total += _popcount64(query[word] ^ database_words[first + word])
    return total


@compiled
def relevance_histograms(query_words, database_words, segment_starts, segment_relevant, out,
                         tile_items, word_count):
    """Add each query's per-distance counts of non-relevant and relevant items to ``out``.

    Args:
        query_words: ``(b, n_words)`` uint64 (:func:`code_words`).
        database_words: ``(n * n_words,)`` uint64, the database's words flattened, grouped into
            segments: segment s is items ``segment_starts[s] .. segment_starts[s + 1] - 1``
            (``segment_starts``: int64, non-decreasing from 0 to n; compiled code checks no
            bounds, so a wrong one writes out of bounds).
        segment_relevant: ``(b, n_segments)`` uint8, 1 where segment s is relevant to query j.
        out: ``(b, 2, levels)`` int64, levels >= largest distance + 1: ``out[j, 0, d]`` +=
            non-relevant items at distance d, ``out[j, 1, d]`` += relevant ones.
    """
    n_words = len(word_count)
    n_queries, levels = out.shape[0], out.shape[2]
    n_items = segment_starts[-1]
    # int32 per tile (<= 2**31 items) then added to int64: half the cache footprint.
    tile_counts = np.zeros((QUERY_BLOCK, 2, levels), dtype=np.int32)
    first_segment = 0
    for tile_start in range(0, n_items, tile_items):
        tile_stop = min(tile_start + tile_items, n_items)
        while segment_starts[first_segment + 1] <= tile_start:
            first_segment += 1
        for block in range(0, n_queries, QUERY_BLOCK):
            in_block = min(QUERY_BLOCK, n_queries - block)
            tile_counts[:] = 0
            segment, start = first_segment, tile_start
            while start < tile_stop:
                stop = min(segment_starts[segment + 1], tile_stop)
                if in_block == QUERY_BLOCK:
                    # Query words as tuples live in registers; read from the array, they would
                    # be reloaded after every histogram store.
                    q0 = to_fixed_tuple(query_words[block], n_words)
                    q1 = to_fixed_tuple(query_words[block + 1], n_words)
                    q2 = to_fixed_tuple(query_words[block + 2], n_words)
                    q3 = to_fixed_tuple(query_words[block + 3], n_words)
                    r0, r1 = segment_relevant[block, segment], segment_relevant[block + 1, segment]
                    r2 = segment_relevant[block + 2, segment]
                    r3 = segment_relevant[block + 3, segment]
                    for item in range(start, stop):
                        d0 = d1 = d2 = d3 = 0
                        for word in range(n_words):  # unrolled: n_words is a constant
                            x = database_words[item * n_words + word]  # one load, four queries
                            d0 += _popcount64(q0[word] ^ x)
                            d1 += _popcount64(q1[word] ^ x)
                            d2 += _popcount64(q2[word] ^ x)
                            d3 += _popcount64(q3[word] ^ x)
                        tile_counts[0, r0, d0] += 1
                        tile_counts[1, r1, d1] += 1
                        tile_counts[2, r2, d2] += 1
                        tile_counts[3, r3, d3] += 1
                else:
                    for offset in range(in_block):
                        query = to_fixed_tuple(query_words[block + offset], n_words)
                        relevant = segment_relevant[block + offset, segment]
                        for item in range(start, stop):
                            level = _distance(query, database_words, item, n_words)
                            tile_counts[offset, relevant, level] += 1
                start = stop
                segment += 1
            out[block : block + in_block] += tile_counts[:in_block]


def initial_ranks(histograms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ranks before the first item, for :func:`stable_statistics`: at each distance, the
    number of items (relevant items) at smaller distances, from the whole database's
    :func:`relevance_histograms`."""
    relevant = histograms[:, 1]
    items = histograms[:, 0] + relevant
    return np.cumsum(items, axis=1) - items, np.cumsum(relevant, axis=1) - relevant


@compiled
def stable_statistics(query_words, database_words, item_classes, class_relevant, relevant_ids,
                      last_rank, last_relevant_rank, cutoffs, precision_sums, relevant_retrieved,
                      tile_items, word_count):
    """Top-K statistics of the ranking with ties broken by database index (see module doc).

    Relevance of item i to query j is ``class_relevant[j, item_classes[i]]``, or, when
    ``relevant_ids`` has columns, whether i is among the sorted ids ``relevant_ids[j]``.

    Args:
        database_words: as in :func:`relevance_histograms`, in index order.
        relevant_ids: ``(b, k)`` int64 sorted ascending (``(b, 0)`` for class relevance); ids
            outside ``0..n - 1`` match no item (a database shard passes its ids shifted).
        last_rank, last_relevant_rank: ``(b, levels)`` int64 in/out: the rank (and rank among
            relevant items) of the last item seen at each distance; start from
            :func:`initial_ranks`, and carry them from one database shard to the next.
        cutoffs: ``(n_cutoffs,)`` int64 sorted ascending.
        precision_sums, relevant_retrieved: ``(b, n_cutoffs)``, added to: the sum of precision
            at each relevant rank <= K, and the relevant items ranked <= K.
    """
    n_words = len(word_count)
    n_queries = last_rank.shape[0]
    n_items = database_words.shape[0] // n_words
    n_cutoffs = cutoffs.shape[0]
    n_ids = relevant_ids.shape[1]
    next_id = np.zeros(n_queries, dtype=np.int64)  # position in relevant_ids of the next id
    largest_cutoff = cutoffs[n_cutoffs - 1] if n_cutoffs else 0
    for tile_start in range(0, n_items, tile_items):
        tile_stop = min(tile_start + tile_items, n_items)
        for query in range(n_queries):
            query_row = to_fixed_tuple(query_words[query], n_words)
            ranks, relevant_ranks = last_rank[query], last_relevant_rank[query]
            for item in range(tile_start, tile_stop):
                level = _distance(query_row, database_words, item, n_words)
                ranks[level] += 1
                rank = ranks[level]
                if n_ids:
                    position = next_id[query]
                    while position < n_ids and relevant_ids[query, position] < item:
                        position += 1
                    next_id[query] = position
                    is_relevant = position < n_ids and relevant_ids[query, position] == item
                else:
                    is_relevant = class_relevant[query, item_classes[item]] != 0
                if not is_relevant:
                    continue
                relevant_ranks[level] += 1
                if rank > largest_cutoff:
                    continue
                precision = relevant_ranks[level] / rank
                for cut in range(n_cutoffs - 1, -1, -1):
                    if rank > cutoffs[cut]:
                        break
                    precision_sums[query, cut] += precision
                    relevant_retrieved[query, cut] += 1
