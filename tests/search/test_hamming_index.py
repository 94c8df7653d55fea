"""HammingIndex: worked examples, brute force, and parity with faiss ``IndexBinaryFlat``."""

from __future__ import annotations

import numpy as np
import pytest

from sgh.codes import pack_bits
from sgh.search import MISSING_DISTANCE, HammingIndex
from tests.helpers import hamming_distances


def random_codes(rng: np.random.Generator, n: int, bits: int) -> np.ndarray:
    return pack_bits(rng.integers(0, 2, size=(n, bits)))


def brute_force_knn(xq, xb, k):
    """Full distance matrix, then each row ordered by (distance, id)."""
    distances = hamming_distances(xq, xb).astype(np.int64)
    order = np.stack([np.lexsort((np.arange(len(xb)), row))[:k] for row in distances])
    return np.take_along_axis(distances, order, axis=1), order


def test_worked_example():
    # 4-bit codes (packed into the high nibble): database 0000, 0011, 1111, 0001, 0011.
    xb = pack_bits([[0, 0, 0, 0], [0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 1], [0, 0, 1, 1]])
    xq = pack_bits([[0, 0, 1, 0]])
    # Distances to 0010: 1, 1, 3, 2, 1 -> (1, id 0), (1, id 1), (1, id 4), (2, id 3), (3, id 2).
    index = HammingIndex(4)
    index.add(xb)
    D, I = index.search(xq, 4)
    assert D.tolist() == [[1, 1, 1, 2]] and I.tolist() == [[0, 1, 4, 3]]
    assert D.dtype == np.int32 and I.dtype == np.int64
    # Inclusive radius 1 keeps the three codes at distance 1, in id order.
    lims, D, I = index.range_search(xq, 1)
    assert lims.tolist() == [0, 3] and D.tolist() == [1, 1, 1] and I.tolist() == [0, 1, 4]


@pytest.mark.parametrize("bits", [16, 64, 12])
@pytest.mark.parametrize("k", [1, 10, 100])
def test_ties_among_hundreds_go_by_position(bits, k):
    # 16 and 12 bits over 5,000 codes: every distance level is shared by hundreds of codes, so
    # the k-th distance cuts through a tie that only the (distance, position) order settles.
    rng = np.random.default_rng(bits * 1000 + k)
    xb, xq = random_codes(rng, 5000, bits), random_codes(rng, 50, bits)
    index = HammingIndex(bits)
    index.add(xb)
    D, I = index.search(xq, k)
    expected_D, expected_I = brute_force_knn(xq, xb, k)
    np.testing.assert_array_equal(D, expected_D)
    np.testing.assert_array_equal(I, expected_I)


@pytest.mark.parametrize("bits", [5, 12, 24, 64, 100, 300])
def test_search_matches_brute_force(bits):
    # 300 bits exercises multi-word codes and 16-bit distances.
    rng = np.random.default_rng(bits)
    xb, xq = random_codes(rng, 3000, bits), random_codes(rng, 20, bits)
    xb[100:110] = xb[7]  # exact duplicates: ties at every distance
    index = HammingIndex(bits)
    index.add(xb)
    for k in (1, 7, 64, 3000):
        D, I = index.search(xq, k)
        expected_D, expected_I = brute_force_knn(xq, xb, k)
        np.testing.assert_array_equal(D, expected_D)
        np.testing.assert_array_equal(I, expected_I)


