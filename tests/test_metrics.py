import itertools

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from sgh.codes import hamming_distances, pack_bits
from sgh.metrics import (
    CONVENTIONS,
    average_precisions,
    conventions,
    mean_average_precision,
    recall_at_n,
)


def codes_at_distances(distances, bits):
    """A zero query code and database codes whose first d bits are set: distance d each."""
    database = np.zeros((len(distances), bits), dtype=np.uint8)
    for row, distance in enumerate(distances):
        database[row, :distance] = 1
    return pack_bits(np.zeros((1, bits), dtype=np.uint8)), pack_bits(database)


def ap_of_ranking(relevant_in_rank_order):
    """Textbook AP@all: mean over relevant items of (relevant so far) / rank."""
    ranks = np.flatnonzero(relevant_in_rank_order) + 1
    return np.mean(np.arange(1, len(ranks) + 1) / ranks) if len(ranks) else np.nan


def tied_codes(rng, n_queries, n_database, bits, n_distinct):
    """Random codes drawn from a small pool, so that many database items tie."""
    pool = rng.integers(0, 2, (n_distinct, bits))
    query = pack_bits(rng.integers(0, 2, (n_queries, bits)))
    return query, pack_bits(pool[rng.integers(0, n_distinct, n_database)])


# --- worked examples ---------------------------------------------------------------------------


def test_all_items_tied():
    # 4 identical database codes, items 1 and 3 relevant.
    query, database = codes_at_distances([0, 0, 0, 0], bits=8)
    labels = np.array([0, 1, 0, 1])
    # Random order: the two relevant ranks are one of C(4,2) = 6 pairs, with APs
    # (1,2): 1, (1,3): 5/6, (1,4): 3/4, (2,3): 7/12, (2,4): 1/2, (3,4): 5/12 -> mean 49/72.
    expected = average_precisions(query, database, 8, [1], labels, ties="expected")
    assert expected[0] == pytest.approx(49 / 72, abs=1e-15)
    # By index: relevant at ranks 2 and 4 -> (1/2 + 2/4) / 2 = 1/2.
    assert average_precisions(query, database, 8, [1], labels, ties="stable")[0] == 0.5


def test_known_ap_without_ties():
    # Distances 0..3, relevant at ranks 1 and 3: AP = (1/1 + 2/3) / 2 = 5/6 under both policies.
    query, database = codes_at_distances([2, 0, 3, 1], bits=3)
    labels = np.array([1, 1, 0, 0])  # database items at distance 2 and 0
    for ties in ("expected", "stable"):
        result = mean_average_precision(query, database, 3, [1], labels, ties=ties)
        assert result["map"] == pytest.approx(5 / 6, abs=1e-15)


def test_ties_within_one_level_after_a_sure_hit():
    # Ranking: relevant item at distance 0, then a level of 2 items (1 relevant) at distance 1.
    # Orders: (rel, rel, irr): AP = (1 + 2/2)/2 = 1; (rel, irr, rel): AP = (1 + 2/3)/2 = 5/6.
    query, database = codes_at_distances([1, 0, 1], bits=4)
    labels = np.array([5, 5, 5 + 1])  # database 0 (distance 1) and 1 (distance 0) relevant
    ap = average_precisions(query, database, 4, [5], labels, ties="expected")[0]
    assert ap == pytest.approx((1 + 5 / 6) / 2, abs=1e-15)
    assert average_precisions(query, database, 4, [5], labels, ties="stable")[0] == 1.0


def test_query_without_relevant_items_is_skipped_and_counted():
    query, database = codes_at_distances([0, 1], bits=4)
    queries = np.concatenate([query, query])
    labels = np.array([7, 8])
    # Query 0 (label 7): relevant item first -> AP 1. Query 1 (label 9): nothing relevant.
    result = mean_average_precision(queries, database, 4, [7, 9], labels)
    assert result == {
        "map": 1.0,
        "n_queries": 2,
        "n_scored": 1,
        "n_no_relevant": 1,
        "ties": "expected",
        "no_relevant_policy": "skip",
    }
    zero = mean_average_precision(queries, database, 4, [7, 9], labels, no_relevant="zero")
    assert (zero["map"], zero["n_scored"], zero["n_no_relevant"]) == (0.5, 2, 1)
    with pytest.raises(ValueError, match="1 of 2 queries have no relevant"):
        mean_average_precision(queries, database, 4, [7, 9], labels, no_relevant="error")
    nothing = mean_average_precision(queries, database, 4, [1, 2], labels)
    assert np.isnan(nothing["map"]) and nothing["n_scored"] == 0 and nothing["n_no_relevant"] == 2


