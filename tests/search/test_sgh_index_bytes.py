"""`SGHIndex(mode="bytes")`: a byte decoder fitted by `train`, items stored by its posterior
modes and searched by faiss's additive-quantizer scan: better recall than the model's own scan,
saved and loaded exactly, its codes.faiss searched by faiss alone, and every setting it cannot
serve refused."""

import dataclasses

import faiss
import numpy as np
import pytest
from sklearn.datasets import load_digits
from threadpoolctl import threadpool_limits

from sgh import ITQ
from sgh.data.similarity import unit_normalised
from sgh.errors import UserInputError
from sgh.search.sgh_index import SGHIndex

ID_OFFSET = 1000


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    """BLAS on one thread: the byte decoder's least-squares solves are small, and threads only
    fight each other (and take seconds) on a busy machine of two cores."""
    with threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def digits():
    """sklearn's digits: 1697 database (and training) items, 100 held-out queries, an ITQ of 16
    bits fitted on the database, and a byte-decoder index of it holding the database with ids
    ``ID_OFFSET + row``."""
    x = load_digits().data.astype(np.float32)
    order = np.random.default_rng(0).permutation(len(x))
    queries, base = x[order[:100]], x[order[100:]]
    hasher = ITQ(n_bits=16, random_state=0).fit(base)
    index = SGHIndex(hasher, mode="bytes")
    index.train(base)
    index.add(base, ids=np.arange(len(base)) + ID_OFFSET)
    return hasher, base, queries, index


def _recall_10_at_50(base: np.ndarray, queries: np.ndarray, I: np.ndarray) -> float:
    """Euclidean Recall10@50: the share of each query's 10 true nearest among the 50 returned."""
    distances = ((queries[:, None, :].astype(np.float64) - base[None]) ** 2).sum(-1)
    nearest = np.argsort(distances, axis=1, kind="stable")[:, :10]
    return float(np.mean([np.isin(nearest[i], I[i, :50]).mean() for i in range(len(queries))]))


def test_the_byte_decoder_finds_more_true_neighbours_than_the_models_scan(digits):
    hasher, base, queries, index = digits
    assert index.is_trained and index.ntotal == len(base)
    model = SGHIndex(hasher)
    model.add(base)
    scan = _recall_10_at_50(base, queries, model.search(queries, 50)[1])
    D, I = index.search(queries, 50)
    bytes_ = _recall_10_at_50(base, queries, I - ID_OFFSET)
    assert bytes_ > scan + 0.03, (bytes_, scan)
    assert (np.diff(D, axis=1) >= 0).all()


def test_items_are_stored_by_posterior_mode_and_ranked_by_distance_to_their_reconstruction(
        digits):
    hasher, base, queries, index = digits
    decoder = index.byte_decoder
    codes = index.encode(base)
    np.testing.assert_array_equal(codes, decoder.encode(base, hasher.encode(base)))
    assert (codes != hasher.encode(base)).any()  # the modes are not the encoder's codes

    # D is the squared distance to each item's reconstruction (float32 sums), and no item
    # left out is nearer than the last one returned; the ids are those given to add.
    D, I = index.search(queries, 20)
    reconstructions = decoder.decode(codes).astype(np.float64)
    exact = ((queries.astype(np.float64)[:, None, :] - reconstructions[None]) ** 2).sum(-1)
    tolerance = 1e-4 * exact.max()
    np.testing.assert_allclose(D, np.take_along_axis(exact, I - ID_OFFSET, axis=1), rtol=0,
                               atol=tolerance)
    assert (np.sort(exact, axis=1)[:, 19] >= D[:, -1] - tolerance).all()


def test_a_saved_index_searches_identically_and_faiss_opens_its_codes(digits, tmp_path):
    _, base, queries, index = digits
    saved = index.save(tmp_path / "index")
    with np.load(saved / "index.npz") as arrays:
        assert str(arrays["mode"]) == "bytes" and "decoder" not in arrays
        assert {"byte_decoder.bits", "byte_decoder.offset", "byte_decoder.tables"} <= set(arrays)
    loaded = SGHIndex.load(saved)
    assert loaded.mode == "bytes" and loaded.codes_by_bytes and repr(loaded) == repr(index)
    assert loaded.byte_decoder.fingerprint == index.byte_decoder.fingerprint
    D, I = index.search(queries, 25)
    for before, after in zip((D, I), loaded.search(queries, 25), strict=True):
        np.testing.assert_array_equal(before, after)

    # faiss alone (its norms rounded to one byte): the same items, distances within that
    # rounding, rows in the order items were added.
    opened = faiss.read_index(str(saved / "codes.faiss"))
    assert opened.ntotal == len(base)
    D0, rows = opened.search(queries, 25)
    step = (opened.aq.norm_max - opened.aq.norm_min) / 256
    np.testing.assert_allclose(D0, D, rtol=0, atol=2 * step + 1e-4 * D.max())
    shared = [len(set(a) & set(b)) / 25 for a, b in zip(rows + ID_OFFSET, I, strict=True)]
    assert np.mean(shared) > 0.9
    index.save(saved)  # an index saved before is replaced


