"""`sgh.scores.permute_scan`: the scan filtered by 8-bit bounds gives the scalar scan's top k to
the bit (scores and ids, ties by id), whatever the tables' and terms' ranges; a query it cannot
bound (tables not finite) is left to the scalar scan. On a processor without AVX-512 VBMI the
kernel cannot compile and these tests skip; `AsymmetricIndex` then runs the scalar scan alone."""

import numpy as np
import pytest

from sgh.scores import permute_scan
from sgh.scores.asymmetric_index import AsymmetricIndex
from sgh.scores.byte_decoder import ByteDecoder
from sgh.scores.lookup_kernels import TILE_ITEMS, scan_top_k
from sgh.scores.permute_scan import permute_scan_top_k
from sgh.scores.top_k import sort_heaps

pytestmark = pytest.mark.skipif(not permute_scan.AVAILABLE,
                                reason="the processor has no AVX-512 VBMI byte permute")

NO_PAIRS = np.zeros((0, 256 * 256), np.float32)


def _scalar(tables, codes, norms, pair_tables, k):
    D = np.full((len(tables), k), np.inf, np.float32)
    I = np.full((len(tables), k), -1, np.int64)
    scan_top_k(tables, codes, norms, pair_tables, 0, D, I)
    sort_heaps(D, I)
    return D, I


def _permuted(tables, codes, norms, pair_tables, k):
    D = np.full((len(tables), k), np.inf, np.float32)
    I = np.full((len(tables), k), -1, np.int64)
    unbounded = np.zeros(len(tables), np.bool_)
    permute_scan_top_k(tables, codes, norms, pair_tables, D, I, unbounded)
    return D, I, unbounded


def _assert_same_bits(got, want):
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8))


def _case(rng, n, code_bytes, held_norms, nq=9, spread=1.0):
    tables = (rng.normal(size=(nq, code_bytes, 256)) * spread).astype(np.float32)
    codes = rng.integers(0, 256, (n, code_bytes), dtype=np.uint8)
    if held_norms:
        return tables, codes, rng.normal(size=n).astype(np.float32) * 3, NO_PAIRS
    pairs = code_bytes * (code_bytes - 1) // 2
    return tables, codes, np.zeros(0, np.float32), \
        rng.normal(size=(pairs, 256 * 256)).astype(np.float32)


@pytest.mark.parametrize("code_bytes", [1, 2, 4, 8])
@pytest.mark.parametrize("n", [1, 63, 64, 65, 1000, TILE_ITEMS + 100, 2 * TILE_ITEMS + 7])
@pytest.mark.parametrize("held_norms", [True, False])
def test_the_same_top_k_as_the_scalar_scan_to_the_bit(code_bytes, n, held_norms):
    rng = np.random.default_rng(n * 10 + code_bytes)
    tables, codes, norms, pair_tables = _case(rng, n, code_bytes, held_norms)
    for k in sorted({1, min(7, n), min(100, n)}):
        D, I, unbounded = _permuted(tables, codes, norms, pair_tables, k)
        assert not unbounded.any()
        _assert_same_bits((D, I), _scalar(tables, codes, norms, pair_tables, k))


