"""Asymmetric scores and their compiled scan, against brute force on unpacked bits."""

import dataclasses

import numpy as np
import pytest

from sgh.baselines import ITQ, LSH, PCAH, SH, SpH
from sgh.codes import pack_bits, unpack_bits
from sgh.scores.asymmetric import (
    decoder_score,
    encoder_score,
    joint_score,
    projection_score,
)
from sgh.scores.asymmetric_index import AsymmetricIndex
from sgh.scores.lookup_kernels import scan_top_k
from sgh.scores.score_set import ScoreSet
from sgh.scores.top_k import sort_heaps, sorted_heaps


def _decoder(bits, dim, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(bits, dim)), rng.normal(size=dim)


def _brute_force(similarity, templates, offset, database_bits, queries):
    reconstruction = database_bits @ templates + offset
    if similarity == "inner_product":
        return -(queries.astype(np.float64) @ reconstruction.T)
    return ((queries[:, None, :].astype(np.float64) - reconstruction[None]) ** 2).sum(-1)


@pytest.mark.parametrize("similarity", ["euclidean", "inner_product"])
@pytest.mark.parametrize("bits", [5, 13, 32, 64])
def test_decoder_score_is_the_reconstruction_distance_up_to_a_per_query_constant(similarity,
                                                                                  bits):
    rng = np.random.default_rng(bits)
    templates, offset = _decoder(bits, 7, bits)
    database_bits = rng.integers(0, 2, (300, bits))
    queries = rng.normal(size=(9, 7)).astype(np.float32)
    index = AsymmetricIndex(decoder_score(templates, offset, similarity))
    index.add(pack_bits(database_bits))
    exact = _brute_force(similarity, templates, offset, database_bits, queries)
    _, _, scores = next(index.score_blocks(queries))
    constant = exact - scores
    # One constant per query (||x - t||^2, or -<x, t>), so every ranking is the exact one.
    np.testing.assert_allclose(constant, constant[:, :1].repeat(300, 1), rtol=0,
                               atol=1e-3 * np.abs(exact).max())
    D, I = index.search(queries, 20)
    np.testing.assert_array_equal(I, np.argsort(exact, axis=1, kind="stable")[:, :20])
    assert (np.diff(D, axis=1) >= 0).all()


@pytest.mark.parametrize("estimator", [ITQ, PCAH, LSH])
def test_projection_forms_score_the_projection_against_the_code_signs(estimator):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 16)) @ rng.normal(size=(16, 16))
    hasher = estimator(n_bits=8, random_state=0).fit(x)
    score = hasher.asymmetric_score()
    projection = {"ITQ": "projection_", "PCAH": "components_", "LSH": "projections_"}
    codes = hasher.encode(x[:200])
    queries = x[200:210]
    v = (queries - hasher.mean_) @ getattr(hasher, projection[estimator.__name__])
    signs = 2.0 * unpack_bits(codes, 8) - 1
    exact = -(v @ signs.T)
    index = AsymmetricIndex(score)
    index.add(codes)
    _, _, scores = next(index.score_blocks(queries))
    constant = exact - scores
    np.testing.assert_allclose(constant, constant[:, :1].repeat(200, 1), atol=1e-3)
    assert estimator.__name__ in score.form


@pytest.mark.parametrize("estimator", [SH, SpH])
def test_hashers_without_a_per_bit_form_refuse_in_one_line(estimator):
    hasher = estimator(n_bits=8, random_state=0).fit(np.random.default_rng(0).normal(size=(50, 9)))
    with pytest.raises(ValueError, match=f"^{estimator.__name__} has no asymmetric score: ") as e:
        hasher.asymmetric_score()
    assert "\n" not in str(e.value)


def test_search_keeps_ties_by_id_pads_and_agrees_across_threads_and_adds():
    rng = np.random.default_rng(3)
    templates, offset = _decoder(16, 5)
    # Many repeated codes: equal scores, which must come in id order.
    codes = pack_bits(rng.integers(0, 2, (40, 16)))[rng.integers(0, 40, 3001)]
    queries = rng.normal(size=(7, 5))  # 7: four queries per code load, then three alone
    index = AsymmetricIndex(decoder_score(templates, offset, "euclidean"))
    index.add(codes)
    D, I = index.search(queries, 50, workers=1)
    _, _, scores = next(index.score_blocks(queries))
    np.testing.assert_array_equal(I, np.argsort(scores, axis=1, kind="stable")[:, :50])
    chunked = AsymmetricIndex(index.score)
    for part in np.array_split(codes, 3):
        chunked.add(part)
    for a, b in zip((D, I), chunked.search(queries, 50, workers=2), strict=True):
        np.testing.assert_array_equal(a, b)
    D, I = index.search(queries, 3005)
    assert (I[:, -4:] == -1).all() and np.isinf(D[:, -4:]).all()
    assert sorted(I[0, :3001]) == list(range(3001))


