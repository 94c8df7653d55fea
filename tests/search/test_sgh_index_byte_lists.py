"""`SGHIndex(mode="bytes", nlist=N)`: the byte decoder's codes of residuals in inverted lists.
Each item is coded as its residual to its list's centroid and ranked by its squared distance to
``centroid + reconstruction``; an item's distance does not depend on which other lists are
probed; faiss opens the saved codes as its IVF additive quantizer."""

import faiss
import numpy as np
import pytest
from sklearn.datasets import load_digits
from threadpoolctl import threadpool_limits

from sgh import ITQ
from sgh.errors import UserInputError
from sgh.scores.top_k import RESERVOIR_FROM_K
from sgh.search import inverted_table_scan
from sgh.search.index_features import served_features
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
    """sklearn's digits: a flat byte-decoder index and one with NLIST lists (its decoder fitted
    on the residuals), both trained on the same 1697 items and holding them with ids
    ``7 * row``; 100 queries."""
    x = load_digits().data.astype(np.float32)
    order = np.random.default_rng(0).permutation(len(x))
    queries, base = x[order[:100]], x[order[100:]]
    hasher = ITQ(n_bits=16, random_state=0).fit(base)
    built = []
    for nlist in (None, NLIST):
        index = SGHIndex(hasher, mode="bytes", nlist=nlist)
        index.train(base)
        index.add(base, ids=7 * np.arange(len(base)))
        built.append(index)
    return base, queries, *built


def _reconstructions(listed):
    """Each database item's reconstruction, ``centroid + x^(h)``, in row order."""
    lists = listed._items.lists[np.argsort(listed._items.ids)]
    codes = listed._items.codes[np.argsort(listed._items.ids)]
    return listed._centroids[lists] + listed.byte_decoder.decode(codes)