@pytest.mark.parametrize("bits", [12, 64])
def test_range_search_matches_brute_force(bits):
    rng = np.random.default_rng(bits + 1)
    xb, xq = random_codes(rng, 2000, bits), random_codes(rng, 30, bits)
    xq[0] = xb[5]  # an exact match, so radius 0 finds something
    index = HammingIndex(bits)
    index.add(xb)
    distances = hamming_distances(xq, xb).astype(np.int64)
    for radius in (0, 2, bits // 3, bits):
        lims, D, I = index.range_search(xq, radius)
        assert lims.shape == (len(xq) + 1,) and lims[0] == 0 and lims[-1] == len(D) == len(I)
        for i, row in enumerate(distances):
            hits = np.flatnonzero(row <= radius)  # inclusive
            expected = hits[np.lexsort((hits, row[hits]))]
            np.testing.assert_array_equal(I[lims[i] : lims[i + 1]], expected)
            np.testing.assert_array_equal(D[lims[i] : lims[i + 1]], row[expected])
    lims, D, I = index.range_search(xq, 0)
    assert I[lims[0] : lims[1]].tolist() == [5] and D[lims[0] : lims[1]].tolist() == [0]


def test_k_larger_than_ntotal_pads_like_faiss():
    rng = np.random.default_rng(3)
    xb, xq = random_codes(rng, 5, 16), random_codes(rng, 4, 16)
    index = HammingIndex(16)
    index.add(xb)
    D, I = index.search(xq, 8)
    assert (D[:, 5:] == MISSING_DISTANCE).all() and (I[:, 5:] == -1).all()
    assert MISSING_DISTANCE == 2**31 - 1
    expected_D, expected_I = brute_force_knn(xq, xb, 5)
    np.testing.assert_array_equal(D[:, :5], expected_D)
    np.testing.assert_array_equal(I[:, :5], expected_I)


def test_empty_index_and_no_queries():
    index = HammingIndex(12)
    xq = random_codes(np.random.default_rng(4), 3, 12)
    D, I = index.search(xq, 2)
    assert (D == MISSING_DISTANCE).all() and (I == -1).all() and D.shape == (3, 2)
    lims, D, I = index.range_search(xq, 12)
    assert lims.tolist() == [0, 0, 0, 0] and D.size == I.size == 0
    assert index.ntotal == 0 and index.codes().shape == (0, 2)
    index.add(random_codes(np.random.default_rng(5), 10, 12))
    D, I = index.search(xq[:0], 3)
    assert D.shape == I.shape == (0, 3)


def test_add_in_chunks_equals_add_once_and_reset():
    rng = np.random.default_rng(6)
    xb, xq = random_codes(rng, 1000, 24), random_codes(rng, 10, 24)
    once, chunked = HammingIndex(24), HammingIndex(24)
    once.add(xb)
    for start in (0, 1, 400, 999):
        chunked.add(xb[start : {0: 1, 1: 400, 400: 999, 999: 1000}[start]])
    chunked.search(xq, 1)  # a search between adds must not freeze the database
    chunked.add(xb[:0])
    assert chunked.ntotal == once.ntotal == 1000
    for a, b in zip(once.search(xq, 20), chunked.search(xq, 20), strict=True):
        np.testing.assert_array_equal(a, b)
    chunked.add(xb[:3])
    assert chunked.ntotal == 1003 and chunked.search(xb[:1], 1)[1].tolist() == [[0]]
    chunked.reset()
    assert chunked.ntotal == 0


def test_save_load_round_trip(tmp_path):
    rng = np.random.default_rng(7)
    xb, xq = random_codes(rng, 500, 12), random_codes(rng, 5, 12)
    index = HammingIndex(12)
    index.add(xb[:200])
    index.add(xb[200:])
    path = tmp_path / "index.npz"
    index.save(path)
    assert [p.name for p in tmp_path.iterdir()] == ["index.npz"]  # no temp file left behind
    loaded = HammingIndex.load(path)
    assert loaded.bits == 12 and loaded.ntotal == 500
    np.testing.assert_array_equal(loaded.codes(), xb)
    for a, b in zip(index.search(xq, 10), loaded.search(xq, 10), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "arrays, match",
    [
        ({"codes": np.zeros((2, 2), np.uint8)}, "missing key 'bits'"),
        ({"bits": np.int64(12), "code": np.zeros((2, 2), np.uint8)}, "missing key 'codes'"),
        ({"bits": np.float64(12), "codes": np.zeros((2, 2), np.uint8)}, "key 'bits'"),
        ({"bits": np.int64(12), "codes": np.zeros((2, 2), np.float32)}, "key 'codes'.*uint8"),
        ({"bits": np.int64(12), "codes": np.zeros((2, 3), np.uint8)}, "key 'codes'.*3 bytes"),
    ],
)
def test_load_rejects_bad_keys(tmp_path, arrays, match):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match=f"bad.npz: {match}"):
        HammingIndex.load(path)


