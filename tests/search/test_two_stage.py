# ruff: noqa: E741  (``D, I`` is faiss's name for search results)
"""Two-stage search: a Hamming shortlist rescored by the decoder's score or exact distances."""

import numpy as np
import pytest

from sgh.codes import pack_bits
from sgh.data.streamed_features import StreamedFeatures
from sgh.data.vector_files import open_vectors
from sgh.search.asymmetric import decoder_score
from sgh.search.asymmetric_index import AsymmetricIndex
from sgh.search.two_stage import TwoStageSearch
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
    search = TwoStageSearch(database, 16, score=score)
    full = AsymmetricIndex(score)
    full.add(database)
    for a, b in zip(search.search(query_codes, queries, 25, shortlist=800),
                    full.search(queries, 25), strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_shortlist_is_the_hamming_top_s_or_the_radius(data):
    _, database, queries, query_codes, score = data
    search = TwoStageSearch(database, 16, score=score)
    distances = hamming_distances(query_codes, database)
    top = search.shortlist(query_codes, shortlist=40)
    np.testing.assert_array_equal(top, np.argsort(distances, axis=1, kind="stable")[:, :40])
    within = search.shortlist(query_codes, shortlist=None, radius=3)
    for row in range(len(queries)):
        expected = np.flatnonzero(distances[row] <= 3)
        assert sorted(within[row][within[row] >= 0]) == expected.tolist()
    D, I = search.search(query_codes, queries, 10, shortlist=None, radius=3)
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
    in_memory = TwoStageSearch(database, 16, vectors=vectors, similarity=similarity)
    from_disk = TwoStageSearch(database, 16, vectors=streamed, similarity=similarity)
    D, I = in_memory.search(query_codes, queries, 20, shortlist=100, rescore="exact")
    for a, b in zip((D, I), from_disk.search(query_codes, queries, 20, shortlist=100,
                                             rescore="exact"), strict=True):
        np.testing.assert_array_equal(a, b)
    shortlist = in_memory.shortlist(query_codes, 100)
    for row in range(len(queries)):
        candidates = vectors[shortlist[row]].astype(np.float64)
        q = queries[row].astype(np.float64)
        exact = (-(candidates @ q) if similarity == "inner_product"
                 else ((candidates - q) ** 2).sum(1))
        np.testing.assert_array_equal(I[row], shortlist[row][np.argsort(exact,
                                                                          kind="stable")[:20]])


def test_a_shortlist_by_score_is_its_scan_top_s(data):
    _, database, queries, query_codes, score = data
    search = TwoStageSearch(database, 16, score=score, shortlist_score=score)
    full = AsymmetricIndex(score)
    full.add(database)
    np.testing.assert_array_equal(search.shortlist(query_codes, 40, queries=queries),
                                  full.search(queries, 40)[1])
    with pytest.raises(ValueError, match="a shortlist by score takes the top S"):
        search.shortlist(query_codes, None, radius=2, queries=queries)


def test_missing_pieces_are_named(data):
    vectors, database, queries, query_codes, score = data
    with pytest.raises(ValueError, match="rescore='score' needs the method's asymmetric score"):
        TwoStageSearch(database, 16).search(query_codes, queries, 5)
    with pytest.raises(ValueError, match="rescore='exact' needs the database's original vectors"):
        TwoStageSearch(database, 16, score=score).search(query_codes, queries, 5,
                                                         rescore="exact")
    with pytest.raises(ValueError, match="rescore='nearest' is not known"):
        TwoStageSearch(database, 16, score=score).search(query_codes, queries, 5,
                                                         rescore="nearest")
    with pytest.raises(ValueError, match="vectors has 10 rows for 800 codes"):
        TwoStageSearch(database, 16, vectors=vectors[:10])
    with pytest.raises(ValueError, match="exactly one of shortlist"):
        TwoStageSearch(database, 16, score=score).shortlist(query_codes, None, None)


def test_the_shortlist_scan_runs_on_the_threads_asked(data, monkeypatch):
    # A benchmark that times "one thread" must get one: the scan's threads are the caller's.
    _, database, queries, query_codes, score = data
    asked = []
    search_of = AsymmetricIndex.search
    monkeypatch.setattr(AsymmetricIndex, "search", lambda self, *args: (
        asked.append(args[2]), search_of(self, *args))[1])
    search = TwoStageSearch(database, 16, score=score, shortlist_score=score, workers=1)
    search.search(query_codes, queries, 5, shortlist=50)
    search.shortlist(query_codes, 50, queries=queries)
    assert asked == [1, 1]
