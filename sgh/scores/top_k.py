"""Each query's k best ``(score, row)`` during a scan: a heap of k, or, for a larger k in a list
scan, a reservoir, as faiss's fast scan chooses by k.

**The heap** (`offer`, `sort_heaps`): a max-heap on ``(score, row)`` of k slots, ``+inf`` / -1
at first; a score below the root replaces it and sinks, about log2(k) swaps. The flat scans
merge call after call into the same heaps.

**The reservoir** (the list scans from `RESERVOIR_FROM_K` kept on): ``keys`` of
``CAPACITY_PER_K * k`` slots, how many it holds, the bar (`NO_BAR` at first) and the bar's
score. A scan writes each key below the bar in place, with a few operations (no call: numba
passes arrays as structures, and a call per key costs more than the rest); when the slots are
full, `keep_smallest` keeps the k best and returns the new bar, a selection linear in the slots
shared by the ``(CAPACITY_PER_K - 1) k`` keys before it. `write_sorted` ends it. Below
`RESERVOIR_FROM_K` the selections cost more than the heap's few swaps.

A key is one 64-bit integer:
- the score's float32 bits made monotone (the sign bit set for non-negative scores, every bit
  flipped for negative ones, -0 as +0), then the row, which must be below `MAX_ROWS`;
- so keys order as ``(score, row)`` do, and the k kept are the same whatever order the scores
  come in, ties going to the smaller row: the heap's results, to the bit.
"""

from __future__ import annotations

import numpy as np

from sgh.compiled import compiled

# The reservoir's measured crossovers (benchmarks/LOG.md): from about k = 24 it is faster than
# the heap; 4 slots per kept item were faster than 2 or 8.
RESERVOIR_FROM_K = 24
CAPACITY_PER_K = 4
# The kept keys ordered by counting each one's rank, count^2 comparisons without a branch: half
# a sort's time at k = 100, three times it at k = 1,000.
RANK_SORT_UP_TO = 128
_SAMPLE = 16  # keys a selection pass sorts to choose its pivot
MAX_ROWS = 1 << 32  # rows of one scan: the low half of a key
_SIGN = np.uint32(0x80000000)
_ROW_MASK = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)
# The bar before anything is kept: +inf with row 0, below every key of +inf (never kept, as a
# heap of +inf slots keeps none) and above every key of a finite score.
NO_BAR = np.uint64(0xFF800000) << _SHIFT


@compiled
def score_key(score, row):
    """The key of ``(score, row)``: float32 ``score``, ``0 <= row < MAX_ROWS``."""
    bits = np.float32(score).view(np.uint32)
    if bits == _SIGN:  # -0 orders as +0
        bits = np.uint32(0)
    bits = np.uint32(~bits if bits & _SIGN else bits | _SIGN)
    return (np.uint64(bits) << _SHIFT) | np.uint64(row)


def rows_by_score(scores: np.ndarray) -> np.ndarray:
    """``(nq, n)`` int64: each row of ``(nq, n)`` scores' columns in increasing ``(score,
    column)`` order, as a stable argsort gives them. float32 scores are sorted as `score_key`'s
    keys, which are unique, so numpy's fastest (unstable) sort gives that order: 4-5x faster
    than the stable sort on MNIST's 69,000 scores a query (benchmarks/LOG.md)."""
    if scores.dtype != np.float32 or scores.shape[1] > MAX_ROWS:
        return np.argsort(scores, axis=1, kind="stable")
    keys = np.empty(scores.shape, np.uint64)
    _row_keys(scores, keys)
    keys.sort(axis=1)
    return (keys & _ROW_MASK).astype(np.int64)


@compiled
def _row_keys(scores, keys):
    """``keys[q, c]`` = `score_key` of ``(scores[q, c], c)``."""
    for q in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            keys[q, c] = score_key(scores[q, c], c)


@compiled
def key_score(key):
    """The float32 score of a key."""
    bits = np.uint32(key >> _SHIFT)
    return np.uint32(bits ^ _SIGN if bits & _SIGN else ~bits).view(np.float32)


