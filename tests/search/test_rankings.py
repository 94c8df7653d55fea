"""Evaluation rankings: asymmetric, and a Hamming shortlist rescored then the rest in order."""

import warnings

import numpy as np
import pytest

from sgh.codes import pack_bits
from sgh.config import EvalConfig, validate_eval
from sgh.errors import UserInputError
from sgh.scores.asymmetric import decoder_score, projection_score
from sgh.scores.asymmetric_index import AsymmetricIndex
from sgh.scores.score_set import ScoreSet
from sgh.search.rankings import evaluation_ranking, order_of_distances
from sgh.search.rankings import hamming_distances as packed_hamming_distances
from sgh.search.sgh_index import SGHIndex
from tests.helpers import hamming_distances


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(500, 5)).astype(np.float32)
    projection = rng.normal(size=(5, 10))
    database, queries = pack_bits(vectors @ projection > 0), vectors[:30] + 0.1
    # The decoder chosen for both uses; the encoder (the projection's form) makes shortlists.
    score = ScoreSet({"encoder": projection_score(np.zeros(5), projection, "test"),
                      "decoder": decoder_score(rng.normal(size=(10, 5)), np.zeros(5),
                                               "euclidean")}, "decoder", "decoder")
    return vectors, database, queries, pack_bits(queries @ projection > 0), score


def _orders(ranking, depth):
    return np.concatenate([orders for _, _, orders in ranking.order_blocks(depth)])


def test_hamming_order_is_distance_then_id():
    rng = np.random.default_rng(1)
    database = pack_bits(rng.integers(0, 2, (300, 9)))
    queries = pack_bits(rng.integers(0, 2, (4, 9)))
    distances = hamming_distances(queries, database)
    expected = np.lexsort((np.tile(np.arange(300), (4, 1)), distances), axis=1)
    packed = packed_hamming_distances(queries, database)
    np.testing.assert_array_equal(packed, distances)
    np.testing.assert_array_equal(order_of_distances(packed, 300), expected)
    np.testing.assert_array_equal(order_of_distances(packed, 17), expected[:, :17])


def test_asymmetric_ranking_is_what_the_index_serves(data):
    _, database, queries, query_codes, score = data
    ranking = evaluation_ranking(EvalConfig(ranking="asymmetric"), database, query_codes, 10,
                                 score, queries)
    index = SGHIndex(score)  # the decoder chosen for a scan
    index.add_codes(database)
    # At any depth, the ids SGHIndex.search returns for that k: the fast scan's, rescored.
    np.testing.assert_array_equal(_orders(ranking, 40), index.search(queries, 40)[1])
    # The whole database: every item, in the exact score's order, ties by id.
    whole = _orders(ranking, 500)
    exact = AsymmetricIndex(score.scores["decoder"], database).search(queries, 500)[1]
    np.testing.assert_array_equal(whole, exact)
    assert ranking.description.startswith("asymmetric: decoder, reconstruction distance")
    assert "SGHIndex(mode='scan')" in ranking.description


def _assert_shortlist_rescored_then_the_rest(orders, first_stage, rescored, size):
    """Each row: the first stage's top `size` in the rescoring's order, then its own order."""
    for row in range(len(orders)):
        shortlisted = set(first_stage[row, :size])
        np.testing.assert_array_equal(orders[row, size:], first_stage[row, size:])
        np.testing.assert_array_equal(orders[row, :size],
                                      [i for i in rescored[row] if i in shortlisted])


def test_rerank_is_the_rescored_shortlist_then_the_hamming_rest(data):
    vectors, database, queries, query_codes, score = data
    config = EvalConfig(ranking="rerank", shortlist=60, shortlist_by="hamming")
    ranking = evaluation_ranking(config, database, query_codes, 10, score, queries)
    orders = _orders(ranking, 500)
    hamming = order_of_distances(hamming_distances(query_codes, database), 500)
    asymmetric = _orders(evaluation_ranking(EvalConfig(ranking="asymmetric"), database,
                                            query_codes, 10, score, queries), 500)
    _assert_shortlist_rescored_then_the_rest(orders, hamming, asymmetric, 60)
    np.testing.assert_array_equal(_orders(ranking, 100), orders[:, :100])
    everything = evaluation_ranking(EvalConfig(ranking="rerank", shortlist=500), database,
                                    query_codes, 10, score, queries)
    np.testing.assert_array_equal(_orders(everything, 500), asymmetric)
    by_radius = evaluation_ranking(EvalConfig(ranking="rerank", shortlist_radius=2,
                                              rescore="exact"), database, query_codes, 10,
                                   None, queries, vectors)
    radius_orders = _orders(by_radius, 500)
    distances = hamming_distances(query_codes, database)
    for row in range(len(queries)):
        inside = int((distances[row] <= 2).sum())
        assert (distances[row, radius_orders[row, :inside]] <= 2).all()
        np.testing.assert_array_equal(radius_orders[row, inside:], hamming[row, inside:])
    assert "Hamming radius 2" in by_radius.description
    assert "exact euclidean" in by_radius.description