def test_an_index_saved_before_bytes_was_a_mode_loads_as_mode_bytes(digits, tmp_path):
    # Saved before: decoder="bytes" beside mode "scan" (the only mode such an index had).
    _, _, queries, index = digits
    saved = index.save(tmp_path / "index")
    with np.load(saved / "index.npz") as arrays:
        old = {**arrays, "mode": np.str_("scan"), "decoder": np.str_("bytes")}
    np.savez(saved / "index.npz", **old)
    loaded = SGHIndex.load(saved)
    assert loaded.mode == "bytes" and loaded.codes_by_bytes and repr(loaded) == repr(index)
    for before, after in zip(index.search(queries, 25), loaded.search(queries, 25), strict=True):
        np.testing.assert_array_equal(before, after)
    # Saved again, it is in today's format.
    with np.load(loaded.save(tmp_path / "again") / "index.npz") as arrays:
        assert str(arrays["mode"]) == "bytes" and "decoder" not in arrays


def test_a_saved_index_with_a_broken_decoder_is_refused_naming_the_key(digits, tmp_path):
    _, _, _, index = digits
    saved = index.save(tmp_path / "index")
    with np.load(saved / "index.npz") as arrays:
        good = dict(arrays)
    np.savez(saved / "index.npz", **{k: v for k, v in good.items()
                                     if k != "byte_decoder.tables"})
    with pytest.raises(UserInputError, match="index.npz: .*missing key 'byte_decoder.tables'"):
        SGHIndex.load(saved)
    tables = good["byte_decoder.tables"].copy()
    tables[0, 3, 5] = np.nan
    np.savez(saved / "index.npz", **{**good, "byte_decoder.tables": tables})
    with pytest.raises(UserInputError, match="index.npz: .*NaN"):
        SGHIndex.load(saved)


def test_settings_it_cannot_serve_are_refused_naming_them(digits):
    hasher, base, queries, index = digits
    with pytest.raises(ValueError, match="^mode='nonsense' is not known; accepted: hamming, "
                                         "scan, two_stage, bytes$"):
        SGHIndex(hasher, mode="nonsense")
    # Its codes are the byte decoder's: no other mode searches them, and no other index's
    # codes (the encoder's signs) are searched by mode bytes.
    for mode in ("hamming", "scan", "two_stage"):
        with pytest.raises(ValueError, match=f"^mode='{mode}': the index's codes are the byte "
                                             "decoder's, .*; build another index with "
                                             f"mode='{mode}'$"):
            index.mode = mode
    assert index.mode == "bytes"
    for mode in ("scan", "two_stage", "hamming"):
        other = SGHIndex(hasher, mode=mode)
        with pytest.raises(ValueError, match="^mode='bytes': the index's codes are the "
                                             "encoder's signs, .*; build another index with "
                                             "mode='bytes'$"):
            other.mode = "bytes"
        assert other.mode == mode and not other.codes_by_bytes
    with pytest.raises(ValueError, match="add_codes: an index of mode 'bytes'"):
        index.add_codes(hasher.encode(base[:5]))
    # New tables would leave the items' codes another decoder's modes.
    fitted = index.byte_decoder
    with pytest.raises(ValueError, match=f"train: the index holds {len(base)} items"):
        index.train(base)
    assert index.byte_decoder is fitted and index.ntotal == len(base)

    untrained = SGHIndex(hasher, mode="bytes")
    assert not untrained.is_trained
    for call in (lambda: untrained.add(base), lambda: untrained.search(queries, 5),
                 lambda: untrained.encode(base)):
        with pytest.raises(ValueError, match=r"mode 'bytes'.*call index.train\(x\)"):
            call()
    assert untrained.ntotal == 0
    # An index with lists encodes before its lists are learned, as it always did.
    np.testing.assert_array_equal(SGHIndex(hasher, nlist=4).encode(base[:9]),
                                  hasher.encode(base[:9]))