def test_ties_go_to_the_smaller_id_as_in_the_heap():
    # Few distinct codes and integer tables: most scores are equal to others.
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 3, (3 * TILE_ITEMS // 2, 4), dtype=np.uint8)
    tables = rng.integers(-2, 3, (6, 4, 256)).astype(np.float32)
    norms = rng.integers(0, 2, len(codes)).astype(np.float32)
    D, I, _ = _permuted(tables, codes, norms, NO_PAIRS, 100)
    want = _scalar(tables, codes, norms, NO_PAIRS, 100)
    _assert_same_bits((D, I), want)
    assert (np.diff(D, axis=1) == 0).any()  # ties were there to break


@pytest.mark.parametrize("outliers", ["tables", "terms", "both"])
def test_entries_far_beyond_the_rest_are_clipped_and_the_results_unchanged(outliers):
    # A few huge table entries or item terms stretch the ranges that the 255 steps cover;
    # clipped entries keep bounding from below, so nothing the top k needs is filtered out.
    rng = np.random.default_rng(2)
    tables, codes, norms, _ = _case(rng, TILE_ITEMS + 5000, 4, True)
    if outliers in ("tables", "both"):
        tables[:, :, :3] = 1e6
        tables[:, 1, 7] = -50.0
    if outliers in ("terms", "both"):
        norms[::97] = 1e7
        norms[5] = -1e3
    for k in (1, 50):
        D, I, _ = _permuted(tables, codes, norms, NO_PAIRS, k)
        _assert_same_bits((D, I), _scalar(tables, codes, norms, NO_PAIRS, k))


def test_an_item_whose_term_is_clipped_still_ranks_first():
    # In the second tile the levels are as fine as the queries' steps, so this item's large
    # term is clipped to the top level; its table entry, far below the rest, still makes it
    # every query's best, and the clipped level must still bound it from below.
    rng = np.random.default_rng(6)
    tables, codes, norms, _ = _case(rng, TILE_ITEMS + 5000, 4, True)
    codes[codes[:, 0] == 7, 0] = 8
    best = TILE_ITEMS + 123
    codes[best, 0], norms[best] = 7, 1000.0
    tables[:, 0, 7] = -2000.0
    for k in (1, 30):
        D, I, _ = _permuted(tables, codes, norms, NO_PAIRS, k)
        assert (I[:, 0] == best).all()
        _assert_same_bits((D, I), _scalar(tables, codes, norms, NO_PAIRS, k))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_sums_that_overflow_are_kept_as_the_heap_keeps_them():
    # Finite tables whose sums overflow float32: +inf scores, which the heap never keeps, and
    # -inf scores, which it keeps first (a sum of finite entries is never NaN).
    rng = np.random.default_rng(5)
    tables, codes, norms, _ = _case(rng, 3000, 4, True, nq=5)
    tables[:, 0, 1], tables[:, 1, 1] = 3e38, 3e38
    tables[:, 2, 2], tables[:, 3, 2] = -3e38, -3e38
    codes[::7, 0], codes[::11, 1], codes[::5, 2], codes[::13, 3] = 1, 1, 2, 2
    scores = norms + sum(tables[:, j, codes[:, j]] for j in range(4))
    assert np.isposinf(scores).any() and np.isneginf(scores).any()
    for k in (1, 40):
        D, I, unbounded = _permuted(tables, codes, norms, NO_PAIRS, k)
        assert not unbounded.any()
        _assert_same_bits((D, I), _scalar(tables, codes, norms, NO_PAIRS, k))


def test_tables_that_are_not_finite_are_left_to_the_scalar_scan():
    rng = np.random.default_rng(3)
    tables, codes, norms, pair_tables = _case(rng, 5000, 4, True, nq=4)
    tables[1, 2, 9] = np.nan
    tables[3, 0, 0] = np.inf
    D, I, unbounded = _permuted(tables, codes, norms, pair_tables, 10)
    np.testing.assert_array_equal(unbounded, [False, True, False, True])
    assert np.isinf(D[[1, 3]]).all() and (I[[1, 3]] == -1).all()  # untouched
    want = _scalar(tables, codes, norms, pair_tables, 10)
    _assert_same_bits((D[[0, 2]], I[[0, 2]]), (want[0][[0, 2]], want[1][[0, 2]]))

    norms[17] = np.nan  # an item term not finite: no bound holds for any query
    _, _, unbounded = _permuted(tables, codes, norms, pair_tables, 10)
    assert unbounded.all()


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # the infinite query's tables
@pytest.mark.parametrize("poison", [None, "query", "item"])
def test_the_index_search_gives_the_scalar_scans_results(monkeypatch, poison):
    # Through AsymmetricIndex: a byte decoder's pair tables, enough queries for the per-tile
    # scan, on one and two threads; queries or items the bound cannot take go to the scalar scan.
    rng = np.random.default_rng(4)
    decoder = ByteDecoder(32, rng.normal(size=16).astype(np.float32),
                          rng.normal(size=(4, 256, 16)).astype(np.float32))
    codes = rng.integers(0, 256, (20000, 4), dtype=np.uint8)
    queries = decoder.decode(codes[:40]) + rng.normal(0, 1, (40, 16)).astype(np.float32)
    if poison == "query":
        queries[3, 0] = np.inf
    index = AsymmetricIndex(decoder, codes)
    if poison == "item":
        index._pair_tables = index._pair_tables.copy()
        index._pair_tables[0, 256 * int(codes[11, 0]) + int(codes[11, 1])] = np.nan
    for workers in (1, 2):
        monkeypatch.setattr(permute_scan, "AVAILABLE", False)
        want = index.search(queries, 30, workers=workers)
        monkeypatch.setattr(permute_scan, "AVAILABLE", True)
        _assert_same_bits(index.search(queries, 30, workers=workers), want)