def test_recall_with_ties_at_the_cut_off():
    # Distances [0, 1, 1, 1, 2]; true neighbours (K=2) are items 2 and 4.
    query, database = codes_at_distances([0, 1, 1, 1, 2], bits=4)
    truth = np.array([[2, 4]])
    # N=2: 1 item closer, 3 at the cut-off level sharing 1 slot -> item 2 found w.p. 1/3,
    # item 4 never: (1/3 + 0) / 2 = 1/6.  N=4: the whole level fits -> 1/2.  N=10 > 5 -> 1.
    expected = recall_at_n(query, database, 4, truth, [2, 4, 10], k=2, ties="expected")
    assert expected == pytest.approx({2: 1 / 6, 4: 0.5, 10: 1.0})
    # By index the first 2 are items 0 and 1, the first 4 are items 0..3.
    stable = recall_at_n(query, database, 4, truth, [2, 4, 10], k=2, ties="stable")
    assert stable == {2: 0.0, 4: 0.5, 10: 1.0}
    # The 1/3 is the mean over the 3! orders of the tied level of "item 2 within the first 2".
    orders = list(itertools.permutations([1, 2, 3]))
    assert np.mean([[0, *order][:2].count(2) for order in orders]) == pytest.approx(1 / 3)


# --- brute force ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [16, 100])
def test_stable_ap_equals_ap_of_stable_sorted_ranking(bits):
    rng = np.random.default_rng(bits)
    query, database = tied_codes(rng, 20, 300, bits, n_distinct=25)
    query_labels, database_labels = rng.integers(0, 5, 20), rng.integers(0, 5, 300)
    distances = hamming_distances(query, database)
    expected = [
        ap_of_ranking(database_labels[np.argsort(row, kind="stable")] == label)
        for row, label in zip(distances, query_labels, strict=True)
    ]
    ap = average_precisions(query, database, bits, query_labels, database_labels, ties="stable")
    np.testing.assert_allclose(ap, expected, rtol=1e-12)


@pytest.mark.parametrize("bits", [16, 100])
def test_expected_ap_equals_monte_carlo_mean_over_tie_orders(bits):
    rng = np.random.default_rng(bits + 1)
    query, database = tied_codes(rng, 20, 300, bits, n_distinct=25)
    query_labels, database_labels = rng.integers(0, 5, 20), rng.integers(0, 5, 300)
    distances = hamming_distances(query, database)
    relevant = database_labels[None, :] == query_labels[:, None]
    draws = 2000
    samples = np.empty((draws, 20))
    ranks = np.arange(1, 301)
    for draw in range(draws):
        order = np.lexsort((rng.random(distances.shape), distances), axis=1)
        hits = np.take_along_axis(relevant, order, axis=1)
        samples[draw] = (np.cumsum(hits, axis=1) / ranks * hits).sum(axis=1) / hits.sum(axis=1)
    ap = average_precisions(query, database, bits, query_labels, database_labels)
    standard_error = samples.std(axis=0) / np.sqrt(draws)
    assert np.all(np.abs(ap - samples.mean(axis=0)) <= 5 * standard_error + 1e-12)
    # Tie order matters on this data, so the check above is not vacuous.
    assert standard_error.max() > 1e-4


def test_expected_ap_equals_exact_enumeration_of_tie_orders():
    rng = np.random.default_rng(3)
    for _ in range(5):
        query, database = tied_codes(rng, 1, 9, bits=3, n_distinct=4)
        labels = rng.integers(0, 2, 9)
        distances = hamming_distances(query, database)[0]
        levels = [np.flatnonzero(distances == d) for d in np.unique(distances)]
        aps = [
            ap_of_ranking(labels[np.concatenate(orders)] == 1)
            for orders in itertools.product(*(itertools.permutations(lvl) for lvl in levels))
        ]
        ap = average_precisions(query, database, 3, [1], labels)[0]
        if labels.any():
            assert ap == pytest.approx(np.mean(aps), abs=1e-12)
        else:
            assert np.isnan(ap)


def test_agrees_with_sklearn_when_there_are_no_ties():
    rng = np.random.default_rng(4)
    bits = 40
    query, database = codes_at_distances(rng.permutation(bits + 1), bits)
    for _ in range(5):
        labels = rng.integers(0, 3, bits + 1)
        distances = hamming_distances(query, database)[0]
        reference = average_precision_score(labels == 1, -distances.astype(float))
        for ties in ("expected", "stable"):
            ap = average_precisions(query, database, bits, [1], labels, ties=ties)[0]
            assert ap == pytest.approx(reference, abs=1e-12)


