"""`sgh.scores.top_k`: keys that order as ``(score, row)``, and a reservoir that keeps the same
k as a heap (and as a sort of everything), whatever order the scores come in."""

import numpy as np
import pytest

from sgh.scores.top_k import (
    CAPACITY_PER_K,
    MAX_ROWS,
    NO_BAR,
    RANK_SORT_UP_TO,
    keep_smallest,
    key_score,
    offer,
    rows_by_score,
    score_key,
    sort_heaps,
    sorted_heaps,
    write_sorted,
)

SPECIAL = np.array([-np.inf, -3e38, -1.0, -1e-45, -0.0, 0.0, 1e-45, 1e-38, 1.0, 3e38, np.inf],
                   np.float32)


def _scores(rng, n):
    """Scores with many exact ties, both signs, zeros of both signs and extremes."""
    values = np.concatenate([SPECIAL[1:-1], rng.normal(size=8).astype(np.float32)])
    return rng.choice(values, n)


def test_keys_order_as_score_then_row_and_give_the_score_back():
    rng = np.random.default_rng(0)
    scores = np.concatenate([SPECIAL, _scores(rng, 200)])
    rows = rng.integers(0, MAX_ROWS, len(scores))
    rows[:3] = [0, MAX_ROWS - 1, 1]
    keys = np.array([score_key(s, r) for s, r in zip(scores, rows, strict=True)], np.uint64)
    by_key = np.argsort(keys, kind="stable")
    by_pair = np.lexsort((rows, scores))  # -0.0 and 0.0 compare equal: ties go to the row
    np.testing.assert_array_equal(scores[by_key], scores[by_pair])
    np.testing.assert_array_equal(rows[by_key], rows[by_pair])
    back = np.array([key_score(key) for key in keys], np.float32)
    np.testing.assert_array_equal(back, scores)  # -0.0 comes back as 0.0, equal
    assert (back.view(np.uint32) != np.float32(-0.0).view(np.uint32)).all()
    # The first bar: no key of +inf passes it, every key of a finite score does.
    assert NO_BAR == score_key(np.float32(np.inf), 0)
    assert score_key(np.float32(3e38), MAX_ROWS - 1) < NO_BAR


def _reservoir(scores, rows, k):
    """The list scans' reservoir, step by step as they run it."""
    keys = np.empty(CAPACITY_PER_K * k, np.uint64)
    count, bar, worst = 0, NO_BAR, np.float32(np.inf)
    for s, row in zip(scores, rows, strict=True):
        if s > worst:
            continue
        key = score_key(s, row)
        if key < bar:
            keys[count] = key
            count += 1
            if count == len(keys):
                bar, count = keep_smallest(keys, count, k), k
                worst = key_score(bar)
    out_scores, out_rows = np.empty(k, np.float32), np.empty(k, np.int64)
    write_sorted(keys, count, k, out_scores, out_rows)
    return out_scores, out_rows


def _heap(scores, rows, k):
    heap_scores, heap_rows = np.full((1, k), np.inf, np.float32), np.full((1, k), -1, np.int64)
    for s, row in zip(scores, rows, strict=True):
        if s < heap_scores[0, 0] or (s == heap_scores[0, 0] and row < heap_rows[0, 0]):
            offer(heap_scores[0], heap_rows[0], s, row, k)
    sort_heaps(heap_scores, heap_rows)
    return heap_scores[0], heap_rows[0]


@pytest.mark.parametrize("n, k", [(0, 5), (3, 5), (5, 5), (40, 1), (500, 7), (2000, 60),
                                  (3000, RANK_SORT_UP_TO + 1)])  # the last: sorted, not ranked
def test_the_reservoir_keeps_what_the_heap_keeps_in_any_order(n, k):
    rng = np.random.default_rng(n + k)
    scores = _scores(rng, n)
    rows = rng.permutation(MAX_ROWS // 2 + np.arange(n)) if n else np.zeros(0, np.int64)
    order = np.lexsort((rows, scores))[:k]
    want = (np.full(k, np.inf, np.float32), np.full(k, -1, np.int64))
    want[0][: len(order)], want[1][: len(order)] = scores[order], rows[order]
    for _ in range(3):  # three orders of visit
        visit = rng.permutation(n)
        for keep in (_reservoir, _heap):
            got = keep(scores[visit], rows[visit], k)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])


def test_keep_smallest_moves_the_k_smallest_first_and_returns_the_kth():
    # What it leaves beyond k is not kept: the reservoir counts k after it.
    rng = np.random.default_rng(3)
    cases = [rng.integers(0, 50, n).astype(np.uint64) for n in (1, 2, 9, 100, 1000)]
    cases.append(np.full(300, 7, np.uint64))  # a pass finds no key below its pivot
    for keys in cases:  # many equal keys
        n = len(keys)
        for k in {1, max(1, n // 2), n}:
            work = keys.copy()
            kth = keep_smallest(work, n, k)
            np.testing.assert_array_equal(np.sort(work[:k]), np.sort(keys)[:k])
            assert kth == np.sort(keys)[k - 1]


def test_sorted_heaps_sorts_rows_by_score_then_id_with_empty_slots_last():
    D = np.array([[2.0, np.inf, 1.0, 2.0]], np.float32)
    I = np.array([[5, -1, 9, 3]], np.int64)
    got = sorted_heaps(D, I)
    np.testing.assert_array_equal(got[1], [[9, 3, 5, -1]])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rows_by_score_is_a_stable_argsort(dtype):
    # Exact ties, zeros of both signs (equal, so in column order) and infinities.
    rng = np.random.default_rng(7)
    scores = np.stack([_scores(rng, 500) for _ in range(6)]).astype(dtype)
    scores[:, ::9] = np.inf
    np.testing.assert_array_equal(rows_by_score(scores),
                                  np.argsort(scores, axis=1, kind="stable"))
    assert rows_by_score(scores).dtype == np.int64
