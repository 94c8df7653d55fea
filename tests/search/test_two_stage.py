"""Two-stage search: a Hamming shortlist rescored by the decoder's score or exact distances."""

import dataclasses
import warnings

import numpy as np
import pytest

from sgh.codes import pack_bits
from sgh.data.streamed_features import StreamedFeatures
from sgh.data.vector_files import open_vectors
from sgh.scores.asymmetric import decoder_score
from sgh.scores.asymmetric_index import AsymmetricIndex
from sgh.search.two_stage import TwoStageSearch, default_shortlist
from tests.helpers import hamming_distances
from tests.helpers_vector_files import write_texmex


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(800, 6)).astype(np.float32)
    templates = rng.normal(size=(16, 6))
    database = pack_bits((vectors @ rng.normal(size=(6, 16))) > 0)
    queries = rng.normal(size=(12, 6)).astype(np.float32)
    query_codes = pack_bits((queries @ rng.normal(size=(6, 16))) > 0)
    score = decoder_score(templates, rng.normal(size=6), "euclidean")
    return vectors, database, queries, query_codes, score


def test_a_shortlist_of_the_whole_database_is_the_asymmetric_search(data):
    vectors, database, queries, query_codes, score = data
    search = TwoStageSearch(database, score=score)
    full = AsymmetricIndex(score)
    full.add(database)
    for a, b in zip(search.search(queries, 25, shortlist=800, query_codes=query_codes),
                    full.search(queries, 25), strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_shortlist_is_the_hamming_top_s_or_the_radius(data):
    _, database, queries, query_codes, score = data
    search = TwoStageSearch(database, score=score)
    distances = hamming_distances(query_codes, database)
    top = search.shortlist(shortlist=40, query_codes=query_codes)
    np.testing.assert_array_equal(top, np.argsort(distances, axis=1, kind="stable")[:, :40])
    within = search.shortlist(radius=3, query_codes=query_codes)
    for row in range(len(queries)):
        expected = np.flatnonzero(distances[row] <= 3)
        assert sorted(within[row][within[row] >= 0]) == expected.tolist()
    D, I = search.search(queries, 10, radius=3, query_codes=query_codes)
    # Every result lies within the radius; rows with fewer hits are padded.
    for row in range(len(queries)):
        hits = I[row][I[row] >= 0]
        assert (distances[row, hits] <= 3).all()
        assert np.isinf(D[row][I[row] < 0]).all()


@pytest.mark.parametrize("similarity", ["euclidean", "inner_product"])
def test_exact_rescoring_orders_the_shortlist_by_true_distance_streamed_or_not(data, tmp_path,
                                                                               similarity):
    vectors, database, queries, query_codes, _ = data
    streamed = StreamedFeatures(open_vectors(write_texmex(tmp_path / "x.fvecs", vectors)))
    in_memory = TwoStageSearch(database, vectors=vectors, similarity=similarity, bits=16)
    from_disk = TwoStageSearch(database, vectors=streamed, similarity=similarity, bits=16)
    D, I = in_memory.search(queries, 20, 100, rescore="exact", query_codes=query_codes)
    for a, b in zip((D, I), from_disk.search(queries, 20, 100, rescore="exact",
                                             query_codes=query_codes), strict=True):
        np.testing.assert_array_equal(a, b)
    shortlist = in_memory.shortlist(shortlist=100, query_codes=query_codes)
    for row in range(len(queries)):
        candidates = vectors[shortlist[row]].astype(np.float64)
        q = queries[row].astype(np.float64)
        exact = (-(candidates @ q) if similarity == "inner_product"
                 else ((candidates - q) ** 2).sum(1))
        np.testing.assert_array_equal(I[row], shortlist[row][np.argsort(exact,
                                                                          kind="stable")[:20]])


def test_a_shortlist_by_score_is_its_scan_top_s_and_needs_no_query_codes(data):
    _, database, queries, _, score = data
    search = TwoStageSearch(database, shortlist_score=score, vectors=data[0])
    full = AsymmetricIndex(score)
    full.add(database)
    np.testing.assert_array_equal(search.shortlist(queries, 40), full.search(queries, 40)[1])
    D, I = search.search(queries, 10, 40, rescore="exact")  # no query codes anywhere
    assert I.shape == (12, 10) and np.isin(I, full.search(queries, 40)[1]).all()
    with pytest.raises(ValueError, match="a shortlist by score takes the top S"):
        search.shortlist(queries, radius=2)


def test_a_hamming_shortlist_asks_for_the_query_codes(data):
    vectors, database, queries, query_codes, score = data
    search = TwoStageSearch(database, score=score)
    with pytest.raises(ValueError, match=r"^a Hamming shortlist compares the queries' codes: "
                                         r"query_codes=\.\.\. \(hasher.encode\(queries\)\)"):
        search.search(queries, 5)
    with pytest.raises(ValueError, match="3 query codes for 12 queries"):
        search.search(queries, 5, query_codes=query_codes[:3])


def test_the_bits_come_from_the_score_and_only_a_search_without_one_takes_them(data):
    vectors, database, _, _, score = data
    assert TwoStageSearch(database, score=score).bits == 16
    assert TwoStageSearch(database, shortlist_score=score).bits == 16
    assert TwoStageSearch(database, vectors=vectors, bits=16).bits == 16
    with pytest.raises(ValueError, match=r"^a search without a score needs the code length: "
                                         r"bits=\.\.\.$"):
        TwoStageSearch(database, vectors=vectors)
    with pytest.raises(ValueError, match=r"^the code lengths disagree \(score: 16 bits, bits: 8 "
                                         r"bits\)$"):
        TwoStageSearch(database, score=score, bits=8)
    with pytest.raises(ValueError, match="but bits=16 needs 2 bytes"):  # the score's bits
        TwoStageSearch(database[:, :1], score=score)


def test_without_a_size_the_shortlist_is_sized_for_the_database(data):
    # max(5 k, 1% of the items): 1% of 10,000 is 100, which at k = 100 would rescore nothing
    # into the top k, so 5 k = 500; of 69,000 items (MNIST) 690; of 1,000,000 10,000.
    assert default_shortlist(100, 10_000) == 500
    assert default_shortlist(100, 69_000) == 690
    assert default_shortlist(100, 1_000_000) == 10_000
    assert default_shortlist(10, 801) == 50 and default_shortlist(1, 801) == 9  # 1% rounds up
    _, database, queries, query_codes, score = data
    search = TwoStageSearch(database, score=score)
    for k in (3, 20):  # 800 items: 5 k = 15 and 100 (1% = 8)
        for a, b in zip(search.search(queries, k, query_codes=query_codes),
                        search.search(queries, k, 5 * k, query_codes=query_codes), strict=True):
            np.testing.assert_array_equal(a, b)


def test_two_stages_by_one_score_say_so_once_when_the_search_is_made(data):
    vectors, database, queries, query_codes, score = data
    copy = dataclasses.replace(score)  # another object, the same arrays: the same score
    for shortlist_score in (score, copy):
        with pytest.warns(UserWarning, match=r"^two-stage search: the decoder score rescores "
                                             "the shortlist it made, so the results are that "
                                             "score's scan") as caught:
            search = TwoStageSearch(database, score=score, shortlist_score=shortlist_score)
        assert len(caught) == 1 and caught[0].filename == __file__  # the caller's line
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # searching does not say it again
            search.search(queries, 5, 50)
    other = decoder_score(np.ones((16, 6)), np.zeros(6), "euclidean")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TwoStageSearch(database, score=other, shortlist_score=score)  # two scores
        TwoStageSearch(database, score=score, vectors=vectors)  # a Hamming shortlist
        TwoStageSearch(database, shortlist_score=score, vectors=vectors)  # exact rescoring


def test_a_search_prints_in_one_line(data):
    vectors, database, _, _, score = data
    assert repr(TwoStageSearch(database, score=score, vectors=vectors)) == (
        "TwoStageSearch(16 bits, 800 items, shortlist by Hamming distance, rescore: score or "
        "exact)")
    assert repr(TwoStageSearch(database, shortlist_score=score, vectors=vectors)) == (
        "TwoStageSearch(16 bits, 800 items, shortlist by the decoder score, rescore: exact)")


def test_missing_pieces_are_named(data):
    vectors, database, queries, query_codes, score = data
    with pytest.raises(ValueError, match="rescore='score' needs the method's asymmetric score"):
        TwoStageSearch(database, bits=16).search(queries, 5, query_codes=query_codes)
    with pytest.raises(ValueError, match="rescore='exact' needs the database's original vectors"):
        TwoStageSearch(database, score=score).search(queries, 5, rescore="exact",
                                                     query_codes=query_codes)
    with pytest.raises(ValueError, match="rescore='nearest' is not known"):
        TwoStageSearch(database, score=score).search(queries, 5, rescore="nearest",
                                                     query_codes=query_codes)
    with pytest.raises(ValueError, match="vectors has 10 rows for 800 codes"):
        TwoStageSearch(database, vectors=vectors[:10], bits=16)
    with pytest.raises(ValueError, match="exactly one of shortlist"):
        TwoStageSearch(database, score=score).shortlist(queries, query_codes=query_codes)
    with pytest.raises(ValueError, match="exactly one of shortlist"):
        TwoStageSearch(database, score=score).search(queries, 5, 50, 2, query_codes=query_codes)


def test_the_shortlist_scan_runs_on_the_threads_asked(data, monkeypatch):
    # A benchmark that times "one thread" must get one: the scan's threads are the caller's.
    _, database, queries, query_codes, score = data
    asked = []
    search_of = AsymmetricIndex.search
    monkeypatch.setattr(AsymmetricIndex, "search", lambda self, *args: (
        asked.append(args[2]), search_of(self, *args))[1])
    other = decoder_score(np.ones((16, 6)), np.zeros(6), "euclidean")
    search = TwoStageSearch(database, score=other, shortlist_score=score, workers=1)
    search.search(queries, 5, shortlist=50)
    search.shortlist(queries, 50)
    assert asked == [1, 1]
