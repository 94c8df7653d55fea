"""The choice between the inverted lists' two scans, which give the same results to the bit
(`tests/search/test_sgh_index_byte_lists.py` forces each): the bounded scan computes the cross
terms of the items that enter a query's top k, the plain scan those of every probed item once."""

import heapq

import numpy as np
import pytest

from sgh.scores.top_k import CAPACITY_PER_K, RESERVOIR_FROM_K
from sgh.search.inverted_table_scan import bounded_scan_is_cheaper, expected_intake


def _simulated_intake(visited: int, k: int, trials: int = 40) -> float:
    """The mean count of items, in random order, that a heap of k (below `RESERVOIR_FROM_K`)
    or a reservoir of `CAPACITY_PER_K` k slots takes in, counted key by key as the kernels do."""
    rng = np.random.default_rng(0)
    counts = []
    for _ in range(trials):
        scores = rng.permutation(visited)
        if k < RESERVOIR_FROM_K:  # in while below the k-th best so far (a max-heap's root)
            taken, best = 0, []
            for s in scores:
                if len(best) < k:
                    heapq.heappush(best, -s)
                elif s < -best[0]:
                    heapq.heapreplace(best, -s)
                else:
                    continue
                taken += 1
        else:  # in while below the bar, moved to the k-th best when the slots are full
            taken, held, bar = 0, [], np.inf
            for s in scores:
                if s < bar:
                    taken += 1
                    held.append(s)
                    if len(held) == CAPACITY_PER_K * k:
                        held = sorted(held)[:k]
                        bar = held[-1]
        counts.append(taken)
    return float(np.mean(counts))


@pytest.mark.parametrize(("visited", "k"), [(50, 10), (2000, 10), (2000, 16),
                                            (3000, RESERVOIR_FROM_K), (4000, 100)])
def test_the_expected_intake_is_what_a_heap_or_a_reservoir_takes_in_from_random_order(visited, k):
    assert expected_intake(visited, k) == pytest.approx(_simulated_intake(visited, k), rel=0.1)


def test_every_item_enters_while_the_top_k_is_not_full():
    assert expected_intake(7, 10) == 7
    assert expected_intake(CAPACITY_PER_K * 100, 100) == CAPACITY_PER_K * 100


def test_a_query_alone_over_long_lists_takes_the_bounds_and_many_sharing_them_do_not():
    sizes = np.full(64, 1000)
    one_query = np.array([[0, 1, 2, 3]])
    assert bounded_scan_is_cheaper(sizes, one_query, np.unique(one_query), k=10)
    # 64 queries probing the same four lists: each list's terms once serve them all.
    shared = np.tile(one_query, (64, 1))
    assert not bounded_scan_is_cheaper(sizes, shared, np.unique(shared), k=10)


def test_many_queries_a_call_at_a_small_k_share_the_lists_terms():
    # glove-50-angular's shape: 1,000 queries a call, each probing one of 624 lists of about 630
    # items, k = 10. A heap takes in about 51 of 630, but a bounded term costs eight plain ones
    # beside a heap: the plain scan, measured 1.58x faster there (benchmarks/LOG.md).
    rng = np.random.default_rng(0)
    sizes = np.full(624, 630)
    probes = rng.integers(0, 624, (1000, 1))
    assert not bounded_scan_is_cheaper(sizes, probes, np.unique(probes), k=10)
    assert bounded_scan_is_cheaper(sizes, probes[:20], np.unique(probes[:20]), k=10)


def test_lists_no_longer_than_the_top_k_never_take_the_bounds():
    # Every item would enter: the bounded scan would compute every term, each at a higher cost.
    sizes = np.full(8, 30)
    probes = np.array([[0, 1, -1], [2, 3, 4]])
    assert not bounded_scan_is_cheaper(sizes, probes, np.unique(probes[probes >= 0]), k=100)


def test_a_query_alone_at_k_100_takes_the_bounds_only_over_many_more_items_than_enter():
    # About 750 of 2,000 items would enter, each term costing BOUNDED_TERM_COST_RESERVOIR plain
    # ones; of 200,000, about 1,750.
    probes, probed = np.array([[0]]), np.array([0])
    assert not bounded_scan_is_cheaper(np.array([2_000]), probes, probed, k=100)
    assert bounded_scan_is_cheaper(np.array([200_000]), probes, probed, k=100)
