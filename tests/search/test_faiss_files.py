"""faiss files written and read without faiss: byte layout, and parity through faiss itself.

Tests that need faiss skip without it (faiss is an optional extra; the writer is ours).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sgh.codes import pack_bits
from sgh.search import HammingIndex
from sgh.search.faiss_files import FLAT, ID_MAP, read_binary_index, write_binary_index


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


def test_byte_layout_worked_example(tmp_path):
    # Two 16-bit codes, ids 7 and -5: the bytes faiss 1.15 writes for the same index.
    header = struct.pack("<iiqBi", 16, 2, 2, 1, 1)  # d, code_size, ntotal, is_trained, metric
    flat = FLAT + header + struct.pack("<Q", 4) + bytes([1, 2, 3, 4])
    ids = struct.pack("<Q", 2) + struct.pack("<2q", 7, -5)
    codes = np.array([[1, 2], [3, 4]], np.uint8)
    write_binary_index(tmp_path / "flat.bin", codes)
    write_binary_index(tmp_path / "map.bin", codes, np.array([7, -5]))
    assert (tmp_path / "flat.bin").read_bytes() == flat
    assert (tmp_path / "map.bin").read_bytes() == ID_MAP + header + flat + ids
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flat.bin", "map.bin"]  # no temp files
    stored = read_binary_index(tmp_path / "map.bin")
    assert stored.d == 16 and stored.codes.tolist() == [[1, 2], [3, 4]]
    assert stored.ids.tolist() == [7, -5] and stored.ids.dtype == np.int64
    assert read_binary_index(tmp_path / "flat.bin").ids is None


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
    # faiss writes the same bytes, and reads back as the same index (given its bits).
    native = faiss.IndexBinaryFlat(8 * xb.shape[1])
    if with_ids:
        native = faiss.IndexBinaryIDMap(native)
        native.add_with_ids(xb, ids)
    else:
        native.add(xb)
    faiss.write_index_binary(native, str(tmp_path / "native.faissbin"))
    assert (tmp_path / "native.faissbin").read_bytes() == path.read_bytes()
    back = HammingIndex.read_faiss(tmp_path / "native.faissbin", bits=bits)
    assert back.bits == bits and back.has_ids == with_ids
    np.testing.assert_array_equal(back.codes(), xb)
    np.testing.assert_array_equal(back.ids(), ids if with_ids else np.arange(300))
    for a, b in zip(back.search(xq, 20), index.search(xq, 20), strict=True):
        np.testing.assert_array_equal(a, b)


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
        back = HammingIndex.read_faiss(tmp_path / name, bits=12)
        assert back.ntotal == 0 and back.has_ids == (name == "idmap")


def test_read_faiss_defaults_to_the_files_d_and_checks_given_bits(tmp_path):
    xb = random_codes(np.random.default_rng(2), 5, 13)  # 2 bytes, 3 zero padding bits
    index = HammingIndex(13)
    index.add(xb)
    index.write_faiss(tmp_path / "x.faissbin")
    assert HammingIndex.read_faiss(tmp_path / "x.faissbin").bits == 16
    with pytest.raises(ValueError, match=r"x.faissbin: codes have 2 bytes.*bits=8 needs 1"):
        HammingIndex.read_faiss(tmp_path / "x.faissbin", bits=8)
    wide = HammingIndex(16)
    wide.add(np.full((1, 2), 255, np.uint8))
    wide.write_faiss(tmp_path / "wide.faissbin")
    with pytest.raises(ValueError, match=r"wide.faissbin: codes have non-zero padding"):
        HammingIndex.read_faiss(tmp_path / "wide.faissbin", bits=13)
    with pytest.raises(FileNotFoundError):
        HammingIndex.read_faiss(tmp_path / "missing.faissbin")


def test_refuses_other_faiss_index_types(tmp_path):
    faiss = pytest.importorskip("faiss")
    xb = random_codes(np.random.default_rng(3), 200, 16)
    hnsw = faiss.IndexBinaryHNSW(16, 8)
    hnsw.add(xb)
    ivf = faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(16), 16, 2)
    ivf.train(xb)
    ivf.add(xb)
    mapped_hnsw = faiss.IndexBinaryIDMap(faiss.IndexBinaryHNSW(16, 8))
    mapped_hnsw.add_with_ids(xb, np.arange(200, dtype=np.int64))
    floats = faiss.IndexFlatL2(4)
    faiss.write_index_binary(hnsw, str(tmp_path / "hnsw"))
    faiss.write_index_binary(ivf, str(tmp_path / "ivf"))
    faiss.write_index_binary(mapped_hnsw, str(tmp_path / "mapped"))
    faiss.write_index(floats, str(tmp_path / "floats"))
    for name, what in [("hnsw", r"faiss index type 'IBHf' \(IndexBinaryHNSW\) is not supported"),
                       ("ivf", r"faiss index type 'IBwF' \(IndexBinaryIVF\) is not supported"),
                       ("mapped", r"the IndexBinaryIDMap wraps faiss index type 'IBHf'"
                                  r" \(IndexBinaryHNSW\)"),
                       ("floats", r"faiss index type 'IxF2' is not supported")]:
        with pytest.raises(ValueError, match=rf"^\S*{name}: {what}; accepted: 'IBxF'") as error:
            HammingIndex.read_faiss(tmp_path / name)
        assert "\n" not in str(error.value)


def valid_file(tmp_path) -> bytes:
    index = HammingIndex(16)
    index.add(random_codes(np.random.default_rng(4), 3, 16), ids=[5, 6, 7])
    index.write_faiss(tmp_path / "valid")
    return (tmp_path / "valid").read_bytes()


def test_truncated_and_oversized_files(tmp_path):
    data = valid_file(tmp_path)
    path = tmp_path / "cut.faissbin"
    for length in range(len(data)):  # every prefix
        path.write_bytes(data[:length])
        with pytest.raises(ValueError, match=r"cut.faissbin: ") as error:
            read_binary_index(path)
        assert "\n" not in str(error.value)
    path.write_bytes(data + b"\0")
    with pytest.raises(ValueError, match="cut.faissbin: 1 unexpected bytes after the index"):
        read_binary_index(path)
    # A header claiming 2**60 codes fails on the size check, before any allocation.
    huge = bytearray(data)
    huge[12:20] = huge[37:45] = struct.pack("<q", 2**60)
    huge[50:58] = struct.pack("<Q", 2**61)
    path.write_bytes(bytes(huge))
    with pytest.raises(ValueError, match=r"cut.faissbin: truncated: xb needs \d+ bytes"):
        read_binary_index(path)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefix=st.sampled_from([b"", FLAT, ID_MAP]), tail=st.binary(max_size=120))
def test_garbage_is_a_value_error(tmp_path, prefix, tail):
    path = tmp_path / "garbage.faissbin"
    path.write_bytes(prefix + tail)
    try:
        read_binary_index(path)  # would need a valid header and exact sizes: never in practice
    except ValueError as error:
        assert str(error).startswith(str(path)) and "\n" not in str(error)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corrupted_bytes_load_or_are_a_value_error(tmp_path, data):
    valid = valid_file(tmp_path)
    position = data.draw(st.integers(0, len(valid) - 1))
    corrupted = bytearray(valid)
    corrupted[position] = data.draw(st.integers(0, 255))
    path = tmp_path / "corrupt.faissbin"
    path.write_bytes(bytes(corrupted))
    try:
        stored = read_binary_index(path)  # a changed code or id byte is still a valid file
    except ValueError as error:
        assert str(error).startswith(str(path)) and "\n" not in str(error)
    else:
        assert stored.codes.shape == (3, 2) and stored.ids.shape == (3,)


def test_writer_argument_errors(tmp_path):
    with pytest.raises(ValueError, match="codes must be a 2-D uint8 array"):
        write_binary_index(tmp_path / "x", np.zeros((2, 2), np.int32))
    with pytest.raises(ValueError, match=r"ids must be integers of shape \(2,\)"):
        write_binary_index(tmp_path / "x", np.zeros((2, 2), np.uint8), np.zeros(3, np.int64))
    assert not list(tmp_path.iterdir())