def test_rescoring_gives_the_scan_scores_bit_for_bit():
    rng = np.random.default_rng(4)
    index = AsymmetricIndex(decoder_score(*_decoder(24, 6), "euclidean"))
    index.add(pack_bits(rng.integers(0, 2, (500, 24))))
    queries = rng.normal(size=(5, 6))
    D, I = index.search(queries, 30)
    shuffled = rng.permuted(I, axis=1)
    shuffled[:, -3:] = -1  # padding stays last
    rescored_D, rescored_I = index.rescore(queries, shuffled)
    for row in range(5):
        kept = shuffled[row][shuffled[row] >= 0]
        order = np.argsort(D[row][np.isin(I[row], kept)], kind="stable")
        np.testing.assert_array_equal(rescored_I[row, :27], I[row][np.isin(I[row], kept)][order])
        np.testing.assert_array_equal(rescored_D[row, :27],
                                      np.sort(D[row][np.isin(I[row], kept)]))
    assert (rescored_I[:, 27:] == -1).all() and np.isinf(rescored_D[:, 27:]).all()


def test_save_and_load_round_trip_and_bad_files_are_named(tmp_path):
    score = decoder_score(*_decoder(10, 4), "euclidean")
    score.save(tmp_path / "score.npz")
    loaded = ScoreSet.load_score(tmp_path / "score.npz")
    for name in ("query_projection", "query_offset", "code_templates"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(score, name))
    assert (loaded.bits, loaded.form) == (score.bits, score.form)
    (tmp_path / "junk.npz").write_bytes(b"<html>not an archive</html>")
    with pytest.raises(ValueError, match="junk.npz: not a readable asymmetric-score"):
        ScoreSet.load_score(tmp_path / "junk.npz")
    np.savez(tmp_path / "partial.npz", bits=np.int64(10))
    with pytest.raises(ValueError, match="partial.npz: missing key 'query_projection'"):
        ScoreSet.load_score(tmp_path / "partial.npz")


@pytest.mark.parametrize("with_network", [False, True])
def test_a_saved_score_scans_identically_after_load(tmp_path, with_network):
    rng = np.random.default_rng(7)
    if with_network:  # an mlp encoder's score: its hidden layers travel too
        score = encoder_score([rng.normal(size=(5, 6)), rng.normal(size=(6, 12))],
                              [rng.normal(size=6), np.zeros(12)], "tanh", np.zeros(5), 1.0)
    else:
        score = decoder_score(*_decoder(12, 5), "euclidean")
    score.save(tmp_path / "score.npz")
    loaded = ScoreSet.load_score(tmp_path / "score.npz")
    codes, queries = pack_bits(rng.integers(0, 2, (300, 12))), rng.normal(size=(9, 5))
    assert repr(loaded) == repr(score) and "\n" not in repr(score)
    for before, after in zip(AsymmetricIndex(score, codes).search(queries, 20),
                             AsymmetricIndex(loaded, codes).search(queries, 20), strict=True):
        np.testing.assert_array_equal(before, after)


def test_queries_and_forms_are_checked():
    score = projection_score(np.zeros(3), np.eye(3), "PCAH")
    with pytest.raises(ValueError, match=r"queries must be real features of shape \(n, 3\)"):
        score.bit_weights(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="NaN or infinite"):
        score.bit_weights(np.full((1, 3), np.nan))
    with pytest.raises(ValueError, match="similarity='cosine' is not known"):
        decoder_score(np.eye(3), np.zeros(3), "cosine")
    with pytest.raises(ValueError, match="k=.* is impossible; accepted: an integer >= 1"):
        AsymmetricIndex(score).search(np.zeros((1, 3)), 0)


def test_scores_of_huge_features_are_rescaled_not_overflowed(tmp_path):
    rng = np.random.default_rng(5)
    templates, offset = _decoder(12, 4)
    codes = pack_bits(rng.integers(0, 2, (400, 12)))
    queries = rng.normal(size=(6, 4))
    plain = decoder_score(templates, offset, "euclidean")
    huge = decoder_score(templates * 1e30, offset * 1e30, "euclidean")
    assert plain.unit == 1.0 and huge.unit > 1e59
    huge.save(tmp_path / "huge.npz")
    assert ScoreSet.load_score(tmp_path / "huge.npz").unit == huge.unit
    results = []
    for score, x in ((plain, queries), (huge, queries * 1e30)):
        index = AsymmetricIndex(score)
        index.add(codes)
        results.append(index.search(x, 50))
    np.testing.assert_array_equal(results[0][1], results[1][1])
    np.testing.assert_allclose(results[1][0].astype(np.float64) * huge.unit,
                               results[0][0].astype(np.float64) * 1e60, rtol=1e-4)