def test_items_are_coded_as_residuals_and_ranked_by_distance_to_their_reconstruction(indexes):
    base, queries, flat, listed = indexes
    lists = listed._coarse(served_features(base, listed.scores), 1)[:, 0]
    np.testing.assert_array_equal(
        listed.encode(base),
        listed.byte_decoder.encode(base - listed._centroids[lists], flat._codes_of(base)))
    listed.nprobe = NLIST
    D, I = listed.search(queries, 20)
    exact = ((queries[:, None, :].astype(np.float64)
              - _reconstructions(listed)[None].astype(np.float64)) ** 2).sum(-1)
    # Each item's cross terms come from its code (none held beside it, in one byte or
    # otherwise): D is the distance, to float32 rounding.
    tolerance = 1e-5 * exact.max()
    np.testing.assert_allclose(D, np.take_along_axis(exact, I // 7, axis=1), rtol=0,
                               atol=tolerance)
    assert (np.sort(exact, axis=1)[:, 19] >= D[:, -1] - tolerance).all()
    # Codes of residuals find more true neighbours than the flat decoder's codes of the
    # vectors, all lists probed (the lists' centroids are extra, free information).
    truth = np.argsort(((queries[:, None] - base[None]) ** 2).sum(-1), axis=1)[:, :10]
    found = [np.isin(truth[q], I[q] // 7).mean() for q in range(len(queries))]
    flat_found = [np.isin(truth[q], flat.search(queries, 20)[1][q] // 7).mean()
                  for q in range(len(queries))]
    assert np.mean(found) > np.mean(flat_found)


def test_fewer_lists_scan_only_theirs_and_give_each_item_its_distance_to_the_bit(indexes):
    base, queries, _, listed = indexes
    listed.nprobe = NLIST
    all_D, everything = listed.search(queries, len(base))
    listed.nprobe = 2
    D, I = listed.search(queries, 20)
    probed = listed._coarse(served_features(queries, listed.scores), 2)
    item_lists = listed._coarse(served_features(base, listed.scores), 1)[:, 0]
    for q in range(len(queries)):
        found = I[q][I[q] >= 0]
        assert np.isin(item_lists[found // 7], probed[q]).all()
        distance_of = dict(zip(everything[q], all_D[q], strict=True))
        np.testing.assert_array_equal(D[q][: len(found)], [distance_of[i] for i in found])
        in_probed = np.isin(item_lists[everything[q] // 7], probed[q])
        np.testing.assert_array_equal(found, everything[q][in_probed][: len(found)])


@pytest.mark.parametrize("k", [10, RESERVOIR_FROM_K, 60])  # kept by a heap, by a reservoir
def test_both_scans_of_the_lists_give_the_same_results_to_the_bit(indexes, k, monkeypatch):
    # Forced each way: the one-byte bounds with the exact terms computed only where they could
    # reach the top k, and every probed item's terms computed once for all the call's queries.
    _, queries, _, listed = indexes
    listed.nprobe = 3
    results = []
    for bounded in (True, False):
        monkeypatch.setattr(inverted_table_scan, "bounded_scan_is_cheaper",
                            lambda *_, bounded=bounded: bounded)
        results.append(listed.search(queries, k))
    (bounded_D, bounded_I), (plain_D, plain_I) = results
    np.testing.assert_array_equal(bounded_I, plain_I)
    np.testing.assert_array_equal(bounded_D, plain_D)


@pytest.mark.parametrize("k", [10, RESERVOIR_FROM_K, 60])
def test_a_query_alone_gets_the_results_it_gets_among_many(indexes, k):
    # Alone, a query's lists share their items' terms with no other query's: the scan may read
    # the one-byte bounds where among many it computes each term once.
    _, queries, _, listed = indexes
    listed.nprobe = 3
    D, I = listed.search(queries, k)
    for q in range(0, len(queries), 9):
        D1, I1 = listed.search(queries[q : q + 1], k)
        np.testing.assert_array_equal(I1[0], I[q])
        np.testing.assert_array_equal(D1[0], D[q])


def test_a_saved_index_with_lists_searches_identically(indexes, tmp_path):
    _, queries, _, listed = indexes
    listed.nprobe = 3
    loaded = SGHIndex.load(listed.save(tmp_path / "listed.sghindex"))
    assert (loaded.mode, loaded.nlist, loaded.nprobe) == ("bytes", NLIST, 3)
    assert "mode='bytes'" in repr(loaded) and f"nlist={NLIST}" in repr(loaded)
    D, I = listed.search(queries, 10)
    for got, want in zip(loaded.search(queries, 10), (D, I), strict=True):
        np.testing.assert_array_equal(got, want)
    # faiss opens the codes as its IVF additive quantizer over the same centroids and tables
    # (its norms rounded to one byte): the same items, distances within that rounding.
    opened = faiss.read_index(str(tmp_path / "listed.sghindex" / "codes.faiss"))
    assert isinstance(opened, faiss.IndexIVFLocalSearchQuantizer) and opened.nlist == NLIST
    opened.nprobe = 3
    D0, rows = opened.search(queries, 10)
    step = (opened.aq.norm_max - opened.aq.norm_min) / 256
    np.testing.assert_allclose(D0, D, rtol=0, atol=2 * step + 1e-4 * D.max())
    # faiss's ids are the rows of the saved index (its items in list order), ours their ids.
    ids = np.where(rows >= 0, loaded._items.ids[np.maximum(rows, 0)], -1)
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, I, strict=True)]) > 0.9


def test_the_lists_scan_the_index_codes_where_they_are_and_items_added_later_join_them(indexes):
    # The index holds its items in list order, so the scan reads its codes without a copy;
    # items added after a search join their lists, found as if added with the others.
    base, queries, _, listed = indexes
    listed.nprobe = 3
    D, I = listed.search(queries, 10)
    assert np.shares_memory(listed._engine("bytes_lists").codes, listed._items.codes)
    assert (np.diff(listed._items.lists) >= 0).all()
    halves = SGHIndex(listed.scores, mode="bytes", nlist=NLIST)
    halves.byte_decoder, halves._centroids = listed.byte_decoder, listed._centroids
    halves.nprobe = 3
    half = len(base) // 2
    halves.add(base[:half], ids=7 * np.arange(half))
    halves.search(queries[:1], 1)
    halves.add(base[half:], ids=7 * np.arange(half, len(base)))
    for got, want in zip(halves.search(queries, 10), (D, I), strict=True):
        np.testing.assert_array_equal(got, want)


def test_an_untrained_index_with_lists_refuses_items_and_queries(indexes):
    base, queries, flat, _ = indexes
    fresh = SGHIndex(flat.scores, mode="bytes", nlist=NLIST)
    for call in (lambda: fresh.add(base[:5]), lambda: fresh.search(queries, 3)):
        with pytest.raises(ValueError, match="not fitted yet: call index.train"):
            call()
    with pytest.raises(ValueError, match=f"train: 5 points for nlist={NLIST} lists"):
        fresh.train(base[:5])


def test_an_index_saved_before_residual_codes_is_refused_in_one_line(indexes, tmp_path):
    # Format 1's byte-decoder lists held codes of the vectors: read as residuals they would be
    # scored wrongly, silently; they are refused instead.
    _, _, _, listed = indexes
    saved = listed.save(tmp_path / "old.sghindex")
    with np.load(saved / "index.npz") as arrays:
        old = {**arrays, "format": np.str_("sgh-index 1")}
    np.savez(saved / "index.npz", **old)
    with pytest.raises(UserInputError, match="key 'format' is not 'sgh-index 2'.*build it again"):
        SGHIndex.load(saved)
