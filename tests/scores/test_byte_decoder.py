"""`ByteDecoder`: hard EM that never fits worse than its start, posterior modes that never move an
item away from its features, our scan of its codes alone (the norm from byte pairs) and faiss's
additive-quantizer scan over its tables (norms in faiss's own 8-bit code), padding bits never
set, and its arrays read back exactly or refused."""

import dataclasses

import faiss
import numpy as np
import pytest
from sklearn.datasets import load_digits
from threadpoolctl import threadpool_limits

from sgh.codes import pack_bits
from sgh.scores.asymmetric_index import AsymmetricIndex
from sgh.scores.byte_decoder import SUBSPACE_DIMS_PER_BIT, ByteDecoder, norm_levels
from sgh.scores.lookup_kernels import (
    READ_AHEAD_FROM,
    list_pair_terms,
    pair_term,
    pair_terms,
    scan_top_k,
)
from sgh.scores.posterior_modes import Encoding, posterior_modes, valid_values
from sgh.scores.top_k import sort_heaps
from sgh.search.faiss_codes import additive_quantizer


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    """BLAS on one thread: the byte decoder's least-squares solves are small, and threads only
    fight each other (and take seconds) on a busy machine of two cores."""
    with threadpool_limits(1):
        yield


def _errors(decoder: ByteDecoder, features: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Each item's squared reconstruction error, in float64."""
    residual = features.astype(np.float64) - decoder.decode(codes).astype(np.float64)
    return np.einsum("ij,ij->i", residual, residual)


def _sign_codes(features: np.ndarray, bits: int, seed: int = 0) -> np.ndarray:
    """An encoder's codes: signs of random projections of the centred features."""
    return pack_bits(_projections(features, bits, seed) > 0)


def _certainty(features: np.ndarray, bits: int, seed: int = 0) -> np.ndarray:
    """How certain `_sign_codes`' bits are: their projections' magnitudes."""
    return np.abs(_projections(features, bits, seed)).astype(np.float32)


def _projections(features: np.ndarray, bits: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centred = features - features.mean(axis=0)
    return centred @ rng.standard_normal((features.shape[1], bits))


@pytest.fixture(scope="module")
def digits():
    """sklearn's digits (1797 x 64, values 0..16), encoder codes of 16 bits, and a decoder
    fitted from them by a few hard-EM rounds."""
    x = load_digits().data.astype(np.float32)
    codes = _sign_codes(x, 16)
    return x, codes, ByteDecoder.fit(x, codes, 16, iterations=3)


def _random_decoder(bits: int = 16, dim: int = 32, seed: int = 0) -> ByteDecoder:
    """Tables drawn at random: reconstructions of distinct codes lie far apart (squared
    distances ~2 dim) compared with the norm code's step."""
    rng = np.random.default_rng(seed)
    return ByteDecoder(bits, rng.standard_normal(dim).astype(np.float32),
                       rng.standard_normal((-(-bits // 8), 256, dim)).astype(np.float32))


def test_hard_em_fits_no_worse_than_least_squares_on_the_start_codes(digits):
    x, codes, fitted = digits
    start = ByteDecoder.fit(x, codes, 16, iterations=0)
    start_error = _errors(start, x, codes).sum()
    fitted_error = _errors(fitted, x, fitted.encode(x, codes)).sum()
    assert fitted_error <= start_error
    # The EM rounds do the work, not only the final encoding: the start tables with codes by
    # their own posterior modes fit worse.
    assert fitted_error < 0.9 * _errors(start, x, start.encode(x, codes)).sum()


@pytest.mark.parametrize("which", ["start", "fitted", "random"])
def test_encoding_never_moves_an_item_away_from_its_features(digits, which):
    # Each ICM step picks the best table entry given the other bytes, the current one among the
    # candidates: no item's error can grow from its start code's, whatever the tables.
    x, codes, fitted = digits
    decoder = {"start": ByteDecoder.fit(x, codes, 16, iterations=0), "fitted": fitted,
               "random": ByteDecoder(16, fitted.offset,
                                     fitted.tables + np.random.default_rng(3).normal(
                                         0, 1, fitted.tables.shape).astype(np.float32),
                                     fitted.basis)}[which]
    certainty = _certainty(x, 16)
    for encoding in ("flip2", "flip4", "icm1", "icm4", "local_search"):
        encoded = decoder.encode(x, codes, encoding, certainty)
        before, after = _errors(decoder, x, codes), _errors(decoder, x, encoded)
        assert (after <= before + 1e-4 * (1.0 + before)).all()
        assert after.sum() < before.sum()
    # ICM's codes are a fixed point once converged: its sweeps again change nothing.
    centred = (x - decoder.offset) @ decoder.basis  # the tables' coordinates
    converged = posterior_modes(centred, codes, decoder.tables, valid_values(16), 50)
    np.testing.assert_array_equal(decoder.encode(x, converged, "icm1"), converged)


def test_local_search_only_lowers_each_items_error_and_ignores_the_batching(digits):
    # Each round keeps an item's new code only where its error fell below the ICM mode's.
    x, codes, fitted = digits
    modes = fitted.encode(x, codes, "icm4")
    searched = fitted.encode(x, codes)
    before, after = _errors(fitted, x, modes), _errors(fitted, x, searched)
    assert (after <= before + 1e-4 * (1.0 + before)).all()
    assert (after < before - 1e-3).sum() > 0.01 * len(x)  # it finds better codes for some
    # The moves are a hash of each item's start code: the same codes in any batches or order.
    halves = np.concatenate([fitted.encode(x[:700], codes[:700]),
                             fitted.encode(x[700:], codes[700:])])
    np.testing.assert_array_equal(halves, searched)
    order = np.random.default_rng(0).permutation(len(x))
    np.testing.assert_array_equal(fitted.encode(x[order], codes[order]), searched[order])


def test_flips_change_only_the_least_certain_bits_and_ignore_the_batching(digits):
    x, codes, fitted = digits
    certainty = _certainty(x, 16)
    bits = np.unpackbits(codes, axis=1).astype(bool)
    # Each byte's 3 least certain bits (ties: the earlier), the only ones flip3 may change.
    ranks = np.argsort(np.argsort(certainty.reshape(len(x), 2, 8), axis=2, kind="stable"),
                       axis=2, kind="stable").reshape(len(x), 16)
    flipped = np.unpackbits(fitted.encode(x, codes, "flip3", certainty), axis=1).astype(bool)
    changed = flipped != bits
    assert changed.any() and not (changed & (ranks >= 3)).any()
    # Two sweeps over a byte's 8 flips, or over all 256 values: flip8 searches as icm2 does.
    icm2 = _errors(fitted, x, fitted.encode(x, codes, "icm2"))
    flip8 = _errors(fitted, x, fitted.encode(x, codes, "flip8", certainty))
    np.testing.assert_allclose(flip8, icm2, rtol=1e-4, atol=1e-3)
    halves = np.concatenate([fitted.encode(x[:700], codes[:700], "flip4", certainty[:700]),
                             fitted.encode(x[700:], codes[700:], "flip4", certainty[700:])])
    np.testing.assert_array_equal(halves, fitted.encode(x, codes, "flip4", certainty))


@pytest.mark.parametrize("name", ["encoder", "flip0", "flip9", "icm0", "icm17", "icm", "ICM1",
                                  "local-search", "", None, 4])
def test_encodings_are_named_or_refused_in_one_line(name):
    if name == "encoder":
        assert Encoding.named(name) == Encoding("encoder")
        return
    with pytest.raises(ValueError, match=r"is not known; accepted: encoder, flip1 \.\. flip8"):
        Encoding.named(name)


def test_flips_need_the_encoders_certainty(digits):
    x, codes, fitted = digits
    with pytest.raises(ValueError, match="flips the encoder's least certain bits"):
        fitted.encode(x, codes, "flip4")


def test_norm_levels_are_faiss_own_8_bit_norm_codes(digits):
    x, codes, fitted = digits
    index = additive_quantizer(fitted, fitted.encode(x, codes))
    low, high = index.aq.norm_min, index.aq.norm_max
    assert low < high
    norms = fitted.squared_norms(fitted.encode(x, codes))
    assert norms.min() == pytest.approx(low) and norms.max() == pytest.approx(high)
    # Every item's norm, and values on and either side of each level's edge, and outside.
    edges = (np.float32(low) + (np.float32(high) - np.float32(low))
             * np.arange(257, dtype=np.float32) / np.float32(256))
    values = np.concatenate([norms, edges, np.nextafter(edges, np.float32(np.inf)),
                             np.nextafter(edges, np.float32(-np.inf)),
                             np.float32([low - 10, high + 10, 0])]).astype(np.float32)
    expected = np.array([index.aq.encode_norm(float(value)) for value in values])
    np.testing.assert_array_equal(norm_levels(values, low, high), expected)

    # The index holds each code followed by its norm's level.
    encoded = fitted.encode(x, codes)
    stored = faiss.vector_to_array(index.codes).reshape(len(encoded), -1)
    np.testing.assert_array_equal(stored[:, :-1], encoded)
    np.testing.assert_array_equal(stored[:, -1], norm_levels(norms, low, high))


def test_the_faiss_scan_gives_squared_distances_to_the_reconstructions(digits):
    x, codes, fitted = digits
    rng = np.random.default_rng(1)
    database = fitted.encode(x, codes)
    queries = x[rng.choice(len(x), 40, replace=False)] + rng.normal(0, 0.5, (40, 64))
    queries = queries.astype(np.float32)
    index = additive_quantizer(fitted, database)
    step = (index.aq.norm_max - index.aq.norm_min) / 256
    reconstructions = fitted.decode(database).astype(np.float64)
    exact = ((queries[:, None, :].astype(np.float64) - reconstructions[None]) ** 2).sum(-1)
    tolerance = step + 1e-5 * exact.max()  # the norm's rounding, and float32 sums

    D, I = index.search(queries, 200)
    returned = np.take_along_axis(exact, I, axis=1)
    assert (np.abs(D - returned) <= tolerance).all()
    assert (np.diff(D, axis=1) >= 0).all()
    # The exact distances in the order returned: each no more than any later one's + the step.
    later_min = np.minimum.accumulate(returned[:, ::-1], axis=1)[:, ::-1]
    assert (returned <= later_min + tolerance).all()
    # The nearest reconstruction is first, up to the step; none left out is nearer than the last.
    assert (returned[:, 0] <= exact.min(axis=1) + tolerance).all()
    left_out = exact.copy()
    np.put_along_axis(left_out, I, np.inf, axis=1)
    assert (left_out.min(axis=1) >= returned.max(axis=1) - tolerance).all()


def test_the_scan_holds_the_codes_alone_and_ranks_by_distance_to_the_reconstructions():
    # 32 bits: six byte pairs. The per-item term comes from the codes (pair tables, per tile),
    # so the index keeps no array per item; the kernels' sums are those of a held-norm scan to
    # the bit, and D + ||q||^2 is the squared distance to each reconstruction.
    decoder = _random_decoder(bits=32)
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 256, (5000, 4), dtype=np.uint8)
    queries = decoder.decode(codes[:37]) + rng.normal(0, 1, (37, 32)).astype(np.float32)
    index = AsymmetricIndex(decoder)
    index.add(codes[:2000])
    index.add(codes[2000:])
    assert index._norms == []
    D, I = index.search(queries, 50, workers=1)

    tables = decoder.lookup_tables(queries)
    held_D = np.full((37, 50), np.inf, np.float32)
    held_I = np.full((37, 50), -1, np.int64)
    scan_top_k(tables, codes, decoder.item_terms(codes), np.zeros((0, 1 << 16), np.float32), 0,
               held_D, held_I)
    sort_heaps(held_D, held_I)
    np.testing.assert_array_equal(D, held_D)
    np.testing.assert_array_equal(I, held_I)
    for got, want in zip(index.search(queries, 50, workers=2), (D, I), strict=True):
        np.testing.assert_array_equal(got, want)  # a call per worker: the same sums

    reconstructions = decoder.decode(codes).astype(np.float64)
    exact = ((queries[:, None, :].astype(np.float64) - reconstructions[None]) ** 2).sum(-1)
    squared = (queries.astype(np.float64) ** 2).sum(1, keepdims=True)
    np.testing.assert_allclose(D + squared, np.take_along_axis(exact, I, axis=1), rtol=1e-4)
    np.testing.assert_array_equal(I, np.argsort(exact, axis=1, kind="stable")[:, :50])
    np.testing.assert_allclose(index.candidate_scores(queries, I), D, rtol=0, atol=0)


@pytest.mark.parametrize("bits", [16, 32, 64])
def test_a_few_queries_a_call_scan_by_one_byte_bounds_to_the_same_results(bits):
    # Fewer queries than 4 per 3 byte pairs: each item's pair term is read as a one-byte bound
    # and computed only where the bound could enter the top k. The results are those of the
    # per-tile scan to the bit, ties (repeated codes) by id included.
    decoder = _random_decoder(bits=bits)
    rng = np.random.default_rng(4)
    codes = rng.integers(0, 256, (3000, bits // 8), dtype=np.uint8)
    codes[1500:1600] = codes[:100]
    queries = decoder.decode(codes[:20]) + rng.normal(0, 1, (20, 32)).astype(np.float32)
    tables = decoder.lookup_tables(queries)
    want_D = np.full((20, 30), np.inf, np.float32)
    want_I = np.full((20, 30), -1, np.int64)
    scan_top_k(tables, codes, np.zeros(0, np.float32), decoder.pair_tables, 0, want_D, want_I)
    sort_heaps(want_D, want_I)
    assert np.isin(want_I, np.arange(1500, 1600)).any()  # the repeated codes are found

    index = AsymmetricIndex(decoder)
    index.add(codes)
    for start, count in ((0, 1), (1, 3), (4, 16)):
        D, I = index.search(queries[start : start + count], 30, workers=1)
        np.testing.assert_array_equal(D, want_D[start : start + count])
        np.testing.assert_array_equal(I, want_I[start : start + count])
    levels = index._term_bounds()[0]
    assert levels.dtype == np.uint8 and levels.shape == (3000,)  # one byte per item, kept
    index.add(codes[:1])  # new items: new bounds
    assert index._bounds is None


@pytest.mark.parametrize("bits", [16, 32])
def test_the_items_terms_are_the_same_alone_in_a_run_and_in_lists_either_side_of_the_read_ahead(
        bits):
    # The bounded scans compute an item's term alone (`pair_term`), the plain scans for a run of
    # items or the probed lists at once, reading each pair table in order first from
    # READ_AHEAD_FROM items on: the same float32 sums to the bit, or the scans would disagree.
    decoder = _random_decoder(bits=bits)
    rng = np.random.default_rng(5)
    n = READ_AHEAD_FROM + 1500
    codes = rng.integers(0, 256, (n, bits // 8), dtype=np.uint8)
    alone = np.array([pair_term(decoder.pair_tables, codes, i) for i in range(n)], np.float32)
    assert np.abs(alone).min() > 0  # every code has byte pairs: no term is trivially zero

    np.testing.assert_array_equal(decoder.item_terms(codes), alone)  # one run, read ahead
    short = np.empty(100, np.float32)  # one run below the read-ahead
    pair_terms(decoder.pair_tables, codes, 200, 300, short)
    np.testing.assert_array_equal(short, alone[200:300])

    starts = np.linspace(0, n, 41).astype(np.int64)  # 40 lists of about 140 items
    for lists in (np.array([0, 1, 2, 7, 9, 10]),  # three runs of lists, below the read-ahead
                  np.setdiff1d(np.arange(40), [3, 4, 20])):  # above it
        out = np.full(n, np.nan, np.float32)
        list_pair_terms(decoder.pair_tables, codes, starts, lists, out)
        rows = np.concatenate([np.arange(starts[l], starts[l + 1]) for l in lists])
        np.testing.assert_array_equal(out[rows], alone[rows])
        assert np.isnan(np.delete(out, rows)).all()  # the other lists' rows left alone


def test_a_query_that_is_a_reconstruction_finds_its_own_code_first():
    # Distinct codes' reconstructions lie far apart (squared distance > 10 norm steps here),
    # so the norm's rounding cannot reorder the first place.
    decoder = _random_decoder()
    rng = np.random.default_rng(2)
    codes = np.unique(rng.integers(0, 256, (3000, 2), dtype=np.uint8), axis=0)
    codes = codes[rng.permutation(len(codes))]
    index = additive_quantizer(decoder, codes)
    step = (index.aq.norm_max - index.aq.norm_min) / 256
    reconstructions = decoder.decode(codes).astype(np.float64)
    rows = rng.choice(len(codes), 100, replace=False)
    distances = ((reconstructions[rows, None] - reconstructions[None]) ** 2).sum(-1)
    distances[np.arange(len(rows)), rows] = np.inf
    assert distances.min() > 10 * step  # the design holds
    D, I = index.search(decoder.decode(codes[rows]), 3)
    np.testing.assert_array_equal(I[:, 0], rows)
    assert (np.abs(D[:, 0]) <= step / 2 + 1e-3).all()


@pytest.mark.parametrize("bits", [12, 20])
def test_padding_bits_are_never_set_and_their_table_entries_stay_zero(digits, bits):
    x, _, _ = digits
    codes = _sign_codes(x, bits, seed=bits)
    decoder = ByteDecoder.fit(x, codes, bits, iterations=2)
    padding = (1 << (8 - bits % 8)) - 1  # the low bits of the last byte
    unused = (np.arange(256) & padding) != 0
    assert decoder.tables.shape == (-(-bits // 8), 256, min(64, SUBSPACE_DIMS_PER_BIT * bits))
    assert not decoder.tables[-1][unused].any()
    assert decoder.tables[-1][~unused].any()
    for start in (codes, decoder.encode(x, codes)):
        encoded = decoder.encode(x, start, "icm4")
        assert not (encoded[:, -1] & padding).any()
        assert len(np.unique(encoded[:, -1])) > 1  # the last byte's used bits do vary
    # Unused entries that would fit better than every used one are still never chosen.
    tempting = decoder.tables.copy()
    tempting[-1][~unused] *= 100.0
    greedy = dataclasses.replace(decoder, tables=tempting)
    assert not (greedy.encode(x, codes, "icm4")[:, -1] & padding).any()
    # flip<T> never sets them either, with more flips than the last byte has bits.
    weights = np.abs(_certainty(x, bits))
    assert not (greedy.encode(x, codes, "flip8", weights)[:, -1] & padding).any()


def test_its_arrays_read_back_exactly(digits, tmp_path):
    _, _, fitted = digits
    arrays = fitted.arrays("byte_decoder.")
    assert set(arrays) == {"byte_decoder.bits", "byte_decoder.offset", "byte_decoder.tables",
                           "byte_decoder.basis"}
    again = ByteDecoder.from_arrays(arrays, "index.npz", "byte_decoder.")
    assert again.bits == fitted.bits and again.fingerprint == fitted.fingerprint
    for name in ("offset", "tables", "basis"):
        assert getattr(again, name).dtype == np.float32
        np.testing.assert_array_equal(getattr(again, name), getattr(fitted, name))
    assert repr(again) == repr(fitted)
    # Through an .npz file too, without a prefix (0-d arrays, as np.load gives them).
    np.savez(tmp_path / "decoder.npz", **fitted.arrays())
    with np.load(tmp_path / "decoder.npz") as saved:
        again = ByteDecoder.from_arrays(dict(saved), "decoder.npz")
    assert again.bits == 16 and again.fingerprint == fitted.fingerprint


def test_malformed_arrays_are_refused_naming_the_key(digits):
    _, _, fitted = digits
    good = fitted.arrays("d.")
    for key in ("d.bits", "d.offset", "d.tables"):
        broken = {name: value for name, value in good.items() if name != key}
        with pytest.raises(ValueError, match=f"where.npz: missing key '{key}'"):
            ByteDecoder.from_arrays(broken, "where.npz", "d.")
    # Without its basis, the subspace's tables no longer fit the features.
    without_basis = {name: value for name, value in good.items() if name != "d.basis"}
    with pytest.raises(ValueError, match="key 'd.tables' must be float"):
        ByteDecoder.from_arrays(without_basis, "where.npz", "d.")
    for tables in (fitted.tables[:1], fitted.tables[:, :255], fitted.tables[..., :10],
                   fitted.tables[0], fitted.tables.astype(np.int32)):
        with pytest.raises(ValueError, match="key 'd.tables' must be float"):
            ByteDecoder.from_arrays({**good, "d.tables": tables}, "where.npz", "d.")
    with pytest.raises(ValueError, match="key 'd.tables' must be float"):
        ByteDecoder.from_arrays({**good, "d.bits": np.int64(24)}, "where.npz", "d.")
    with pytest.raises(ValueError, match="'d.offset' float"):
        ByteDecoder.from_arrays({**without_basis, "d.offset": fitted.offset[None]}, "where.npz",
                                "d.")
    for name in ("tables", "offset"):
        for bad in (np.nan, np.inf):
            damaged = good[f"d.{name}"].copy()
            damaged.flat[7] = bad
            with pytest.raises(ValueError, match="where.npz: the byte decoder's tables hold "
                                                 "NaN or infinite values"):
                ByteDecoder.from_arrays({**good, f"d.{name}": damaged}, "where.npz", "d.")


def test_the_fingerprint_follows_every_table_entry(digits):
    _, _, fitted = digits
    assert len(fitted.fingerprint) == 16
    basis = fitted.basis
    assert ByteDecoder(16, fitted.offset.copy(), fitted.tables.copy(), basis.copy()).fingerprint \
        == fitted.fingerprint
    tables = fitted.tables.copy()
    tables[1, 200, -1] = np.nextafter(tables[1, 200, -1], np.float32(np.inf))
    assert ByteDecoder(16, fitted.offset, tables, basis).fingerprint != fitted.fingerprint
    offset = fitted.offset.copy()
    offset[0] += 1
    assert ByteDecoder(16, offset, fitted.tables, basis).fingerprint != fitted.fingerprint
    turned = basis.copy()
    turned[0, 0] = -turned[0, 0]
    assert ByteDecoder(16, fitted.offset, fitted.tables, turned).fingerprint != fitted.fingerprint
    assert fitted.fingerprint in repr(fitted)


def test_a_subspace_decoder_scores_as_its_tables_in_full_coordinates(digits):
    # 8 bits: the tables live in the top 16 of the 64 principal directions. Lookup tables,
    # norms and reconstructions are those of the same tables written out in the features'
    # coordinates (U c), and encoding in the subspace picks the codes that would minimise the
    # full error (the part of x outside the subspace is the same for every code).
    x, _, _ = digits
    codes = _sign_codes(x, 8)
    subspace = ByteDecoder.fit(x, codes, 8, iterations=2)
    r = SUBSPACE_DIMS_PER_BIT * 8
    assert subspace.tables.shape == (1, 256, r) and subspace.basis.shape == (64, r)
    np.testing.assert_allclose(subspace.basis.T @ subspace.basis, np.eye(r), atol=1e-5)
    full = ByteDecoder(8, subspace.offset, subspace.tables @ subspace.basis.T)
    queries = x[:50]
    np.testing.assert_allclose(subspace.lookup_tables(queries), full.lookup_tables(queries),
                               rtol=1e-4, atol=1e-2)
    np.testing.assert_allclose(subspace.squared_norms(codes), full.squared_norms(codes),
                               rtol=1e-5)
    np.testing.assert_allclose(subspace.decode(codes), full.decode(codes), atol=1e-4)
    encoded = subspace.encode(x, codes, "icm4")
    best = np.argmin(((x[:, None] - full.decode(np.arange(256, dtype=np.uint8)[:, None])[None])
                      ** 2).sum(-1), axis=1)
    # One byte: ICM's single step is exact, so the codes are each item's nearest table entry.
    assert (encoded[:, 0] == best).mean() > 0.99
    # The basis is saved, read back and part of the fingerprint.
    again = ByteDecoder.from_arrays(subspace.arrays("d."), "where.npz", "d.")
    np.testing.assert_array_equal(again.basis, subspace.basis)
    assert again.fingerprint == subspace.fingerprint != full.fingerprint
    for bad in (subspace.basis[:-1], subspace.basis[:, :0], np.eye(64, dtype=np.float32)):
        with pytest.raises(ValueError, match="key 'd.basis' must be float"):
            ByteDecoder.from_arrays({**subspace.arrays("d."), "d.basis": bad}, "where.npz", "d.")


@pytest.mark.parametrize("dim, basis_dims", [(40, None), (300, 260)])
def test_a_querys_tables_are_the_same_to_the_bit_alone_in_any_batch_and_on_any_threads(
        dim, basis_dims):
    # 300 features onto 260 basis dimensions, then 260 onto the tables: sums longer than the
    # one BLAS pass each part is summed in.
    rng = np.random.default_rng(3)
    basis = (None if basis_dims is None else
             np.linalg.qr(rng.standard_normal((dim, basis_dims)))[0].astype(np.float32))
    r = dim if basis is None else basis_dims
    decoder = ByteDecoder(32, rng.standard_normal(dim).astype(np.float32),
                          rng.standard_normal((4, 256, r)).astype(np.float32), basis)
    queries = (3 * rng.standard_normal((150, dim))).astype(np.float32)
    tables = decoder.lookup_tables(queries)
    # The tables are the float64 sums, rounded once into float32 and once per BLAS pass.
    books = decoder.books.astype(np.float64)
    exact = (np.einsum("jvd,jvd->jv", books, books)[None]
             - 2 * np.einsum("qd,jvd->qjv", queries.astype(np.float64), books))
    np.testing.assert_allclose(tables, exact, rtol=1e-5, atol=1e-5 * np.abs(exact).max())
    for rows in (slice(7, 8), slice(0, 2), slice(3, 40), slice(149, 150)):
        np.testing.assert_array_equal(decoder.lookup_tables(queries[rows]), tables[rows])
    with threadpool_limits(2):
        np.testing.assert_array_equal(decoder.lookup_tables(queries), tables)