def test_no_queries_or_no_items_give_empty_results_in_every_layout(digits):
    hasher, base, queries, index = digits
    listed = SGHIndex(hasher, mode="bytes", nlist=4)
    listed.train(base)
    listed.add(base[:200])
    for searched in (index, listed):
        D, I = searched.search(queries[:0], 5)
        assert D.shape == I.shape == (0, 5) and D.dtype == np.float32 and I.dtype == np.int64
    # ... and an index whose items are all removed, padding (as faiss).
    listed.remove_ids(np.arange(200))
    D, I = listed.search(queries, 5)
    assert (I == -1).all() and np.isinf(D).all()


def test_repr_padding_and_removal(digits, tmp_path):
    _, base, queries, index = digits
    assert repr(index) == (f"SGHIndex(16 bits, {len(base):,} items, 10 bytes each (code 2 + "
                           "id 8), mode='bytes', encoding='local_search', model "
                           f"{index.fingerprint})")
    small = SGHIndex.load(index.save(tmp_path / "index"))  # a copy, trained
    kept = ID_OFFSET + np.array([7, 3, 11, 5, 9])
    assert small.remove_ids(np.setdiff1d(ID_OFFSET + np.arange(len(base)), kept)) \
        == len(base) - 5
    assert repr(small).startswith("SGHIndex(16 bits, 5 items, 10 bytes each (code 2 + id 8), "
                                  "mode='bytes', encoding='local_search'")
    # Fewer items than k: padded as the model's scan pads, D = inf and I = -1.
    D, I = small.search(queries[:4], 8)
    assert (np.sort(I[:, :5], axis=1) == np.sort(kept)).all()
    assert (I[:, 5:] == -1).all() and np.isposinf(D[:, 5:]).all()
    assert np.isfinite(D[:, :5]).all()
    assert small.remove_ids(kept[:2]) == 2 and small.ntotal == 3
    assert set(small.search(queries[:4], 3)[1].ravel()) == set(kept[2:])
    # New items get ids after the largest ever held (a removed id is never handed out again:
    # a caller may still hold it), and are found.
    small.add(base[:2])
    assert small.search(base[:1], 1)[1][0, 0] == ID_OFFSET + len(base)


def test_angular_features_are_searched_by_their_direction(tmp_path):
    x = load_digits().data.astype(np.float32)[:800] + 0.5
    unit = unit_normalised(x, "digits")
    hasher = ITQ(n_bits=8, random_state=0).fit(unit)  # one byte: a quick fit
    scores = dataclasses.replace(SGHIndex(hasher).scores, similarity="angular")
    index = SGHIndex(scores, mode="bytes")
    index.train(x[100:])
    index.add(x[100:])
    # Scaled features are the same directions: the same codes, the same results.
    np.testing.assert_array_equal(index.encode(4 * x[100:]), index.encode(x[100:]))
    D, I = index.search(x[:100], 10)
    for scaled in index.search(2 * x[:100], 10), index.search(0.5 * x[:100], 10):
        np.testing.assert_array_equal(scaled[1], I)
        np.testing.assert_array_equal(scaled[0], D)
    # The byte decoder saw unit vectors: its distances are those of unit queries.
    assert np.abs(np.linalg.norm(index.byte_decoder.offset)) <= 1.0
    codes = index.encode(x[100:])
    exact = ((unit[:100, None, :].astype(np.float64)
              - index.byte_decoder.decode(codes)[None].astype(np.float64)) ** 2).sum(-1)
    np.testing.assert_allclose(D, np.take_along_axis(exact, I, axis=1), rtol=0, atol=1e-4)
    assert D.max() < 1.0  # squared distances between (near) unit vectors of one dataset
    assert _recall_10_at_50(unit[100:], unit[:100], index.search(x[:100], 50)[1]) > 0.5
    # 8 bits: the tables live in 16 of the 64 dimensions (a basis), saved and read back.
    assert index.byte_decoder.basis.shape == (64, 16)
    loaded = SGHIndex.load(index.save(tmp_path / "angular"))
    np.testing.assert_array_equal(loaded.byte_decoder.basis, index.byte_decoder.basis)
    for before, after in zip((D, I), loaded.search(x[:100], 10), strict=True):
        np.testing.assert_array_equal(before, after)
