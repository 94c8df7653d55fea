"""`SGHIndex(decoder="bytes", nlist=N)`: the byte decoder's codes in inverted lists. The lists
change which items are scanned, never an item's code or score: probing every list gives the flat
index's results bit for bit, probing fewer gives each returned item its flat score."""

# ruff: noqa: E741  (``D, I`` is faiss's name for search results)
import numpy as np
import pytest
from sklearn.datasets import load_digits
from threadpoolctl import threadpool_limits

from sgh import ITQ
from sgh.search.sgh_index import SGHIndex

NLIST = 8


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    """BLAS on one thread: the byte decoder's least-squares solves are small, and threads only
    fight each other on a busy machine of two cores."""
    with threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def indexes():
    """sklearn's digits: a flat byte-decoder index and one with NLIST lists, both trained on the
    same 1697 items (the same decoder) and holding them with ids ``7 * row``; 100 queries."""
    x = load_digits().data.astype(np.float32)
    order = np.random.default_rng(0).permutation(len(x))
    queries, base = x[order[:100]], x[order[100:]]
    hasher = ITQ(n_bits=16, random_state=0).fit(base)
    built = []
    for nlist in (None, NLIST):
        index = SGHIndex(hasher, decoder="bytes", nlist=nlist)
        index.train(base)
        index.add(base, ids=7 * np.arange(len(base)))
        built.append(index)
    return base, queries, *built


def test_the_lists_change_no_code_and_probing_all_of_them_is_the_flat_search(indexes):
    base, queries, flat, listed = indexes
    assert listed.byte_decoder.fingerprint == flat.byte_decoder.fingerprint
    np.testing.assert_array_equal(listed.encode(base), flat.encode(base))
    listed.nprobe = NLIST
    for got, want in zip(listed.search(queries, 20), flat.search(queries, 20), strict=True):
        np.testing.assert_array_equal(got, want)


def test_fewer_lists_scan_only_theirs_and_score_each_item_as_the_flat_index(indexes):
    base, queries, flat, listed = indexes
    listed.nprobe = 2
    D, I = listed.search(queries, 20)
    probed = listed._assign(listed._features(queries), 2)
    item_lists = listed._assign(listed._features(base), 1)[:, 0]
    _, everything = flat.search(queries, len(base))
    flat_D, _ = flat.search(queries, len(base))
    for q in range(len(queries)):
        found = I[q][I[q] >= 0]
        assert np.isin(item_lists[found // 7], probed[q]).all()
        # Each found item's distance is the flat index's, to the bit; sorted by (D, id).
        flat_of = dict(zip(everything[q], flat_D[q], strict=True))
        np.testing.assert_array_equal(D[q][: len(found)], [flat_of[i] for i in found])
        assert (np.diff(D[q][: len(found)]) >= 0).all()
        in_probed = np.isin(item_lists[everything[q] // 7], probed[q])
        np.testing.assert_array_equal(found, everything[q][in_probed][: len(found)])


def test_a_saved_index_with_lists_searches_identically(indexes, tmp_path):
    _, queries, _, listed = indexes
    listed.nprobe = 3
    loaded = SGHIndex.load(listed.save(tmp_path / "listed.sghindex"))
    assert (loaded.decoder, loaded.nlist, loaded.nprobe) == ("bytes", NLIST, 3)
    assert "decoder='bytes'" in repr(loaded) and f"nlist={NLIST}" in repr(loaded)
    for got, want in zip(loaded.search(queries, 10), listed.search(queries, 10), strict=True):
        np.testing.assert_array_equal(got, want)


def test_an_untrained_index_with_lists_refuses_items_and_queries(indexes):
    base, queries, flat, _ = indexes
    fresh = SGHIndex(flat.scores, decoder="bytes", nlist=NLIST)
    for call in (lambda: fresh.add(base[:5]), lambda: fresh.search(queries, 3)):
        with pytest.raises(ValueError, match="not fitted yet: call index.train"):
            call()
    with pytest.raises(ValueError, match=f"train: 5 points for nlist={NLIST} lists"):
        fresh.train(base[:5])
