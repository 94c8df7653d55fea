import numpy as np
import pytest

from sgh.codes import (
    _popcount_lookup,
    as_words,
    code_health,
    pack_bits,
    popcount,
    unpack_bits,
    validate_codes,
)


def brute_force_distances(query_bits, database_bits):
    return (query_bits[:, None, :] != database_bits[None, :, :]).sum(axis=2)


def test_pack_unpack_round_trip_with_bits_not_a_multiple_of_8():
    bits = np.random.default_rng(0).integers(0, 2, size=(50, 12))
    packed = pack_bits(bits)
    assert packed.dtype == np.uint8 and packed.shape == (50, 2)
    np.testing.assert_array_equal(unpack_bits(packed, 12), bits)
    np.testing.assert_array_equal(pack_bits(bits.astype(bool)), packed)


def test_first_bit_is_most_significant_bit_of_byte_zero():
    bits = np.zeros((3, 12), dtype=np.uint8)
    bits[0, 0] = 1  # -> byte 0 = 0b1000_0000 = 128
    bits[1, 7] = 1  # -> byte 0 = 0b0000_0001 = 1
    bits[2, 8] = 1  # -> byte 1 = 0b1000_0000 = 128 (bits 12..15 are zero padding)
    np.testing.assert_array_equal(pack_bits(bits), [[128, 0], [1, 0], [0, 128]])


def test_pack_bits_rejects_non_binary_values_and_wrong_rank():
    with pytest.raises(ValueError, match="0/1"):
        pack_bits(np.array([[0, 2]]))
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        pack_bits(np.zeros(4))


def test_validate_codes_names_the_bad_value():
    codes = pack_bits(np.ones((2, 12)))
    with pytest.raises(ValueError, match="2 bytes per row, which holds 9..16 bits, but bits=32"):
        validate_codes(codes, 32)
    with pytest.raises(ValueError, match="non-zero padding bits after bit 10"):
        validate_codes(codes, 10)
    with pytest.raises(ValueError, match="bits=0 is impossible; accepted: an integer >= 1"):
        validate_codes(codes, 0)
    with pytest.raises(ValueError, match="dtype int64"):
        validate_codes(codes.astype(np.int64), 12)
    as_given = validate_codes(np.asfortranarray(codes), 12)  # returned C-contiguous
    assert as_given.flags.c_contiguous and np.array_equal(as_given, codes)


@pytest.mark.parametrize("bits", [1, 7, 12, 16, 24, 32, 40, 64, 100, 300])
def test_xor_and_popcount_of_words_is_the_hamming_distance(bits):
    # The one distance computation of sgh.search and the metrics engine: words of zero-padded
    # rows, XOR, popcount, summed over words.
    rng = np.random.default_rng(bits)
    query_bits = rng.integers(0, 2, size=(9, bits))
    database_bits = rng.integers(0, 2, size=(31, bits))
    query_words = as_words(pack_bits(query_bits))
    database_words = as_words(pack_bits(database_bits))
    distances = popcount(query_words[:, None, :] ^ database_words[None, :, :]).sum(axis=2)
    np.testing.assert_array_equal(distances, brute_force_distances(query_bits, database_bits))


