"""Evaluation rankings: `SGHIndex`'s own search in the mode `eval.ranking` names (scan,
two_stage: the rescored shortlist then the encoder scan's rest, bytes)."""

import warnings

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from sgh.codes import pack_bits
from sgh.config import EvalConfig, validate_eval
from sgh.errors import UserInputError
from sgh.scores.asymmetric import decoder_score, projection_score
from sgh.scores.asymmetric_index import AsymmetricIndex
from sgh.scores.decoded import DecoderNetwork
from sgh.scores.score_set import ScoreSet
from sgh.search.rankings import evaluation_ranking
from sgh.search.sgh_index import SGHIndex

N = 500


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(N, 5)).astype(np.float32)
    projection = rng.normal(size=(5, 10))
    database, queries = pack_bits(vectors @ projection > 0), vectors[:30] + 0.1
    # The decoder chosen for both uses; the encoder (the projection's form) makes shortlists.
    score = ScoreSet({"encoder": projection_score(np.zeros(5), projection, "test"),
                      "decoder": decoder_score(rng.normal(size=(10, 5)), np.zeros(5),
                                               "euclidean")}, "decoder", "decoder")
    return vectors, database, queries, score


def _orders(ranking, depth):
    return np.concatenate([orders for _, _, orders in ranking.order_blocks(depth)])


def _two_stage_index(score, database, shortlist):
    index = SGHIndex(score, mode="two_stage")
    index.shortlist = shortlist
    index.add_codes(database)
    return index


def test_scan_ranking_is_what_the_index_serves(data):
    _, database, queries, score = data
    ranking = evaluation_ranking(EvalConfig(ranking="scan"), database, score, queries)
    index = SGHIndex(score)  # the decoder chosen for a scan
    index.add_codes(database)
    # At any depth, the ids SGHIndex.search returns for that k: the fast scan's, rescored.
    np.testing.assert_array_equal(_orders(ranking, 40), index.search(queries, 40)[1])
    # The whole database: every item, in the exact score's order, ties by id.
    whole = _orders(ranking, N)
    exact = AsymmetricIndex(score.scores["decoder"], database).search(queries, N)[1]
    np.testing.assert_array_equal(whole, exact)
    assert ranking.description.startswith("scan: decoder, reconstruction distance")
    assert "SGHIndex(mode='scan')" in ranking.description


def test_two_stage_ranking_is_the_index_search_then_the_encoder_scans_rest(data):
    _, database, queries, score = data
    S = 60
    ranking = evaluation_ranking(EvalConfig(ranking="two_stage", shortlist=S), database, score,
                                 queries)
    index = _two_stage_index(score, database, S)
    # Every N <= S: the first N ids are exactly what the index serves for k = N.
    for depth in range(1, S + 1):
        np.testing.assert_array_equal(_orders(ranking, depth), index.search(queries, depth)[1],
                                      err_msg=f"depth {depth}")
    # Beyond S, the whole database: each id once, the shortlist first, then the rest in the
    # encoder score's order (its exact order over every item, ties by id).
    whole = _orders(ranking, N)
    np.testing.assert_array_equal(np.sort(whole, axis=1), np.tile(np.arange(N), (len(queries), 1)))
    np.testing.assert_array_equal(whole[:, :S], index.search(queries, S)[1])
    encoder = AsymmetricIndex(score.scores["encoder"], database).search(queries, N)[1]
    assert (whole[:, :S] != encoder[:, :S]).any()  # the rescoring reorders the shortlist
    for row in range(len(queries)):
        np.testing.assert_array_equal(whole[row, S:],
                                      encoder[row][~np.isin(encoder[row], whole[row, :S])])
    # Between S and the whole database: the same head, each id at most once.
    part = _orders(ranking, 200)
    assert part.shape == (len(queries), 200)
    np.testing.assert_array_equal(part[:, :S], whole[:, :S])
    assert all(len(set(row)) == 200 for row in part)
    assert ranking.description.startswith(f"two_stage: SGHIndex(mode='two_stage', shortlist={S})")
    assert "reordered by the decoder, reconstruction distance" in ranking.description


def test_a_shortlist_of_the_whole_database_is_the_rescoring_scores_order(data):
    _, database, queries, score = data
    for shortlist in (N, 1000):  # 1000: more than the items, the whole database
        everything = evaluation_ranking(EvalConfig(ranking="two_stage", shortlist=shortlist),
                                        database, score, queries)
        decoder = AsymmetricIndex(score.scores["decoder"], database).search(queries, N)[1]
        np.testing.assert_array_equal(_orders(everything, N), decoder)


