"""`ByteFastScan`: the byte decoder's first stage on faiss's fast-scan kernel, then the exact
byte tables. With the refine covering every item the results are the exact scan's, bit for bit;
the first stage's distances are those of its quantised reconstructions; its quantizer is the
same on any number of threads; `SGHIndex` scans exactly unless given a refine factor."""

import faiss
import numpy as np
import pytest
from sklearn.datasets import load_digits

from sgh import ITQ
from sgh.search.asymmetric_index import AsymmetricIndex
from sgh.search.byte_decoder import ByteDecoder
from sgh.search.byte_fast_scan import ByteFastScan, coordinates
from sgh.search.sgh_index import SGHIndex


def _decoder_and_codes(bits: int, basis: bool, seed: int = 0, n: int = 2000, dim: int = 24):
    """A decoder whose tables are sums of a template per bit plus a little noise (a decoder as
    fitted ones are: nearly additive in the bits), its codes, and queries near reconstructions."""
    rng = np.random.default_rng(seed)
    n_bytes, r = -(-bits // 8), 12 if basis else dim
    values = np.arange(256)
    tables = np.zeros((n_bytes, 256, r), np.float32)
    for j in range(n_bytes):
        bits_of = (values[:, None] >> (7 - np.arange(8))) & 1
        tables[j] = bits_of @ rng.standard_normal((8, r)) + 0.3 * rng.standard_normal((256, r))
    codes = rng.integers(0, 256, (n, n_bytes)).astype(np.uint8)
    if bits % 8:
        codes[:, -1] &= np.uint8(256 - (1 << (8 - bits % 8)))
    rotation = np.linalg.qr(rng.standard_normal((dim, r)))[0].astype(np.float32) if basis else None
    decoder = ByteDecoder(bits, rng.standard_normal(dim).astype(np.float32), tables, rotation)
    queries = decoder.decode(codes[:30]) + rng.standard_normal((30, dim)).astype(np.float32)
    return decoder, codes, queries


@pytest.mark.parametrize("bits,basis", [(16, False), (20, True), (32, True), (64, False)])
def test_a_refine_over_every_item_gives_the_exact_scan_bit_for_bit(bits, basis):
    decoder, codes, queries = _decoder_and_codes(bits, basis)
    exact = AsymmetricIndex(decoder)
    exact.add(codes)
    D0, I0 = exact.search(queries, 20, workers=1)
    engine = ByteFastScan(decoder, codes)
    engine.refine_factor = len(codes)
    D, I = engine.search(queries, 20)
    np.testing.assert_array_equal(I, I0)
    np.testing.assert_array_equal(D, D0)
    # Fewer candidates: each result is still scored exactly, and most of the top 20 are found.
    engine.refine_factor = 8
    D, I = engine.search(queries, 20)
    np.testing.assert_array_equal(D, exact.candidate_scores(queries, I))
    assert np.mean([np.isin(row, row0).mean() for row, row0 in zip(I, I0, strict=True)]) > 0.8


def _quantised_reconstructions(engine: ByteFastScan) -> np.ndarray:
    """Each item's reconstruction as the first stage sees it, ``t + U R z~``, float64."""
    decoder = engine.decoder
    rotated = coordinates(decoder.tables, engine.codes) @ engine.rotation
    quantised = engine.quantizer.decode(engine.quantizer.compute_codes(rotated))
    within = quantised.astype(np.float64) @ engine.rotation.T
    return decoder.offset + (within if decoder.basis is None else within @ decoder.basis.T)


@pytest.mark.parametrize("basis", [False, True])
def test_the_first_stage_ranks_by_distance_to_the_quantised_reconstructions(basis):
    decoder, codes, queries = _decoder_and_codes(32, basis)
    engine = ByteFastScan(decoder, codes)
    D, I = engine.first_stage(queries, 50)
    rotated = coordinates(decoder.tables, codes) @ engine.rotation
    quantised = engine.quantizer.decode(engine.quantizer.compute_codes(rotated))
    within = quantised.astype(np.float64) @ engine.rotation.T
    if decoder.basis is not None:
        within = within @ decoder.basis.T
    reconstructions = decoder.offset + within
    truth = ((queries[:, None, :].astype(np.float64) - reconstructions[None]) ** 2).sum(-1)
    # faiss rounds each table to 8 bits: a hundredth or so of the distances' spread.
    assert np.abs(D - np.take_along_axis(truth, I, 1)).max() < 0.02 * np.ptp(truth)
    assert np.isin(I, np.argsort(truth, 1)[:, :50]).mean() > 0.9


def test_the_first_stage_is_the_same_on_any_number_of_threads():
    decoder, codes, queries = _decoder_and_codes(32, True)
    previous = faiss.omp_get_max_threads()
    results = []
    try:
        for threads in (1, 2):
            faiss.omp_set_num_threads(threads)
            engine = ByteFastScan(decoder, codes)
            engine.refine_factor = 2
            results.append((engine.search(queries, 10, workers=threads), engine.rotation))
    finally:
        faiss.omp_set_num_threads(previous)
    ((D1, I1), rotation1), ((D2, I2), rotation2) = results
    np.testing.assert_array_equal(rotation1, rotation2)
    np.testing.assert_array_equal(I1, I2)
    np.testing.assert_array_equal(D1, D2)


def test_an_sgh_index_scans_exactly_unless_given_a_refine_factor_and_saves_it(tmp_path):
    x = load_digits().data.astype(np.float32)
    hasher = ITQ(n_bits=32, random_state=0).fit(x)
    index = SGHIndex(hasher, decoder="bytes")
    index.train(x)
    index.add(x)
    exact = AsymmetricIndex(index.byte_decoder)
    exact.add(index.encode(x))
    queries = x[:20] + 0.5
    assert index.refine_factor is None
    np.testing.assert_array_equal(index.search(queries, 30)[1],
                                  exact.search(queries, 30, workers=1)[1])
    index.refine_factor = 2
    D, I = index.search(queries, 30)
    fast = ByteFastScan(index.byte_decoder, exact.codes(), refine_factor=2)
    np.testing.assert_array_equal(I, fast.search(queries, 30)[1])
    loaded = SGHIndex.load(index.save(tmp_path / "index"))
    assert loaded.refine_factor == 2
    np.testing.assert_array_equal(loaded.search(queries, 30)[1], I)
    # An index saved before the key existed held 1 (unused) as refine_factor: it scans exactly.
    arrays = dict(np.load(tmp_path / "index" / "index.npz"))
    del arrays["byte_refine_factor"]
    np.savez(tmp_path / "index" / "index.npz", **arrays)
    assert SGHIndex.load(tmp_path / "index").refine_factor is None
