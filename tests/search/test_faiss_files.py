"""`HammingIndex.write_faiss`: faiss binary-index files that faiss opens and searches as we do."""

from __future__ import annotations

import numpy as np
import pytest

from sgh.codes import pack_bits
from sgh.search import HammingIndex


def random_codes(rng: np.random.Generator, n: int, bits: int) -> np.ndarray:
    return pack_bits(rng.integers(0, 2, size=(n, bits)))


def tied_data(bits: int, seed: int):
    """300 database codes drawn from 20 (ties at every distance), 17 queries, shuffled ids with
    a repeated one."""
    rng = np.random.default_rng(seed)
    xb = random_codes(rng, 20, bits)[rng.integers(0, 20, 300)]
    ids = rng.choice(10**6, 300, replace=False).astype(np.int64)
    ids[5:9] = 42  # repeated ids: allowed, as in faiss's IndexBinaryIDMap
    return xb, random_codes(rng, 17, bits), ids


@pytest.mark.parametrize("bits", [8, 13, 32, 64, 100])
@pytest.mark.parametrize("with_ids", [False, True], ids=["flat", "idmap"])
def test_round_trip_through_faiss(tmp_path, bits, with_ids):
    faiss = pytest.importorskip("faiss")
    xb, xq, ids = tied_data(bits, bits)
    index = HammingIndex(bits)
    for part in (slice(0, 100), slice(100, 300)):
        index.add(xb[part], ids[part] if with_ids else None)
    path = tmp_path / "index.faissbin"
    index.write_faiss(path)
    theirs = faiss.read_index_binary(str(path))
    assert type(theirs).__name__ == ("IndexBinaryIDMap" if with_ids else "IndexBinaryFlat")
    assert theirs.d == 8 * xb.shape[1] and theirs.ntotal == 300
    for k in (1, 10, 300, 350):  # 350 > ntotal: INT32_MAX / -1 padding on both sides
        D, I = index.search(xq, k)
        faiss_D, faiss_I = theirs.search(xq, k)
        np.testing.assert_array_equal(D, faiss_D)
        np.testing.assert_array_equal(I, faiss_I)
    for radius in (0, bits // 3, bits):
        lims, D, I = index.range_search(xq, radius)
        faiss_lims, faiss_D, faiss_I = theirs.range_search(xq, radius + 1)  # faiss: strict
        np.testing.assert_array_equal(lims, faiss_lims)
        for i in range(len(xq)):
            hits = slice(lims[i], lims[i + 1])
            # faiss lists hits by position (then maps ids); ours by (distance, position).
            order = np.lexsort((np.arange(lims[i + 1] - lims[i]), faiss_D[hits]))
            np.testing.assert_array_equal(I[hits], faiss_I[hits][order])
            np.testing.assert_array_equal(D[hits], faiss_D[hits][order])
    assert [p.name for p in tmp_path.iterdir()] == ["index.faissbin"]  # no temporary left


def test_ties_follow_positions_not_external_ids(tmp_path):
    faiss = pytest.importorskip("faiss")
    # Four identical codes with ids 30, 10, 20, 10: all tie at distance 0; both faiss's
    # IndexBinaryIDMap and we list them by position, so I is 30, 10, 20, 10 (not 10, 10, 20, 30).
    xb = np.zeros((4, 1), np.uint8)
    index = HammingIndex(8)
    index.add(xb, ids=[30, 10, 20, 10])
    D, I = index.search(xb[:1], 5)
    assert D.tolist() == [[0, 0, 0, 0, 2**31 - 1]] and I.tolist() == [[30, 10, 20, 10, -1]]
    index.write_faiss(tmp_path / "ties.faissbin")
    faiss_D, faiss_I = faiss.read_index_binary(str(tmp_path / "ties.faissbin")).search(xb[:1], 5)
    assert faiss_D.tolist() == D.tolist() and faiss_I.tolist() == I.tolist()


def test_empty_index(tmp_path):
    faiss = pytest.importorskip("faiss")
    xq = random_codes(np.random.default_rng(1), 3, 12)
    for name, index in (("flat", HammingIndex(12)), ("idmap", HammingIndex(12))):
        if name == "idmap":
            index.add(xq[:0], ids=np.zeros(0, np.int64))
        index.write_faiss(tmp_path / name)
        theirs = faiss.read_index_binary(str(tmp_path / name))
        assert theirs.ntotal == 0 and theirs.d == 16
        for a, b in zip(index.search(xq, 2), theirs.search(xq, 2), strict=True):
            np.testing.assert_array_equal(a, b)
        assert type(theirs).__name__ == ("IndexBinaryIDMap" if name == "idmap"
                                         else "IndexBinaryFlat")