@compiled
def keep_smallest(keys, count, k):
    """Move the k smallest of ``keys[:count]`` (``k <= count``) into ``keys[:k]``, in any order;
    return the largest of them. Each pass partitions about a pivot taken from a sorted sample
    near the k-th key's rank, without a branch per key: numba's `np.partition` (and a
    quickselect written with branches) mispredicts on about half its comparisons."""
    lo, hi = 0, count
    target = k - 1  # keys[:lo] stay below keys[lo:hi], keys[hi:] above it; lo <= target < hi
    sample = np.empty(_SAMPLE, np.uint64)
    while hi - lo > 2 * _SAMPLE:
        size = hi - lo
        step = size // _SAMPLE
        for s in range(_SAMPLE):
            sample[s] = keys[lo + s * step + step // 2]
        _insertion_sort(sample, 0, _SAMPLE)
        # The sample's key just above the target's share of the range: the keys below it likely
        # hold the target and few more. At least `rank` sampled keys lie below it, and the
        # pivot itself does not, so each pass shrinks the range.
        rank = min(_SAMPLE - 1, int((target - lo + 1) / size * _SAMPLE) + 1)
        middle = _move_below_to_front(keys, lo, hi, sample[rank])
        if middle == lo:  # no key left is below the pivot (equal keys): a sort ends it
            keys[lo:hi].sort()
            return keys[target]
        if middle > target:
            hi = middle
        else:
            lo = middle
    _insertion_sort(keys, lo, hi)
    return keys[target]


@compiled
def _move_below_to_front(keys, lo, hi, pivot):
    """Move the keys of ``keys[lo:hi]`` below ``pivot`` to its front, without a branch per key;
    return where they end."""
    below = lo
    for i in range(lo, hi):
        key = keys[i]
        keys[i] = keys[below]
        keys[below] = key
        below += np.int64(key < pivot)
    return below


@compiled
def _insertion_sort(keys, lo, hi):
    for i in range(lo + 1, hi):
        key = keys[i]
        j = i - 1
        while j >= lo and keys[j] > key:
            keys[j + 1] = keys[j]
            j -= 1
        keys[j + 1] = key


@compiled
def write_sorted(keys, count, k, scores, rows):
    """The k best of ``keys[:count]`` (distinct: a scan offers each row once), sorted, into
    ``scores`` and ``rows`` (``(k,)``), padded with ``+inf`` / -1 where fewer were kept. Up to
    `RANK_SORT_UP_TO` kept, each key goes straight to its rank, counted without a branch."""
    if count > k:
        keep_smallest(keys, count, k)
        count = k
    kept = keys[:count]
    if count > RANK_SORT_UP_TO:
        kept.sort()
    for r in range(count):
        rank = r if count > RANK_SORT_UP_TO else _rank(kept, count, kept[r])
        scores[rank] = key_score(kept[r])
        rows[rank] = np.int64(kept[r] & _ROW_MASK)
    scores[count:] = np.inf
    rows[count:] = -1


@compiled
def _rank(keys, count, key):
    """How many of ``keys[:count]`` are below ``key``, in a loop the compiler vectorises."""
    below = 0
    for other in range(count):
        below += np.int64(keys[other] < key)
    return below


@compiled
def _sift_down(scores, ids, position, size):
    """Restore the max-heap on (score, id) below ``position``."""
    while True:
        left = 2 * position + 1
        if left >= size:
            return
        child = left
        right = left + 1
        if right < size and (scores[right] > scores[left]
                             or (scores[right] == scores[left] and ids[right] > ids[left])):
            child = right
        if scores[child] > scores[position] or (scores[child] == scores[position]
                                                 and ids[child] > ids[position]):
            scores[child], scores[position] = scores[position], scores[child]
            ids[child], ids[position] = ids[position], ids[child]
            position = child
        else:
            return


@compiled
def offer(scores, ids, score, item_id, k):
    """Put (score, id), which beats the heap's root, in the root's place; the new root score."""
    scores[0] = score
    ids[0] = item_id
    _sift_down(scores, ids, 0, k)
    return scores[0]


@compiled
def sort_heaps(heap_scores, heap_ids):
    """Sort each row's max-heap on ``(score, id)`` in place, ascending (a heapsort, cheaper than
    `sorted_heaps`); empty slots (``+inf``, -1) end up last."""
    for q in range(heap_scores.shape[0]):
        sort_heap(heap_scores[q], heap_ids[q])


@compiled
def sort_heap(scores, ids):
    """`sort_heaps` of one heap."""
    for end in range(scores.shape[0] - 1, 0, -1):
        scores[0], scores[end] = scores[end], scores[0]
        ids[0], ids[end] = ids[end], ids[0]
        _sift_down(scores, ids, 0, end)


def sorted_heaps(heap_scores: np.ndarray, heap_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows in any order sorted by (score, id); empty slots (``+inf``, -1) last."""
    order = np.lexsort((heap_ids, heap_scores), axis=-1)
    return (np.take_along_axis(heap_scores, order, axis=1),
            np.take_along_axis(heap_ids, order, axis=1))