def test_a_two_stage_ranking_by_the_score_that_made_its_shortlist_says_so_once(data):
    _, database, queries, score = data
    encoder_both = ScoreSet(score.scores, "encoder", "encoder")
    ranking = evaluation_ranking(EvalConfig(ranking="two_stage", shortlist=50), database,
                                 encoder_both, queries)
    with pytest.warns(UserWarning, match="the encoder score rescores the shortlist it made") \
            as caught:
        _orders(ranking, N)
    assert len(caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _orders(ranking, N)  # ranking, and the shortlist curve's searches, say nothing more
        ranking.index.search(queries, 10)
        # The decoder rescores the encoder's shortlist: nothing to say.
        _orders(evaluation_ranking(EvalConfig(ranking="two_stage", shortlist=50), database,
                                   score, queries), N)


def test_eval_score_picks_the_kind_and_auto_the_validated_one(data):
    _, database, queries, score = data
    for setting, form in (("auto", "decoder"), ("decoder", "decoder"), ("encoder", "test")):
        ranking = evaluation_ranking(EvalConfig(ranking="scan", score=setting), database,
                                     score, queries)
        assert ranking.description.startswith(f"scan: {form}")
        two_stage = evaluation_ranking(EvalConfig(ranking="two_stage", score=setting,
                                                  shortlist=40), database, score, queries)
        assert f"reordered by the {form}" in two_stage.description
    with pytest.raises(UserInputError, match="eval.score=joint: the run has no per-bit joint "
                                             r"score \(it has: encoder, decoder\)"):
        evaluation_ranking(EvalConfig(ranking="scan", score="joint"), database, score, queries)
    with pytest.raises(UserInputError, match="eval.score=joint: the run has no joint score "
                                             r"\(it has: encoder, decoder\)"):
        evaluation_ranking(EvalConfig(ranking="two_stage", score="joint"), database, score,
                           queries)


def test_an_mlp_decoders_kinds_rank_a_two_stage_shortlist_and_no_scan(data):
    _, database, queries, score = data
    rng = np.random.default_rng(3)
    network = DecoderNetwork.from_arrays({  # 10 bits -> 4 hidden (relu) -> 5 features
        "kernel_0": rng.normal(size=(10, 4)), "bias_0": rng.normal(size=4),
        "activation": np.str_("relu"), "output_kernel": rng.normal(size=(4, 5)),
        "output_bias": rng.normal(size=5), "mean": np.zeros(5), "scale": np.float64(1.0),
        "noise_variance": np.float64(1.0)}, "test")
    mlp = ScoreSet({"encoder": score.scores["encoder"]}, "encoder", "decoder", decoder=network)
    ranking = evaluation_ranking(EvalConfig(ranking="two_stage", shortlist=40), database, mlp,
                                 queries)
    index = _two_stage_index(mlp, database, 40)
    np.testing.assert_array_equal(_orders(ranking, 40), index.search(queries, 40)[1])
    assert "reordered by the decoder (mlp)" in ranking.description
    for kind in ("decoder", "joint"):
        with pytest.raises(UserInputError, match=f"^eval.score={kind}: the run has no per-bit "
                                                 f"{kind} score .*accepted: "
                                                 "eval.ranking=two_stage, or eval.score=encoder$"):
            evaluation_ranking(EvalConfig(ranking="scan", score=kind), database, mlp, queries)


def test_the_bytes_ranking_is_the_byte_decoder_index_search(data):
    vectors, database, queries, score = data
    # BLAS on one thread: the byte decoder's small solves only fight threads on two cores.
    with threadpool_limits(1):
        ranking = evaluation_ranking(EvalConfig(ranking="bytes"), database, score, queries,
                                     vectors, train_vectors=vectors)
        index = SGHIndex(score, mode="bytes")  # the scores bring no byte decoder: fitted here
        index.train(vectors)
        index.add(vectors)
    np.testing.assert_array_equal(_orders(ranking, 30), index.search(queries, 30)[1])
    assert ranking.description.startswith(
        f"bytes: SGHIndex(mode='bytes', encoding={index.encoding!r})")


def test_what_a_ranking_needs_is_refused_in_one_line(data):
    vectors, database, queries, score = data
    for mode in ("scan", "two_stage"):
        with pytest.raises(UserInputError, match=f"^eval.ranking={mode} needs an asymmetric "
                                                 "score, and SH has none"):
            evaluation_ranking(EvalConfig(ranking=mode), database, None, queries,
                               without_score="SH has none")
        with pytest.raises(UserInputError, match="sgh-eval run=DIR instead of codes=FILE"):
            evaluation_ranking(EvalConfig(ranking=mode), database, score)
    with pytest.raises(UserInputError, match=r"byte decoder index \(SGHIndex\(mode='bytes'\)\), "
                                             "and SH has none"):
        evaluation_ranking(EvalConfig(ranking="bytes"), database, None, queries, vectors,
                           without_score="SH has none")
    with pytest.raises(UserInputError, match="and a codes file holds no features"):
        evaluation_ranking(EvalConfig(ranking="bytes"), database, score, queries)
    assert evaluation_ranking(EvalConfig(), database) is None


@pytest.mark.parametrize(("retired", "mode"), [("asymmetric", "scan"), ("rerank", "two_stage")])
def test_a_retired_ranking_name_is_refused_naming_the_mode(retired, mode):
    with pytest.raises(UserInputError, match=f"^eval.ranking={retired} is now "
                                             f"eval.ranking={mode} "):
        validate_eval(EvalConfig(ranking=retired))
    assert validate_eval(EvalConfig(ranking=mode)).ranking == mode