def test_load_rejects_corrupt_files(tmp_path):
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"this is not a zip archive")
    with pytest.raises(ValueError, match="garbage.npz"):
        HammingIndex.load(garbage)
    array = tmp_path / "array.npy"
    np.save(array, np.zeros((2, 2), np.uint8))
    with pytest.raises(ValueError, match="array.npy.*not an .npz"):
        HammingIndex.load(array)
    with pytest.raises(FileNotFoundError):
        HammingIndex.load(tmp_path / "missing.npz")


def test_invalid_arguments_quote_the_value():
    index = HammingIndex(12)
    index.add(random_codes(np.random.default_rng(8), 4, 12))
    xq = random_codes(np.random.default_rng(9), 2, 12)
    with pytest.raises(ValueError, match="k=0 is impossible; accepted: an integer >= 1"):
        index.search(xq, 0)
    with pytest.raises(ValueError, match="k=2.5 is impossible"):
        index.search(xq, 2.5)
    with pytest.raises(ValueError, match="radius=-1 is impossible; accepted: an integer >= 0"):
        index.range_search(xq, -1)
    with pytest.raises(ValueError, match="3 bytes per row.*bits=12 needs 2"):
        index.search(np.zeros((2, 3), np.uint8), 1)
    with pytest.raises(ValueError, match="non-zero padding"):
        index.add(np.full((1, 2), 255, np.uint8))
    with pytest.raises(ValueError, match="bits=0 is impossible; accepted: an integer >= 1"):
        HammingIndex(0)


def test_external_ids_worked_example():
    # The worked example's database with ids 50, 40, 30, 20, 10 in insertion order: the same
    # neighbours, in the same order (ties by position), reported by their ids.
    xb = pack_bits([[0, 0, 0, 0], [0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 1], [0, 0, 1, 1]])
    xq = pack_bits([[0, 0, 1, 0]])
    index = HammingIndex(4)
    index.add(xb[:2], ids=[50, 40])
    index.add(xb[2:], ids=np.array([30, 20, 10], np.uint32))
    assert index.has_ids and index.ids().tolist() == [50, 40, 30, 20, 10]
    D, I = index.search(xq, 6)
    # Positions (1, 0), (1, 1), (1, 4), (2, 3), (3, 2) -> ids 50, 40, 10, 20, 30, then padding.
    assert D.tolist() == [[1, 1, 1, 2, 3, MISSING_DISTANCE]]
    assert I.tolist() == [[50, 40, 10, 20, 30, -1]] and I.dtype == np.int64
    lims, D, I = index.range_search(xq, 1)
    assert lims.tolist() == [0, 3] and D.tolist() == [1, 1, 1] and I.tolist() == [50, 40, 10]
    np.testing.assert_array_equal(index.codes(), xb)  # codes() unchanged by ids
    index.add(xb[:1], ids=[40])  # a repeated id: both copies are found, at their positions
    assert index.search(xb[:1], 3)[1].tolist() == [[50, 40, 20]]
    assert index.search(pack_bits([[0, 0, 1, 1]]), 2)[1].tolist() == [[40, 10]]
    index.reset()
    assert not index.has_ids and index.ids().shape == (0,)
    index.add(xb)  # after reset, ids or none may be chosen afresh
    assert index.ids().tolist() == [0, 1, 2, 3, 4] and not index.has_ids