def test_an_encoder_shortlist_is_the_encoder_top_s_rescored_then_its_rest(data):
    _, database, queries, query_codes, score = data
    config = EvalConfig(ranking="rerank", shortlist=50, shortlist_by="encoder")
    orders = _orders(evaluation_ranking(config, database, query_codes, 10, score, queries), 500)
    encoder = AsymmetricIndex(score.scores["encoder"])
    encoder.add(database)
    by_encoder = encoder.search(queries, 500)[1]
    asymmetric = _orders(evaluation_ranking(EvalConfig(ranking="asymmetric"), database,
                                            query_codes, 10, score, queries), 500)
    _assert_shortlist_rescored_then_the_rest(orders, by_encoder, asymmetric, 50)
    # Asked for 30 (fewer than the shortlist): the same head, by the partial scan.
    np.testing.assert_array_equal(
        _orders(evaluation_ranking(config, database, query_codes, 10, score, queries), 30),
        orders[:, :30])


def test_shortlist_by_auto_is_the_encoder_scan_where_the_method_has_one(data):
    vectors, database, queries, query_codes, score = data
    ranked = {by: evaluation_ranking(EvalConfig(ranking="rerank", shortlist=50, shortlist_by=by),
                                     database, query_codes, 10, score, queries)
              for by in ("auto", "encoder")}
    np.testing.assert_array_equal(_orders(ranked["auto"], 500), _orders(ranked["encoder"], 500))
    # What was used, stated next to the numbers (metrics.json and the table's `ranking`).
    assert ranked["auto"].description == ranked["encoder"].description
    assert ranked["auto"].description.startswith("rerank: shortlist = the top 50 by the test")
    # No score (SH, SpH, a run without asymmetric.npz), or a radius: Hamming distance.
    for settings, scores in (({"rescore": "exact"}, None),
                             ({"shortlist_radius": 2}, score)):
        config = validate_eval(EvalConfig(ranking="rerank", **settings))
        assert config.shortlist_by == "auto"
        auto = evaluation_ranking(config, database, query_codes, 10, scores, queries, vectors)
        hamming = evaluation_ranking(EvalConfig(ranking="rerank", shortlist_by="hamming",
                                                **settings), database, query_codes, 10,
                                     scores, queries, vectors)
        assert auto.description == hamming.description and "Hamming" in auto.description
        np.testing.assert_array_equal(_orders(auto, 500), _orders(hamming, 500))
    with pytest.raises(UserInputError, match=r"eval.shortlist_radius=2 is a Hamming radius, and "
                                             "eval.shortlist_by=encoder ranks by score"):
        validate_eval(EvalConfig(ranking="rerank", shortlist_by="encoder", shortlist_radius=2))


def test_a_rerank_by_the_score_that_made_its_shortlist_says_so_once(data):
    _, database, queries, query_codes, score = data
    encoder_both = ScoreSet(score.scores, "encoder", "encoder")
    with pytest.warns(UserWarning, match="the encoder score rescores the shortlist it made") \
            as caught:
        ranking = evaluation_ranking(EvalConfig(ranking="rerank", shortlist=50), database,
                                     query_codes, 10, encoder_both, queries)
    assert len(caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _orders(ranking, 500)  # ranking, and the shortlist curve's searches, say nothing more
        ranking.search.search(queries, 10, 50)
        evaluation_ranking(EvalConfig(ranking="rerank", shortlist=50), database, query_codes,
                           10, score, queries)  # the decoder rescores the encoder's shortlist


def test_eval_score_picks_the_kind_and_auto_the_validated_one(data):
    _, database, queries, query_codes, score = data
    for setting, form in (("auto", "decoder"), ("decoder", "decoder"), ("encoder", "test")):
        ranking = evaluation_ranking(EvalConfig(ranking="asymmetric", score=setting), database,
                                     query_codes, 10, score, queries)
        assert ranking.description.startswith(f"asymmetric: {form}")
    with pytest.raises(UserInputError, match="eval.score=joint: the run has no per-bit joint "
                                             r"score \(it has: encoder, decoder\)"):
        evaluation_ranking(EvalConfig(ranking="asymmetric", score="joint"), database,
                           query_codes, 10, score, queries)


def test_what_a_ranking_needs_is_refused_in_one_line(data):
    vectors, database, queries, query_codes, score = data
    with pytest.raises(UserInputError, match="needs an asymmetric score, and SH has none"):
        evaluation_ranking(EvalConfig(ranking="asymmetric"), database, query_codes, 10, None,
                           queries, without_score="SH has none")
    with pytest.raises(UserInputError, match="sgh-eval run=DIR instead of codes=FILE"):
        evaluation_ranking(EvalConfig(ranking="asymmetric"), database, query_codes, 10, score)
    with pytest.raises(UserInputError, match="reads the database's original vectors"):
        evaluation_ranking(EvalConfig(ranking="rerank", rescore="exact"), database,
                           query_codes, 10, None, queries)
    assert evaluation_ranking(EvalConfig(), database, query_codes, 10) is None