@pytest.mark.parametrize("n_bytes, word_bytes", [(1, 1), (2, 2), (3, 4), (4, 4), (5, 8), (9, 8)])
def test_words_pad_rows_to_a_machine_word(n_bytes, word_bytes):
    words = as_words(np.full((2, n_bytes), 255, np.uint8))
    assert words.dtype.itemsize == word_bytes
    assert words.shape == (2, -(-n_bytes // word_bytes))
    assert int(popcount(words).sum()) == 2 * 8 * n_bytes  # the padding adds no bit


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_lookup_popcount_fallback_matches_bitwise_count(dtype):
    words = np.random.default_rng(2).integers(0, np.iinfo(dtype).max, (5, 13), dtype=dtype)
    np.testing.assert_array_equal(_popcount_lookup(words), np.bitwise_count(words))
    out = np.empty(words.shape, np.uint16)
    assert _popcount_lookup(words, out=out) is out
    np.testing.assert_array_equal(out, np.bitwise_count(words))


def test_code_health_on_hand_made_codes():
    # bit 0 is always 1 (dead); bit 2 copies bit 1 (correlation 1); the last row is a duplicate.
    bits = np.array(
        [
            [1, 0, 0, 0],
            [1, 0, 0, 1],
            [1, 1, 1, 0],
            [1, 1, 1, 1],
            [1, 1, 1, 1],
        ]
    )
    health = code_health(pack_bits(bits), 4)
    assert health["distinct_codes"] == 4
    assert health["dead_bits"] == 1
    np.testing.assert_allclose(health["bit_balance"], [1.0, 0.6, 0.6, 0.6])
    # corr(bit1, bit3): E[b1 b3] = 2/5, means 0.6 -> cov = 0.4 - 0.36 = 0.04, var = 0.24, so 1/6;
    # same for (bit2, bit3); pairs of live bits: (1,2)=1, (1,3)=1/6, (2,3)=1/6 -> mean 4/9.
    assert health["mean_abs_bit_correlation"] == pytest.approx(4 / 9)


def test_code_health_with_fewer_than_two_live_bits():
    bits = np.array([[0, 1, 1], [0, 1, 0]])
    health = code_health(pack_bits(bits), 3)
    assert health == {
        "distinct_codes": 2,
        "dead_bits": 2,
        "bit_balance": [0.0, 1.0, 0.5],
        "mean_abs_bit_correlation": 0.0,
        # Bits 0 and 1 never change (0 bits of entropy), bit 2 is a fair coin (1 bit); the two
        # distinct codes are equally frequent: -2 * (1/2) log2(1/2) = 1 bit.
        "bit_entropy": [0.0, 0.0, 1.0],
        "code_entropy": 1.0,
    }


@pytest.mark.parametrize("bits", [20, 100])
def test_code_health_matches_numpy_on_random_codes(bits):
    rng = np.random.default_rng(bits)
    codes = rng.random((700, bits)) < rng.uniform(0.1, 0.9, bits)  # unequal balance per bit
    codes[:, 3] = codes[:, 5]  # a perfectly correlated pair
    codes[:, 7] = False  # a dead bit
    codes[100:200] = codes[:100]  # duplicates
    health = code_health(pack_bits(codes), bits, rows_per_chunk=64)
    live = codes.std(axis=0) > 0
    correlation = np.corrcoef(codes[:, live].T.astype(float))
    upper = np.triu_indices(live.sum(), k=1)
    assert health["distinct_codes"] == len(np.unique(codes, axis=0))
    assert health["dead_bits"] == 1 == (~live).sum()
    np.testing.assert_allclose(health["bit_balance"], codes.mean(axis=0))
    assert health["mean_abs_bit_correlation"] == pytest.approx(np.abs(correlation[upper]).mean())


def test_code_entropy_and_bit_entropy():
    # 4 codes of 2 bits: 00, 00, 01, 11. Bit 0 is set in 1 of 4 codes, bit 1 in 2 of 4.
    codes = pack_bits(np.array([[0, 0], [0, 0], [0, 1], [1, 1]]))
    health = code_health(codes, 2)
    # H(1/4) = -(1/4) log2(1/4) - (3/4) log2(3/4) = 0.5 + 0.311278... ; H(1/2) = 1.
    assert health["bit_entropy"] == pytest.approx([0.5 + 0.75 * np.log2(4 / 3), 1.0])
    # Code frequencies 1/2, 1/4, 1/4: 0.5 * 1 + 2 * 0.25 * 2 = 1.5 bits.
    assert health["code_entropy"] == pytest.approx(1.5)


@pytest.mark.parametrize("stored", [np.int64(0), np.float64(12), np.array([12, 12])])
def test_every_file_with_a_code_length_reads_it_with_the_same_check(tmp_path, stored):
    # codes.npz and a saved asymmetric score: one rule, one message.
    from sgh.artifacts.codes_file import load_codes
    from sgh.scores.score_set import ScoreSet

    codes = np.zeros((2, 2), np.uint8)
    files = {
        "codes": dict(bits=stored, database=codes, query=codes),
        "score": dict(bits=stored, query_projection=np.zeros((3, 12)),
                      query_offset=np.zeros(12), form=np.str_("encoder"), kind=np.str_("encoder")),
    }
    readers = {"codes": load_codes, "score": ScoreSet.load_score}
    for name, arrays in files.items():
        path = tmp_path / f"{name}.npz"
        np.savez(path, **arrays)
        with pytest.raises(ValueError) as raised:
            readers[name](path)
        assert str(raised.value).endswith(
            "key 'bits' holds " + (f"{stored}" if np.ndim(stored) == 0 else
                                   "an array of shape (2,) and dtype int64")
            + "; accepted: the code length, a scalar integer >= 1"), str(raised.value)