def test_a_long_top_k_from_every_score_is_the_heap_scans_result(monkeypatch):
    # Many repeated codes, so that equal scores straddle the cut-off: both keep ties by id.
    rng = np.random.default_rng(6)
    codes = pack_bits(rng.integers(0, 2, (30, 12)))[rng.integers(0, 30, 2000)]
    index = AsymmetricIndex(decoder_score(*_decoder(12, 5), "euclidean"))
    index.add(codes)
    queries = rng.normal(size=(9, 5))
    results = {}
    for share in (0, 10**9):  # the heap always; every score always
        monkeypatch.setattr("sgh.scores.asymmetric_index.DENSE_TOP_SHARE", share)
        results[share] = [index.search(queries, k) for k in (7, 333, 2000, 2004)]
    for heap, dense in zip(results[0], results[10**9], strict=True):
        for a, b in zip(heap, dense, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("similarity, formula", [("euclidean", "||x - (hT + t)||^2"),
                                                 ("inner_product", "-<x, hT + t>")])
def test_the_joint_score_states_the_decoders_whole_formula_and_prints_short(similarity,
                                                                            formula):
    rng = np.random.default_rng(4)
    decoder = decoder_score(rng.normal(size=(8, 5)), rng.normal(size=5), similarity)
    encoder = encoder_score([rng.normal(size=(5, 8))], [np.zeros(8)], "relu", np.zeros(5), 1.0)
    joint = joint_score(encoder, decoder, 0.5, 2.0)
    assert f"0.5 x the decoder's {formula} / (2 sigma^2)" in joint.form
    scores = ScoreSet({"encoder": encoder, "decoder": decoder, "joint": joint}, "joint",
                      "decoder")
    for shown in (repr(joint), repr(scores)):
        assert "\n" not in shown and "array" not in shown
    assert repr(scores).startswith("ScoreSet(encoder, decoder, joint; 'joint' for a scan, "
                                   "'decoder' for rescoring")
    assert scores.rescorer("auto", pack_bits(rng.integers(0, 2, (3, 8)))) is decoder


def test_heaps_sorted_in_place_match_a_sort_of_the_rows():
    # The scans' max-heaps, with equal scores and empty slots (k above the items), come out of
    # the in-place heapsort exactly as from a lexsort by (score, id).
    rng = np.random.default_rng(5)
    tables = rng.integers(0, 4, (9, 2, 256)).astype(np.float32)  # few values: many ties
    codes = rng.integers(0, 256, (30, 2)).astype(np.uint8)
    norms = np.zeros(30, np.float32)
    for k in (7, 30, 41):
        D = np.full((9, k), np.inf, np.float32)
        I = np.full((9, k), -1, np.int64)
        scan_top_k(tables, codes, norms, np.zeros((0, 256 * 256), np.float32), 0, D, I)
        expected = sorted_heaps(D, I)
        sort_heaps(D, I)
        for got, want in zip((D, I), expected, strict=True):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("with_network", [False, True])
def test_coding_weights_give_the_float64_codes_with_float32_products(with_network):
    # Features built to put some weights within float32 rounding of zero (a tie in float64 is
    # what bit_weights decides): code_weights' signs are bit_weights', its values within
    # rounding, and the rows near a tie are the ones computed in float64.
    from sgh.scores.asymmetric import QueryNetwork

    rng = np.random.default_rng(6)
    dim, bits = 64, 24
    network = QueryNetwork((rng.normal(size=(dim, 8)).astype(np.float32),),
                           (np.zeros(8, np.float32),), "relu",
                           rng.normal(size=(8, bits)).astype(np.float32)) \
        if with_network else None
    score = encoder_score([rng.normal(size=(dim, bits))], [rng.normal(size=bits)], "relu",
                          np.zeros(dim), 1.0)
    if network is not None:
        score = dataclasses.replace(score, network=network)
    x = rng.normal(size=(3000, dim)).astype(np.float32)
    # Rows 0..99: move each row along a bit's template so its weight is (nearly) zero.
    w = score.bit_weights(x).astype(np.float64)
    a = score.query_projection.astype(np.float64)
    for row in range(100):
        k = row % bits
        x[row] = (x[row] - (w[row, k] * a[:, k] / (a[:, k] @ a[:, k]))).astype(np.float32)
    exact = score.bit_weights(x)
    coded = score.code_weights(x)
    np.testing.assert_array_equal(coded <= 0, exact <= 0)
    np.testing.assert_allclose(coded, exact, rtol=1e-4, atol=1e-4)
