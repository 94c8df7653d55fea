"""`SGHIndex(mode="two_stage")`: the encoder score's shortlist of S, rescored by the rescoring
score; the shortlist's default size (`default_shortlist`)."""

import dataclasses
import warnings

import faiss
import numpy as np
import pytest

from sgh.codes import pack_bits
from sgh.scores.asymmetric import decoder_score
from sgh.scores.asymmetric_index import AsymmetricIndex
from sgh.scores.score_set import ScoreSet
from sgh.search.fast_scan import FastScanIndex
from sgh.search.sgh_index import SGHIndex
from sgh.search.two_stage import default_shortlist

N = 800


@pytest.fixture(scope="module")
def data():
    """800 codes of 16 bits, 12 queries, and the scores of two linear decoders: the first
    shortlists (the encoder's place), the second rescores."""
    rng = np.random.default_rng(0)
    database = pack_bits((rng.normal(size=(N, 6)) @ rng.normal(size=(6, 16))) > 0)
    queries = rng.normal(size=(12, 6)).astype(np.float32)
    first = decoder_score(rng.normal(size=(16, 6)), rng.normal(size=6), "euclidean")
    second = decoder_score(rng.normal(size=(16, 6)), rng.normal(size=6), "euclidean")
    return database, queries, first, second


def _index(database, first, second, shortlist=None):
    index = SGHIndex(ScoreSet({"encoder": first, "decoder": second}, "encoder", "decoder"),
                     mode="two_stage")
    index.shortlist = shortlist
    index.add_codes(database)
    return index


def test_a_shortlist_of_the_whole_database_is_the_rescoring_scores_scan(data):
    database, queries, first, second = data
    index = _index(database, first, second, shortlist=N)
    full = AsymmetricIndex(second)
    full.add(database)
    D0, I0 = full.search(queries, 25)
    D, I = index.search(queries, 25)
    np.testing.assert_array_equal(I, I0)
    np.testing.assert_array_equal(D, D0.astype(np.float32))
    assert repr(index).endswith(f"mode='two_stage', shortlist by 'encoder', rescored by "
                                f"'decoder', shortlist={N}, model {index.fingerprint})")


def test_the_shortlist_is_the_encoder_scores_top_s_in_the_rescoring_order(data):
    database, queries, first, second = data
    index = _index(database, first, second, shortlist=40)
    index.refine_factor = 20  # 20 x 40 candidates: every item, the encoder's exact top 40
    encoder = AsymmetricIndex(first, database)
    candidates = encoder.search(queries, 40)[1]
    expected_D, expected_I = AsymmetricIndex(second, database).rescore(queries, candidates)
    D, I = index.search(queries, 10)
    np.testing.assert_array_equal(I, expected_I[:, :10])
    np.testing.assert_array_equal(D, expected_D[:, :10].astype(np.float32))
    # Not the rescoring score's own top 10 of every item: the shortlist bounds the search.
    assert (I != AsymmetricIndex(second, database).search(queries, 10)[1]).any()
    index.shortlist = 0
    with pytest.raises(ValueError, match="^shortlist=0 is impossible; accepted: an integer >= 1"):
        index.search(queries, 10)


def test_without_a_size_the_shortlist_is_sized_for_the_database(data):
    # max(5 k, 1% of the items): 1% of 10,000 is 100, which at k = 100 would rescore nothing
    # into the top k, so 5 k = 500; of 69,000 items (MNIST) 690; of 1,000,000 10,000.
    assert default_shortlist(100, 10_000) == 500
    assert default_shortlist(100, 69_000) == 690
    assert default_shortlist(100, 1_000_000) == 10_000
    assert default_shortlist(10, 801) == 50 and default_shortlist(1, 801) == 9  # 1% rounds up
    database, queries, first, second = data
    unsized = _index(database, first, second)
    for k in (3, 20):  # 800 items: 5 k = 15 and 100 (1% = 8)
        sized = _index(database, first, second, shortlist=5 * k)
        for a, b in zip(unsized.search(queries, k), sized.search(queries, k), strict=True):
            np.testing.assert_array_equal(a, b)
        shorter = _index(database, first, second, shortlist=k).search(queries, k)[1]
        assert (shorter != sized.search(queries, k)[1]).any()  # the size is what differs


def test_two_stages_by_one_score_say_so_once_when_the_search_is_made(data):
    database, queries, first, second = data
    copy = dataclasses.replace(first)  # another object, the same arrays: the same score
    for rescoring in (first, copy):
        index = _index(database, first, rescoring, shortlist=50)
        with pytest.warns(UserWarning, match=r"^two-stage search: the decoder score rescores "
                                             "the shortlist it made, so the results are that "
                                             "score's scan") as caught:
            index.search(queries, 5)
        assert len(caught) == 1 and caught[0].filename == __file__  # the caller's line
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # searching again does not say it again
            index.search(queries, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _index(database, first, second, shortlist=50).search(queries, 5)  # two scores


def test_both_stages_run_on_the_threads_faiss_is_given(data, monkeypatch):
    # A benchmark that times "one thread" must get one: the shortlist's scan and its rescoring
    # take faiss's thread count.
    database, queries, first, second = data
    asked = []
    search_of = FastScanIndex.search
    monkeypatch.setattr(FastScanIndex, "search", lambda self, queries, k, probes, threads: (
        asked.append(("shortlist", threads)), search_of(self, queries, k, probes, threads))[1])
    from sgh.search import sgh_index

    rescored_of = sgh_index.rescored
    monkeypatch.setattr(sgh_index, "rescored", lambda rescorer, queries, candidates, workers: (
        asked.append(("rescore", workers)), rescored_of(rescorer, queries, candidates,
                                                        workers))[1])
    index = _index(database, first, second, shortlist=50)
    previous = faiss.omp_get_max_threads()
    try:
        for threads in (1, 2):
            faiss.omp_set_num_threads(threads)
            index.search(queries, 5)
    finally:
        faiss.omp_set_num_threads(previous)
    assert asked == [("shortlist", 1), ("rescore", 1), ("shortlist", 2), ("rescore", 2)]
