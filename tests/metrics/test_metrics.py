import itertools

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from sgh.codes import pack_bits
from sgh.metrics import (
    CONVENTIONS,
    DEFAULT_DENOMINATOR,
    conventions,
    evaluate_labels,
    hash_lookup,
    label_histograms,
    mean_average_precision,
    per_query_average_precision,
    pr_curve,
    recall_at_n,
)
from tests.helpers import hamming_distances


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


def per_query_ap(query, database, bits, query_labels, database_labels, ties="expected",
                 k=None, denominator=DEFAULT_DENOMINATOR):
    """``(n_queries,)`` AP@K (AP@all for ``k=None``) of every query, nan where R = 0."""
    stable = [len(database) if k is None else k] if ties == "stable" else []
    histograms = label_histograms(query, database, bits, query_labels, database_labels, stable)
    return per_query_average_precision(histograms, k, ties, denominator)


def map_of_one_query(query, database, bits, query_labels, database_labels, ties="expected",
                     k=None, denominator=DEFAULT_DENOMINATOR):
    """mean_average_precision's number for one query: its AP@K, nan where R = 0."""
    return mean_average_precision(query, database, bits, query_labels, database_labels, ties,
                                  k=k, denominator=denominator)["map"]


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
    expected = map_of_one_query(query, database, 8, [1], labels, ties="expected")
    assert expected == pytest.approx(49 / 72, abs=1e-15)
    # By index: relevant at ranks 2 and 4 -> (1/2 + 2/4) / 2 = 1/2.
    assert map_of_one_query(query, database, 8, [1], labels, ties="stable") == 0.5


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
    ap = map_of_one_query(query, database, 4, [5], labels, ties="expected")
    assert ap == pytest.approx((1 + 5 / 6) / 2, abs=1e-15)
    assert map_of_one_query(query, database, 4, [5], labels, ties="stable") == 1.0


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
        "k": "all",
        "denominator": "r",
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
    # Tie-aware is the mean over the 3! orders of the tied level [1, 2, 3] of each order's
    # recall, counted here by brute force.
    for n in (2, 4):
        rankings = [[0, *order, 4] for order in itertools.permutations([1, 2, 3])]
        by_order = [len({2, 4} & set(ranking[:n])) / 2 for ranking in rankings]
        assert expected[n] == pytest.approx(np.mean(by_order))


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
    ap = per_query_ap(query, database, bits, query_labels, database_labels, ties="stable")
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
    ap = per_query_ap(query, database, bits, query_labels, database_labels)
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
        ap = map_of_one_query(query, database, 3, [1], labels)
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
            ap = map_of_one_query(query, database, bits, [1], labels, ties=ties)
            assert ap == pytest.approx(reference, abs=1e-12)


