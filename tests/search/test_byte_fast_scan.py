"""The byte decoder on faiss's fast-scan kernel (`SGHIndex(decoder="bytes")` with
``refine_factor`` r >= 1): 4-bit books fitted to the items' codes shortlist ``r * k`` codes that
the byte tables then rank exactly. Every code rescored is the exact scan; a decoder whose tables
are sums of half-byte tables has books that reproduce it; the setting is saved, and a file saved
before it existed keeps the exact scan it was searched by."""

import numpy as np
import pytest
from sklearn.datasets import load_digits
from threadpoolctl import threadpool_limits

from sgh import ITQ
from sgh.cli.index import parse_arguments
from sgh.errors import UserInputError
from sgh.scores.asymmetric_index import AsymmetricIndex
from sgh.scores.byte_decoder import ByteDecoder, half_bytes
from sgh.scores.posterior_modes import reconstruct
from sgh.search.fast_scan import FastScanIndex
from sgh.search.sgh_index import SGHIndex


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    with threadpool_limits(1):
        yield


def _half_byte_decoder(bits: int = 32, dim: int = 24, seed: int = 0) -> ByteDecoder:
    """Tables ``C_j[16 u + v] = P_j[u] + Q_j[v]``: exactly a sum of half-byte tables."""
    rng = np.random.default_rng(seed)
    halves = rng.standard_normal((2, bits // 8, 16, dim)).astype(np.float32)
    tables = (halves[0][:, :, None, :] + halves[1][:, None, :, :]).reshape(bits // 8, 256, dim)
    return ByteDecoder(bits, rng.standard_normal(dim).astype(np.float32), tables)


def _exact(decoder: ByteDecoder, codes: np.ndarray, queries: np.ndarray, k: int):
    index = AsymmetricIndex(decoder)
    index.add(codes)
    return index.search(queries, k, workers=1)


def test_books_of_a_decoder_of_half_byte_sums_reproduce_its_reconstructions():
    decoder = _half_byte_decoder()
    codes = np.random.default_rng(1).integers(0, 256, (4000, 4), dtype=np.uint8)
    books, norms = decoder.nibble_form(codes)
    assert books.shape == (8, 16, 24) and norms.shape == (4000,)
    wanted = reconstruct(codes, decoder.tables)
    got = reconstruct(half_bytes(codes), books)
    # Only the fit's small ridge stands between them.
    np.testing.assert_allclose(got, wanted, rtol=0, atol=0.01 * np.abs(wanted).max())
    np.testing.assert_allclose(norms, np.einsum("ij,ij->i", got, got), rtol=1e-5)


def test_every_code_rescored_is_the_exact_scan_and_fewer_keep_most_of_it():
    decoder = _half_byte_decoder(seed=2)
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 256, (3000, 4), dtype=np.uint8)
    queries = decoder.decode(codes[:40]) + rng.normal(0, 1, (40, 24)).astype(np.float32)
    D_exact, I_exact = _exact(decoder, codes, queries, 30)
    fast = FastScanIndex(decoder)
    fast.add(codes[:1000])
    fast.add(codes[1000:])  # the books are fitted to every code added
    fast.refine_factor = 100  # 3000 candidates: every code
    D, I = fast.search(queries, 30, workers=1)
    np.testing.assert_array_equal(I, I_exact)
    np.testing.assert_allclose(D, D_exact, rtol=1e-6, atol=1e-5)
    # One candidate per result: the books' ranking, 8-bit tables and all, finds most of it.
    fast.refine_factor = 1
    D1, I1 = fast.search(queries, 30, workers=2)
    assert np.mean([np.isin(I1[i], I_exact[i]).mean() for i in range(40)]) > 0.8
    assert (np.diff(D1, axis=1) >= 0).all()


@pytest.fixture(scope="module")
def digits():
    x = load_digits().data.astype(np.float32)
    order = np.random.default_rng(0).permutation(len(x))
    queries, base = x[order[:100]], x[order[100:]]
    hasher = ITQ(n_bits=16, random_state=0).fit(base)
    index = SGHIndex(hasher, decoder="bytes")
    index.train(base)
    index.add(base)
    return hasher, base, queries, index


def test_the_index_scans_exactly_by_default_and_on_the_fast_kernel_when_asked(digits):
    hasher, base, queries, index = digits
    assert index.refine_factor == 0
    D0, I0 = index.search(queries, 20)
    D_exact, I_exact = _exact(index.byte_decoder, index.encode(base), queries, 20)
    np.testing.assert_array_equal(I0, I_exact)
    index.refine_factor = 1000  # every code a candidate
    D, I = index.search(queries, 20)
    np.testing.assert_array_equal(I, I0)
    np.testing.assert_allclose(D, D0, rtol=1e-6)
    index.refine_factor = 2
    D2, I2 = index.search(queries, 20)
    shared = np.mean([np.isin(I2[i], I0[i]).mean() for i in range(len(queries))])
    assert 0.5 < shared <= 1.0
    index.refine_factor = 0
    model = SGHIndex(hasher)
    model.refine_factor = 0  # the model's scan has no exact form to fall back on
    model.add(base)
    with pytest.raises(ValueError, match="refine_factor=0 is impossible; accepted: an integer "
                                         ">= 1"):
        model.search(queries, 5)


def test_the_refine_factor_is_saved_and_an_older_file_keeps_its_exact_scan(digits, tmp_path):
    _, _, queries, index = digits
    index.refine_factor = 3
    saved = index.save(tmp_path / "index")
    index.refine_factor = 0
    loaded = SGHIndex.load(saved)
    assert loaded.refine_factor == 3
    index.refine_factor = 3
    for before, after in zip(index.search(queries, 10), loaded.search(queries, 10), strict=True):
        np.testing.assert_array_equal(before, after)
    index.refine_factor = 0
    # Format 2 saved refine_factor 1 beside an exact byte scan: it still searches exactly.
    with np.load(saved / "index.npz") as arrays:
        old = {**arrays, "format": np.str_("sgh-index 2"), "refine_factor": np.int64(1)}
    np.savez(saved / "index.npz", **old)
    older = SGHIndex.load(saved)
    assert older.refine_factor == 0
    for before, after in zip(index.search(queries, 10), older.search(queries, 10), strict=True):
        np.testing.assert_array_equal(before, after)


def test_sgh_index_search_takes_refine_factor_0_and_refuses_less():
    settings = parse_arguments(["search", "index=i", "input=q.npy", "out=r.npz",
                                "refine_factor=0"])[1]
    assert settings["refine_factor"] == 0
    with pytest.raises(UserInputError, match="refine_factor=-1 is impossible; accepted: an "
                                             "integer >= 0"):
        parse_arguments(["search", "index=i", "input=q.npy", "out=r.npz", "refine_factor=-1"])