def test_expected_ap_ignores_database_order_and_perfect_codes_score_one():
    rng = np.random.default_rng(5)
    query, database = tied_codes(rng, 10, 200, 16, n_distinct=30)
    labels_q, labels_db = rng.integers(0, 4, 10), rng.integers(0, 4, 200)
    shuffle = rng.permutation(200)
    np.testing.assert_allclose(
        average_precisions(query, database, 16, labels_q, labels_db),
        average_precisions(query, database[shuffle], 16, labels_q, labels_db[shuffle]),
        rtol=1e-12,
    )
    # Codes equal to the label: every relevant item is at distance 0, every other one farther.
    perfect_db = pack_bits((labels_db[:, None] >> np.arange(16)) & 1)
    perfect_q = pack_bits((labels_q[:, None] >> np.arange(16)) & 1)
    for ties in ("expected", "stable"):
        result = mean_average_precision(perfect_q, perfect_db, 16, labels_q, labels_db, ties=ties)
        assert result["map"] == pytest.approx(1.0)


def direct_recall(distances, truth, n_values, ties):
    """Per query and cut-off, straight from the definition."""
    out = {n: [] for n in n_values}
    for row, ids in zip(distances, truth, strict=True):
        ordered = np.sort(row)
        for n in n_values:
            if ties == "stable":
                found = np.isin(ids, np.argsort(row, kind="stable")[:n]).astype(float)
            elif n >= len(row):
                found = np.ones(len(ids))
            else:
                cut = ordered[n - 1]
                closer, at_cut = (row < cut).sum(), (row == cut).sum()
                found = np.where(row[ids] < cut, 1.0, 0.0)
                found[row[ids] == cut] = (n - closer) / at_cut
            out[n].append(found.mean())
    return {n: np.mean(values) for n, values in out.items()}


@pytest.mark.parametrize("ties", ["expected", "stable"])
def test_recall_equals_direct_implementation(ties):
    rng = np.random.default_rng(6)
    query, database = tied_codes(rng, 20, 300, 16, n_distinct=40)
    truth = np.stack([rng.permutation(300)[:12] for _ in range(20)])
    n_values = [1, 5, 17, 50, 299, 300, 1000]
    result = recall_at_n(query, database, 16, truth, n_values, k=10, ties=ties)
    reference = direct_recall(hamming_distances(query, database), truth[:, :10], n_values, ties)
    assert list(result) == n_values
    assert result == pytest.approx(reference, abs=1e-12)
    assert result[1000] == 1.0


# --- argument checks and conventions ------------------------------------------------------------


def test_bad_arguments_are_named():
    query, database = codes_at_distances([0, 1], bits=4)
    with pytest.raises(ValueError, match="ties must be one of .* got 'random'"):
        mean_average_precision(query, database, 4, [0], [0, 1], ties="random")
    with pytest.raises(ValueError, match="no_relevant must be one of .* got 'drop'"):
        mean_average_precision(query, database, 4, [0], [0, 1], no_relevant="drop")
    with pytest.raises(ValueError, match="but bits=16 needs 2 bytes"):
        mean_average_precision(query, database, 16, [0], [0, 1])
    with pytest.raises(ValueError, match=r"database_labels .* \(2\), got shape \(3,\)"):
        mean_average_precision(query, database, 4, [0], [0, 1, 2])
    with pytest.raises(ValueError, match="database indices in \\[0, 2\\), found 0..5"):
        recall_at_n(query, database, 4, [[0, 5]], [1], k=2)
    with pytest.raises(ValueError, match="shape \\(1, >= k=3\\)"):
        recall_at_n(query, database, 4, [[0, 1]], [1], k=3)
    with pytest.raises(ValueError, match="n_values must be positive integers, got \\[0, 1\\]"):
        recall_at_n(query, database, 4, [[0, 1]], [0, 1], k=2)


def test_conventions_describe_every_policy():
    assert set(CONVENTIONS) == {"distance", "ties", "map", "no_relevant", "recall_at_n"}
    assert conventions("stable")["ties"] != CONVENTIONS["ties"]
    assert "index" in conventions("stable")["ties"]
    assert "AP = 0" in conventions(no_relevant="zero")["no_relevant"]