def test_expected_ap_ignores_database_order_and_perfect_codes_score_one():
    rng = np.random.default_rng(5)
    query, database = tied_codes(rng, 10, 200, 16, n_distinct=30)
    labels_q, labels_db = rng.integers(0, 4, 10), rng.integers(0, 4, 200)
    shuffle = rng.permutation(200)
    np.testing.assert_allclose(
        per_query_ap(query, database, 16, labels_q, labels_db),
        per_query_ap(query, database[shuffle], 16, labels_q, labels_db[shuffle]),
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
    with pytest.raises(ValueError, match="ties='random' is not known; accepted: expected, stable"):
        mean_average_precision(query, database, 4, [0], [0, 1], ties="random")
    with pytest.raises(ValueError,
                       match="no_relevant='drop' is not known; accepted: skip, zero, error"):
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
    assert set(CONVENTIONS) == {
        "distance",
        "relevance",
        "ties",
        "map",
        "map_at_k",
        "precision_at_k",
        "hash_lookup",
        "pr_curve",
        "no_relevant",
        "recall_at_n",
    }
    assert conventions("stable")["ties"] != CONVENTIONS["ties"]
    assert "index" in conventions("stable")["ties"]
    assert "AP = 0" in conventions(no_relevant="zero")["no_relevant"]


# === mAP@K, precision@K, recall@K, hash lookup, PR curve, engine ===============================

DENOMINATOR_NAMES = ("retrieved", "min_rk", "r")


def ap_at_k_of_ranking(hits, k, denominator):
    """Textbook AP@K of one ranking (booleans in rank order) under each denominator."""
    hits = np.asarray(hits, dtype=bool)
    positions = np.flatnonzero(hits[:k])
    precision_sum = (np.arange(1, positions.size + 1) / (positions + 1)).sum()
    divisor = {"retrieved": positions.size, "min_rk": min(hits.sum(), k), "r": hits.sum()}
    return precision_sum / divisor[denominator] if divisor[denominator] else 0.0


def relevance_matrix(query_labels, database_labels):
    query_labels, database_labels = np.asarray(query_labels), np.asarray(database_labels)
    if query_labels.ndim == 1:
        return query_labels[:, None] == database_labels[None, :]
    return (query_labels.astype(int) @ database_labels.T.astype(int)) > 0


def random_labels(rng, n_queries, n_database, kind):
    if kind == "single":
        return rng.integers(0, 5, n_queries), rng.integers(0, 5, n_database)
    if kind == "many-classes":  # class ids beyond uint8
        return rng.integers(0, 40, n_queries) * 10, rng.integers(0, 400, n_database)
    # 6 labels, each present with probability 0.25: some items and queries have none.
    return rng.random((n_queries, 6)) < 0.25, (rng.random((n_database, 6)) < 0.25).astype(np.int8)


def brute_force_metrics(distances, relevant, ks, radius, orders):
    """Every metric per query, straight from the definitions, for explicit rankings ``orders``."""
    hits = np.take_along_axis(relevant, orders, axis=1)
    total = relevant.sum(axis=1)
    found = np.cumsum(hits, axis=1)  # relevant items among the first k, k = 1..n
    precision_terms = np.cumsum(hits * found / np.arange(1, hits.shape[1] + 1), axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = {"map": precision_terms[:, -1] / total}
        for k in ks:
            k_in = min(k, hits.shape[1])
            divisors = {
                "retrieved": found[:, k_in - 1],
                "min_rk": np.minimum(total, k),
                "r": total,
            }
            for name, divisor in divisors.items():
                ap = np.where(divisor > 0, precision_terms[:, k_in - 1] / divisor, 0.0)
                out[f"map@{k}/{name}"] = np.where(total > 0, ap, np.nan)
            out[f"precision@{k}"] = found[:, k_in - 1] / k_in
            out[f"recall@{k}"] = found[:, k_in - 1] / total
        inside = distances <= radius
        retrieved = inside.sum(axis=1)
        relevant_retrieved = (inside & relevant).sum(axis=1)
        out["lookup_precision"] = np.where(retrieved > 0, relevant_retrieved / retrieved, 0.0)
        out["lookup_recall"] = relevant_retrieved / total
    return out


def scored_mean(values, relevant):
    """Mean over queries with a relevant item (the default no_relevant='skip')."""
    return float(np.mean(values[relevant.any(axis=1)]))


# --- worked examples ---------------------------------------------------------------------------


def test_map_at_k_worked_example_with_a_tie_at_the_cut_off():
    # Items: 0 at distance 1 (irrelevant), 1 at 0 (relevant), 2 at 1 (relevant), 3 at 2
    # (relevant); R = 3, K = 2. The cut-off level (distance 1) holds items 0 and 2, of which the
    # top 2 takes one. Orders of that level:
    #   A (item 2 first): hits [1, 1] -> precision sum 1/1 + 2/2 = 2
    #   B (item 0 first): hits [1, 0] -> precision sum 1/1 = 1   (B is the order by index)
    # retrieved: A 2/2 = 1, B 1/1 = 1 -> expected 1;     stable 1
    # min_rk:    A 2/2 = 1, B 1/2    -> expected 3/4;   stable 1/2
    # r:         A 2/3,     B 1/3    -> expected 1/2;   stable 1/3
    query, database = codes_at_distances([1, 0, 1, 2], bits=3)
    labels = np.array([0, 1, 1, 1])
    expected = {"retrieved": 1.0, "min_rk": 0.75, "r": 0.5}
    stable = {"retrieved": 1.0, "min_rk": 0.5, "r": 1 / 3}
    for denominator in DENOMINATOR_NAMES:
        for ties, value in (("expected", expected), ("stable", stable)):
            result = mean_average_precision(
                query, database, 3, [1], labels, ties=ties, k=2, denominator=denominator
            )
            assert result["map"] == pytest.approx(value[denominator], abs=1e-15)
            assert (result["k"], result["denominator"]) == (2, denominator)
    # P@2: expected relevant retrieved = 1 + 1 * (1/2) -> 1.5 / 2 = 3/4; by index 1/2.
    # R@2: 1.5 / 3 = 1/2; by index 1/3.
    top_2 = evaluate_labels(query, database, 3, [1], labels, map_k=[2], radius=None)
    assert (top_2["precision@2"], top_2["recall@2"]) == (0.75, pytest.approx(0.5))
    stable_top_2 = evaluate_labels(query, database, 3, [1], labels, map_k=[2], radius=None,
                                   ties="stable")
    assert (stable_top_2["precision@2"], stable_top_2["recall@2"]) == (0.5, pytest.approx(1 / 3))


def test_map_at_k_when_all_items_tie():
    # 4 identical codes, items 1 and 3 relevant (R = 2), K = 2. The relevant ranks are one of the
    # 6 equally likely pairs; top-2 hits and AP@2 (retrieved / min_rk = r, since R = K):
    #   (1,2): [1,1] 1 / 1     (1,3), (1,4): [1,0] 1 / 1/2     (2,3), (2,4): [0,1] 1/2 / 1/4
    #   (3,4): [0,0] 0 / 0
    # retrieved: (1 + 1 + 1 + 1/2 + 1/2 + 0) / 6 = 2/3;  min_rk = r: (1 + 1 + 1/2 ... ) = 5/12.
    query, database = codes_at_distances([0, 0, 0, 0], bits=8)
    labels = np.array([0, 1, 0, 1])
    values = {"retrieved": 2 / 3, "min_rk": 5 / 12, "r": 5 / 12}
    for denominator, value in values.items():
        ap = map_of_one_query(query, database, 8, [1], labels, k=2, denominator=denominator)
        assert ap == pytest.approx(value, abs=1e-15)
    # By index the ranking is 0, 1, 2, 3: hits [0, 1] -> 1/2 with "retrieved", 1/4 otherwise.
    assert map_of_one_query(query, database, 8, [1], labels, "stable", k=2) == 0.5
    # P@2 = E[relevant in the top 2] / 2 = (2 * 2/4) / 2 = 1/2.
    assert evaluate_labels(query, database, 8, [1], labels, map_k=[2])["precision@2"] == 0.5


def test_k_beyond_the_database_is_the_whole_ranking():
    rng = np.random.default_rng(7)
    query, database = tied_codes(rng, 6, 40, 8, n_distinct=5)
    labels_q, labels_db = rng.integers(0, 3, 6), rng.integers(0, 3, 40)
    for ties in ("expected", "stable"):
        whole = per_query_ap(query, database, 8, labels_q, labels_db, ties)
        for denominator in DENOMINATOR_NAMES:
            for k in (40, 41, 10**6):
                ap = per_query_ap(
                    query, database, 8, labels_q, labels_db, ties, k=k, denominator=denominator
                )
                np.testing.assert_allclose(ap, whole, rtol=1e-12)
        # P@K divides by min(K, n_database): with K >= 40, the share of relevant items.
        top = evaluate_labels(query, database, 8, labels_q, labels_db, map_k=[40, 100],
                              radius=None, ties=ties)
        share = np.mean(labels_db[None, :] == labels_q[:, None], axis=1)
        assert (top["precision@40"], top["precision@100"]) == pytest.approx((share.mean(),) * 2)
        assert top["recall@100"] == 1.0


def test_hash_lookup_worked_example_with_a_query_that_retrieves_nothing():
    # Query A = 0000: database distances [0, 1, 3, 3], relevant items 0 and 2 (label 1).
    #   radius 0: retrieves item 0 -> precision 1/1, recall 1/2
    #   radius 2: retrieves items 0, 1 -> precision 1/2, recall 1/2
    # Query B = 1111 (label 1): distances [4, 3, 1, 1] -> nothing within radius 0:
    #   precision 0 (declared policy), recall 0; within radius 2: items 2, 3 -> 1/2, 1/2.
    query_a, database = codes_at_distances([0, 1, 3, 3], bits=4)
    query_b = pack_bits(np.ones((1, 4), dtype=np.uint8))
    queries = np.concatenate([query_a, query_b])
    labels = np.array([1, 0, 1, 0])
    at_0 = hash_lookup(queries, database, 4, [1, 1], labels, radius=0)
    # Means: precision (1 + 0) / 2 = 1/2, recall (1/2 + 0) / 2 = 1/4; F1 of the means:
    # 2 * 1/2 * 1/4 / (1/2 + 1/4) = 1/3.
    assert at_0["precision"] == 0.5 and at_0["recall"] == 0.25
    assert at_0["f1"] == pytest.approx(1 / 3)
    assert (at_0["radius"], at_0["n_retrieved_nothing"], at_0["n_scored"]) == (0, 1, 2)
    at_2 = hash_lookup(queries, database, 4, [1, 1], labels)
    assert (at_2["precision"], at_2["recall"], at_2["f1"], at_2["n_retrieved_nothing"]) == (
        0.5,
        0.5,
        0.5,
        0,
    )
    # Radius 4 = bits retrieves everything: precision 2/4, recall 1; larger radii are the same.
    beyond = hash_lookup(queries, database, 4, [1, 1], labels, radius=9)
    assert (beyond["radius"], beyond["precision"], beyond["recall"]) == (9, 0.5, 1.0)
    assert evaluate_labels(queries, database, 4, [1, 1], labels, radius=9)["lookup_recall@r9"] == 1
    curve = pr_curve(queries, database, 4, [1, 1], labels)
    assert curve["radius"] == [0, 1, 2, 3, 4]
    # Retrieved (A | B) per radius: 0: 1 | 0, 1: 2 | 2, 2: 2 | 2, 3: 4 | 3, 4: 4 | 4;
    # relevant retrieved: 0: 1 | 0, 1: 1 | 1, 2: 1 | 1, 3: 2 | 1, 4: 2 | 2.
    assert curve["precision"] == pytest.approx([0.5, 0.5, 0.5, (2 / 4 + 1 / 3) / 2, 0.5])
    assert curve["recall"] == pytest.approx([0.25, 0.5, 0.5, 0.75, 1.0])
    assert curve["n_retrieved_nothing"] == [1, 0, 0, 0, 0]


def test_no_relevant_policy_applies_to_every_metric():
    # Query 0 (label 7) has one relevant item at distance 0; query 1 (label 9) has none.
    query, database = codes_at_distances([0, 1], bits=4)
    queries = np.concatenate([query, query])
    skip = evaluate_labels(queries, database, 4, [7, 9], [7, 8], map_k=[1], radius=0)
    assert skip["map"] == skip["map@1"] == skip["precision@1"] == skip["recall@1"] == 1.0
    assert skip["lookup_precision@r0"] == skip["lookup_recall@r0"] == 1.0
    assert (skip["n_scored"], skip["n_no_relevant"]) == (1, 1)
    zero = evaluate_labels(
        queries, database, 4, [7, 9], [7, 8], map_k=[1], radius=0, no_relevant="zero"
    )
    assert zero["map"] == zero["map@1"] == zero["precision@1"] == zero["recall@1"] == 0.5
    assert (zero["n_scored"], zero["n_no_relevant"]) == (2, 1)
    with pytest.raises(ValueError, match="1 of 2 queries have no relevant"):
        evaluate_labels(queries, database, 4, [7, 9], [7, 8], map_k=None, precision_k=[1],
                        radius=None, map_all=False, no_relevant="error")
    nothing = hash_lookup(queries, database, 4, [1, 2], [7, 8])
    assert np.isnan(nothing["precision"]) and np.isnan(nothing["f1"])
    assert nothing["n_scored"] == 0 and nothing["n_retrieved_nothing"] == 0


def test_multi_label_worked_example():
    # Labels (columns a, b, c). Query: {a, c}. Database: {a}, {b}, {b, c}, {} at distances 0..3.
    # Relevant = shares a label: items 0 and 2 -> ranks 1 and 3: AP = (1/1 + 2/3) / 2 = 5/6.
    query, database = codes_at_distances([0, 1, 2, 3], bits=3)
    query_labels = np.array([[1, 0, 1]])
    database_labels = np.array([[1, 0, 0], [0, 1, 0], [0, 1, 1], [0, 0, 0]])
    for ties in ("expected", "stable"):
        result = mean_average_precision(query, database, 3, query_labels, database_labels, ties)
        assert result["map"] == pytest.approx(5 / 6)
    # P@2 = 1/2 (item 0 of items 0, 1); hash lookup radius 2: 2 of 3 retrieved are relevant.
    result = evaluate_labels(query, database, 3, query_labels, database_labels, map_k=[2])
    assert result["precision@2"] == 0.5 and result["lookup_precision@r2"] == pytest.approx(2 / 3)
    # A query with no label has no relevant item.
    empty = mean_average_precision(query, database, 3, [[0, 0, 0]], database_labels)
    assert empty["n_no_relevant"] == 1 and np.isnan(empty["map"])


# --- brute force, Monte-Carlo and exact enumeration ---------------------------------------------

KS = (1, 5, 37, 150, 299)


def engine_metrics(query, database, bits, labels_q, labels_db, ties, radius):
    """Every metric of evaluate_labels, keyed like brute_force_metrics, means over scored."""
    out = {}
    result = evaluate_labels(
        query, database, bits, labels_q, labels_db, map_k=KS, radius=radius, ties=ties
    )
    for denominator in DENOMINATOR_NAMES:
        by_denominator = evaluate_labels(
            query,
            database,
            bits,
            labels_q,
            labels_db,
            map_k=KS,
            precision_k=[],
            radius=None,
            map_all=False,
            ties=ties,
            denominator=denominator,
        )
        out.update({f"map@{k}/{denominator}": by_denominator[f"map@{k}"] for k in KS})
    out.update({f"precision@{k}": result[f"precision@{k}"] for k in KS})
    out.update({f"recall@{k}": result[f"recall@{k}"] for k in KS})
    out["map"] = result["map"]
    out["lookup_precision"] = result[f"lookup_precision@r{radius}"]
    out["lookup_recall"] = result[f"lookup_recall@r{radius}"]
    return out


@pytest.mark.parametrize("kind", ["single", "multi"])
@pytest.mark.parametrize("bits", [16, 100])
def test_stable_metrics_equal_brute_force(kind, bits):
    rng = np.random.default_rng(bits + len(kind))
    query, database = tied_codes(rng, 20, 300, bits, n_distinct=25)
    labels_q, labels_db = random_labels(rng, 20, 300, kind)
    distances = hamming_distances(query, database)
    relevant = relevance_matrix(labels_q, labels_db)
    radius = int(np.median(distances))
    orders = np.argsort(distances, axis=1, kind="stable")
    reference = brute_force_metrics(distances, relevant, KS, radius, orders)
    result = engine_metrics(query, database, bits, labels_q, labels_db, "stable", radius)
    for name, value in result.items():
        assert value == pytest.approx(scored_mean(reference[name], relevant), abs=1e-12), name


@pytest.mark.parametrize("kind", ["single", "multi"])
def test_expected_metrics_equal_monte_carlo_mean_over_tie_orders(kind):
    rng = np.random.default_rng(11 + len(kind))
    query, database = tied_codes(rng, 12, 300, 16, n_distinct=20)
    labels_q, labels_db = random_labels(rng, 12, 300, kind)
    distances = hamming_distances(query, database)
    relevant = relevance_matrix(labels_q, labels_db)
    radius = int(np.median(distances))
    scored = relevant.any(axis=1)
    draws = []
    for _ in range(800):
        orders = np.lexsort((rng.random(distances.shape), distances), axis=1)
        metrics = brute_force_metrics(distances, relevant, KS, radius, orders)
        draws.append({name: values[scored] for name, values in metrics.items()})
    result = engine_metrics(query, database, 16, labels_q, labels_db, "expected", radius)
    varied = 0
    for name, value in result.items():
        # The metric of each draw (mean over the scored queries) and its standard error.
        per_draw = np.array([draw[name] for draw in draws]).mean(axis=1)
        standard_error = per_draw.std() / np.sqrt(len(draws))
        assert value == pytest.approx(per_draw.mean(), abs=5 * standard_error + 1e-12), name
        varied += standard_error > 1e-5
    assert varied >= 10  # tie order matters for most metrics here: the checks are not vacuous


def test_expected_top_k_metrics_equal_exact_enumeration_of_tie_orders():
    rng = np.random.default_rng(12)
    checked = 0
    for _ in range(25):
        query, database = tied_codes(rng, 1, 6, bits=3, n_distinct=3)
        labels = rng.integers(0, 2, 6)
        if not labels.any():
            continue
        distances = hamming_distances(query, database)[0]
        levels = [np.flatnonzero(distances == d) for d in np.unique(distances)]
        rankings = [
            labels[np.concatenate(orders)] == 1
            for orders in itertools.product(*(itertools.permutations(lvl) for lvl in levels))
        ]
        cutoffs = list(range(1, 8))
        for denominator in DENOMINATOR_NAMES:
            result = evaluate_labels(
                query, database, 3, [1], labels, map_k=cutoffs, radius=None, denominator=denominator
            )
            for k in cutoffs:
                exact = np.mean([ap_at_k_of_ranking(hits, k, denominator) for hits in rankings])
                assert result[f"map@{k}"] == pytest.approx(exact, abs=1e-12)
                exact_hits = np.mean([hits[:k].sum() for hits in rankings])
                assert result[f"precision@{k}"] == pytest.approx(exact_hits / min(k, 6), abs=1e-12)
                checked += 1
    assert checked > 300


def test_expected_map_at_k_with_large_levels_matches_monte_carlo():
    # Big tied levels exercise the hypergeometric sum of the "retrieved" denominator (supports
    # of hundreds of values, chunked) and harmonic numbers of large arguments.
    from sgh.metrics import expected_average_precision

    rng = np.random.default_rng(13)
    counts = np.array([[30, 2000, 5000, 0, 3000]])
    relevant = np.array([[10, 300, 1500, 0, 100]])
    distances = np.repeat(np.arange(5), counts[0])
    is_relevant = np.concatenate(
        [rng.permutation(np.arange(c) < r) for c, r in zip(counts[0], relevant[0], strict=True)]
    )
    for k in (25, 1000, 2030, 6000):
        samples = {name: [] for name in DENOMINATOR_NAMES}
        for _ in range(300):
            hits = is_relevant[np.lexsort((rng.random(distances.size), distances))]
            for name in DENOMINATOR_NAMES:
                samples[name].append(ap_at_k_of_ranking(hits, k, name))
        for name in DENOMINATOR_NAMES:
            value = expected_average_precision(counts, relevant, k, name)[0]
            error = np.std(samples[name]) / np.sqrt(300)
            assert value == pytest.approx(np.mean(samples[name]), abs=5 * error + 1e-12)


def test_hypergeometric_chunks_do_not_change_the_result(monkeypatch):
    from sgh.metrics import tie_aware

    rng = np.random.default_rng(17)
    counts = rng.multinomial(300, rng.dirichlet(np.ones(9)), size=50)  # 300 items per query
    relevant = rng.binomial(counts, 0.3)
    for k in (3, 40, 100):
        whole = tie_aware.expected_average_precision(counts, relevant, k, "retrieved")
        monkeypatch.setattr(tie_aware, "_HYPERGEOMETRIC_CELLS", 5)  # about one query per chunk
        chunked = tie_aware.expected_average_precision(counts, relevant, k, "retrieved")
        monkeypatch.undo()
        np.testing.assert_allclose(chunked, whole, rtol=1e-13)


def test_multi_label_agrees_with_sklearn_when_there_are_no_ties():
    rng = np.random.default_rng(14)
    bits = 40
    query, database = codes_at_distances(rng.permutation(bits + 1), bits)
    database_labels = rng.random((bits + 1, 4)) < 0.3
    query_labels = np.array([[1, 0, 1, 0]])
    relevant = relevance_matrix(query_labels, database_labels)[0]
    distances = hamming_distances(query, database)[0]
    reference = average_precision_score(relevant, -distances.astype(float))
    for ties in ("expected", "stable"):
        ap = map_of_one_query(query, database, bits, query_labels, database_labels, ties)
        assert ap == pytest.approx(reference, abs=1e-12)


@pytest.mark.parametrize("bits", [16, 64])
def test_pr_curve_and_lookup_equal_brute_force(bits):
    rng = np.random.default_rng(bits)
    query, database = tied_codes(rng, 15, 200, bits, n_distinct=40)
    labels_q, labels_db = random_labels(rng, 15, 200, "multi")
    distances = hamming_distances(query, database)
    relevant = relevance_matrix(labels_q, labels_db)
    curve = pr_curve(query, database, bits, labels_q, labels_db, no_relevant="zero")
    for radius in range(bits + 1):
        metrics = brute_force_metrics(distances, relevant, [], radius, np.zeros_like(distances))
        precision = metrics["lookup_precision"].mean()
        recall = np.nan_to_num(metrics["lookup_recall"]).mean()
        assert curve["precision"][radius] == pytest.approx(precision, abs=1e-12)
        assert curve["recall"][radius] == pytest.approx(recall, abs=1e-12)
        assert (
            curve["n_retrieved_nothing"][radius]
            == (distances <= radius).any(axis=1).size - (distances <= radius).any(axis=1).sum()
        )
    lookup = hash_lookup(query, database, bits, labels_q, labels_db, 3, no_relevant="zero")
    assert lookup["precision"] == curve["precision"][3] and lookup["recall"] == curve["recall"][3]


# --- engine: kernels, tiles, tasks, threads ----------------------------------------------------


@pytest.mark.parametrize("bits", [7, 64, 100, 300])
@pytest.mark.parametrize("kind", ["single", "many-classes", "multi", "neighbours"])
def test_histograms_and_stable_ranks_equal_brute_force_for_every_tile_and_task_shape(
    monkeypatch, bits, kind
):
    from sgh.metrics import histograms as engine
    from sgh.metrics import kernels
    from sgh.metrics.relevance import label_relevance, neighbour_relevance

    rng = np.random.default_rng(bits)
    # 13 queries: three blocks of 4 and a remainder of 1 in the kernel's query loop.
    query, database = tied_codes(rng, 13, 150, bits, n_distinct=30)
    distances = hamming_distances(query, database)
    if kind == "neighbours":
        truth = rng.integers(0, 150, (13, 6))  # repeated ids count once
        relevance = neighbour_relevance(truth, 5, 13, 150)
        relevant = np.zeros(distances.shape, dtype=bool)
        np.put_along_axis(relevant, truth[:, :5], True, axis=1)
    else:
        labels_q, labels_db = random_labels(rng, 13, 150, kind)
        relevance = label_relevance(labels_q, labels_db)
        relevant = relevance_matrix(labels_q, labels_db)
    levels = bits + 1
    expected_counts = np.stack([np.bincount(row, minlength=levels) for row in distances])
    expected_relevant = np.stack(
        [
            np.bincount(row[mask], minlength=levels)
            for row, mask in zip(distances, relevant, strict=True)
        ]
    )
    cutoffs = [1, 7, 40, 150]
    hits = np.take_along_axis(relevant, np.argsort(distances, axis=1, kind="stable"), axis=1)
    found = np.cumsum(hits, axis=1)
    precision_terms = np.cumsum(hits * found / np.arange(1, 151), axis=1)
    # Tiles of one item .. the whole database (segment boundaries inside and across tiles);
    # tasks of one query block .. all queries (the table bound caps the task size).
    for tile_bytes, table_cells in ((8, 1 << 21), (64, 4), (1000, 100), (1 << 17, 1 << 21)):
        monkeypatch.setattr(kernels, "TILE_BYTES", tile_bytes)
        monkeypatch.setattr(engine, "TABLE_CELLS", table_cells)
        for workers in (1, 2):
            histograms = engine.distance_histograms(
                query, database, bits, relevance, cutoffs, workers=workers
            )
            np.testing.assert_array_equal(histograms.counts, expected_counts)
            np.testing.assert_array_equal(histograms.relevant, expected_relevant)
            np.testing.assert_array_equal(
                histograms.stable_relevant_retrieved, found[:, np.array(cutoffs) - 1]
            )
            np.testing.assert_allclose(
                histograms.stable_precision_sums,
                precision_terms[:, np.array(cutoffs) - 1],
                rtol=1e-13,
            )


def test_task_slices_cover_the_queries_in_blocks_within_the_table_bound(monkeypatch):
    from sgh.metrics import histograms as engine

    monkeypatch.setattr(engine, "TABLE_CELLS", 1000)
    for n_queries, n_segments, workers in itertools.product((1, 5, 33, 1000), (1, 10, 999), (1, 3)):
        tasks = engine._task_slices(n_queries, n_segments, workers)
        covered = np.concatenate([np.arange(task.start, task.stop) for task in tasks])
        np.testing.assert_array_equal(covered, np.arange(n_queries))
        for task in tasks[:-1]:
            assert (task.stop - task.start) % 4 == 0  # whole blocks of the unrolled kernel
        assert max(task.stop - task.start for task in tasks) <= max(4, 1000 // n_segments)
        if workers > 1 and n_queries >= 4 * workers * 4:
            assert len(tasks) >= workers  # every worker gets work


def test_any_number_of_workers_gives_identical_results(monkeypatch):
    from sgh.metrics import histograms as engine

    monkeypatch.setattr(engine, "TASKS_PER_WORKER", 5)  # many small tasks, finished out of order
    rng = np.random.default_rng(15)
    query, database = tied_codes(rng, 40, 500, 32, n_distinct=60)
    labels_q, labels_db = random_labels(rng, 40, 500, "single")
    for ties in ("expected", "stable"):
        one, two, three = (
            evaluate_labels(
                query,
                database,
                32,
                labels_q,
                labels_db,
                map_k=(10, 100),
                ties=ties,
                pr_curve=True,
                workers=workers,
            )
            for workers in (1, 2, 3)
        )
        assert one == two == three
    truth = np.stack([rng.permutation(500)[:10] for _ in range(40)])
    recalls = [recall_at_n(query, database, 32, truth, [1, 50], workers=w) for w in (1, 2, 3)]
    assert recalls[0] == recalls[1] == recalls[2]


def test_evaluate_labels_equals_the_single_metric_functions():
    rng = np.random.default_rng(16)
    query, database = tied_codes(rng, 10, 120, 16, n_distinct=15)
    labels_q, labels_db = random_labels(rng, 10, 120, "single")
    for ties in ("expected", "stable"):
        args = (query, database, 16, labels_q, labels_db)
        combined = evaluate_labels(*args, map_k=[7], radius=[1, 4], ties=ties, denominator="min_rk")
        assert combined["map"] == mean_average_precision(*args, ties)["map"]
        assert (
            combined["map@7"]
            == mean_average_precision(*args, ties, k=7, denominator="min_rk")["map"]
        )
        for radius in (1, 4):
            lookup = hash_lookup(*args, radius)
            assert combined[f"lookup_precision@r{radius}"] == lookup["precision"]
            assert combined[f"lookup_f1@r{radius}"] == lookup["f1"]
        assert (combined["ties"], combined["denominator"]) == (ties, "min_rk")


def test_new_arguments_are_checked():
    query, database = codes_at_distances([0, 1], bits=4)
    with pytest.raises(ValueError,
                       match="denominator='R' is not known; accepted: retrieved, min_rk, r"):
        mean_average_precision(query, database, 4, [0], [0, 1], k=1, denominator="R")
    with pytest.raises(ValueError, match="^k must be positive integers, got 0"):
        mean_average_precision(query, database, 4, [0], [0, 1], k=0)
    with pytest.raises(ValueError, match="precision_k must be positive integers"):
        evaluate_labels(query, database, 4, [0], [0, 1], precision_k=[1.5])
    with pytest.raises(ValueError, match="radius=-1 is impossible; accepted: an integer >= 0"):
        hash_lookup(query, database, 4, [0], [0, 1], radius=-1)
    with pytest.raises(ValueError, match="workers=0 is impossible; accepted: an integer >= 1"):
        pr_curve(query, database, 4, [0], [0, 1], workers=0)
    with pytest.raises(ValueError, match=r"query_labels must have one label .* \(1\)"):
        hash_lookup(query, database, 4, [[0, 1], [1, 0]], [[0, 1], [1, 1]])


def test_kernels_still_compile_where_no_cache_can_be_written():
    # numba refuses cache=True when it finds no writable cache directory (read-only package and
    # home); a function without a source file is refused the same way.
    from sgh.compiled import compiled as compile_kernel

    namespace = {}
    exec("def twice(x):\n    return 2 * x\n", namespace)
    compiled = compile_kernel(namespace["twice"])
    assert compiled(21) == 42
    assert type(compiled._cache).__name__ == "NullCache"


# ~5 s each: one code length in the default suite, the others (one word, several) in the slow.
@pytest.mark.parametrize("bits", [pytest.param(8, marks=pytest.mark.slow), 64,
                                  pytest.param(100, marks=pytest.mark.slow)])
def test_a_database_scanned_in_shards_gives_the_same_metrics(bits, monkeypatch):
    # Large databases are scanned shard by shard (histograms summed, stable ranks carried over):
    # every metric, tie-aware and tie-broken, must be exactly that of one scan.
    from sgh.metrics import histograms

    rng = np.random.default_rng(bits)
    query, database = tied_codes(rng, 37, 500, bits, n_distinct=40)
    single = rng.integers(0, 5, 537)
    multi = rng.integers(0, 2, (537, 6))
    truth = np.stack([rng.choice(500, 12, replace=False) for _ in range(37)])
    truth[3, 5] = truth[3, 4]  # a repeated id counts once

    def everything():
        out = {}
        for ties in ("expected", "stable"):
            for name, labels in (("single", single), ("multi", multi)):
                out[name, ties] = evaluate_labels(query, database, bits, labels[:37],
                                                  labels[37:], map_k=(10, 100, 600),
                                                  radius=(0, 2), pr_curve=True, ties=ties)
            out["recall", ties] = recall_at_n(query, database, bits, truth, (1, 10, 100, 499),
                                              k=12, ties=ties)
        return out

    whole = everything()
    for shard_items in (1, 7, 128, 499):
        monkeypatch.setattr(histograms, "SHARD_ITEMS", shard_items)
        assert everything() == whole, shard_items