@pytest.mark.parametrize("bits", [12, 64])
def test_external_ids_map_positions(bits):
    # With ids, I is exactly the ids of the positions found without them, padding kept.
    rng = np.random.default_rng(bits + 11)
    xb, xq = random_codes(rng, 2000, bits), random_codes(rng, 25, bits)
    ids = rng.choice(10**9, 2000, replace=False).astype(np.int64) - 5 * 10**8  # negative ids too
    plain, mapped = HammingIndex(bits), HammingIndex(bits)
    plain.add(xb)
    mapped.add(xb[:700], ids[:700])
    mapped.add(xb[700:], ids[700:])
    table = np.append(ids, -1)
    for k in (1, 50, 2100):
        D, I = plain.search(xq, k)
        mapped_D, mapped_I = mapped.search(xq, k)
        np.testing.assert_array_equal(mapped_D, D)
        np.testing.assert_array_equal(mapped_I, table[I])
    lims, D, I = plain.range_search(xq, bits // 3)
    for got, want in zip(mapped.range_search(xq, bits // 3), (lims, D, ids[I]), strict=True):
        np.testing.assert_array_equal(got, want)


def test_ids_validation():
    xb = random_codes(np.random.default_rng(12), 3, 12)
    index = HammingIndex(12)
    for ids, match in [
        ([1, 2], r"ids must be a 1-D integer array, one id per code \(3\).*shape \(2,\)"),
        (np.zeros((3, 1), np.int64), r"shape \(3, 1\)"),
        ([1.0, 2.0, 3.0], "dtype float64"),
        (np.array([1, 2, 2**63], np.uint64), "ids must fit in int64, got 9223372036854775808"),
        ([4, -1, 5], "ids must not be -1 .* at position 1"),
    ]:
        with pytest.raises(ValueError, match=match):
            index.add(xb, ids=ids)
    assert index.ntotal == 0 and not index.has_ids  # nothing added by a refused add
    index.add(xb, ids=[7, 7, 8])
    with pytest.raises(ValueError, match="give ids for every add or for none: earlier adds had "
                                         "ids, this one has none"):
        index.add(xb)
    plain = HammingIndex(12)
    plain.add(xb)
    with pytest.raises(ValueError, match="earlier adds had none, this one has ids"):
        plain.add(xb, ids=[1, 2, 3])
    assert index.ntotal == plain.ntotal == 3


def test_save_load_keeps_ids_and_reads_files_without_them(tmp_path):
    rng = np.random.default_rng(13)
    xb, xq = random_codes(rng, 50, 12), random_codes(rng, 4, 12)
    index = HammingIndex(12)
    index.add(xb, ids=np.arange(50) * 3 + 1000)
    index.save(tmp_path / "ids.npz")
    with np.load(tmp_path / "ids.npz") as data:
        assert sorted(data.files) == ["bits", "codes", "ids"]
    loaded = HammingIndex.load(tmp_path / "ids.npz")
    assert loaded.has_ids
    np.testing.assert_array_equal(loaded.ids(), index.ids())
    for a, b in zip(index.search(xq, 7), loaded.search(xq, 7), strict=True):
        np.testing.assert_array_equal(a, b)
    # A file from before ids (and an index saved without them): no 'ids' key, ids = positions.
    np.savez(tmp_path / "old.npz", bits=np.int64(12), codes=xb)
    old = HammingIndex.load(tmp_path / "old.npz")
    assert not old.has_ids and old.ids().tolist() == list(range(50))
    old.save(tmp_path / "again.npz")
    with np.load(tmp_path / "again.npz") as data:
        assert sorted(data.files) == ["bits", "codes"]
    empty = HammingIndex(12)
    empty.add(xb[:0], ids=[])
    empty.save(tmp_path / "empty.npz")
    assert HammingIndex.load(tmp_path / "empty.npz").has_ids


@pytest.mark.parametrize(
    "ids, match",
    [(np.arange(3), r"key 'ids': ids must be .*one id per code \(2\)"),
     (np.array([0.5, 1.5]), "key 'ids': .*dtype float64"),
     (np.array([-1, 3]), "key 'ids': ids must not be -1")],
)
def test_load_rejects_bad_ids(tmp_path, ids, match):
    path = tmp_path / "bad.npz"
    np.savez(path, bits=np.int64(12), codes=np.zeros((2, 2), np.uint8), ids=ids)
    with pytest.raises(ValueError, match=f"bad.npz: {match}"):
        HammingIndex.load(path)
