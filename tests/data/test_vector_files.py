"""Vector files (`sgh.data.vector_files`): every format round-trips, partial reads equal slices,
and every malformed file is one `UserInputError` line — never another exception."""

import os
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sgh.data.feature_conversion import as_float32_features, read_float32, require_same_scaling
from sgh.data.vector_files import ACCEPTED_SUFFIXES, open_vectors
from sgh.errors import UserInputError
from tests.helpers import damage
from tests.helpers_vector_files import TEXMEX_DTYPES, write_texmex


def write_any(path, array, key="X"):
    path = Path(path)
    if path.suffix == ".npy":
        np.save(path, array)
    elif path.suffix == ".npz":
        np.savez(path, **{key: array})
    elif path.suffix == ".mat":
        scipy.io.savemat(path, {key: array})
    elif path.suffix in (".hdf5", ".h5"):
        with h5py.File(path, "w") as file:
            file.create_dataset(key, data=array)
    else:
        write_texmex(path, array)
    return path


def read_all(path, key=None):
    vectors = open_vectors(path, key)
    return vectors.read(0, len(vectors))


def one_line_error(match=None):
    return pytest.raises(UserInputError, match=match)


def assert_one_line(error_info, *names):
    message = str(error_info.value)
    assert message and "\n" not in message
    for name in names:
        assert str(name) in message, message


# --- round trips --------------------------------------------------------------------------------

@pytest.fixture
def features():
    return np.random.default_rng(0).normal(size=(37, 5)).astype(np.float32)


@pytest.mark.parametrize("suffix", ACCEPTED_SUFFIXES)
def test_every_format_round_trips_and_partial_reads_equal_slices(tmp_path, suffix, features):
    expected = np.rint(np.abs(features) * 40) if suffix in (".bvecs", ".ivecs") else features
    expected = expected.astype(TEXMEX_DTYPES.get(suffix, np.float32))
    path = write_any(tmp_path / f"x{suffix}", expected)
    vectors = open_vectors(path)
    assert vectors.shape == (37, 5) and len(vectors) == 37
    assert vectors.dtype == expected.dtype
    assert vectors.key == (None if suffix in (".npy", ".fvecs", ".bvecs", ".ivecs") else "X")
    np.testing.assert_array_equal(vectors.read(0, 37), expected)
    for start, stop in [(0, 1), (3, 17), (36, 37), (10, 10)]:
        np.testing.assert_array_equal(vectors.read(start, stop), expected[start:stop])


@pytest.mark.parametrize("dtype", ["<f4", ">f4", "<f8", "f2", "i1", "u1", ">i2", "<u4", "i8",
                                   "?"])
@pytest.mark.parametrize("order", ["C", "F"])
def test_npy_keeps_the_stored_dtype_in_either_memory_order(tmp_path, dtype, order):
    array = np.asarray(np.arange(24).reshape(6, 4) % 7, dtype=dtype, order=order)
    np.save(tmp_path / "x.npy", array)
    vectors = open_vectors(tmp_path / "x.npy")
    assert vectors.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(vectors.read(2, 5), array[2:5])


def test_npz_and_mat_need_a_key_only_when_they_hold_several_arrays(tmp_path, features):
    np.savez(tmp_path / "two.npz", base=features, query=features[:3])
    np.testing.assert_array_equal(read_all(tmp_path / "two.npz", "query"), features[:3])
    with one_line_error() as error:
        open_vectors(tmp_path / "two.npz")
    assert_one_line(error, "base, query", "key")
    scipy.io.savemat(tmp_path / "two.mat", {"Xtest": features, "Xtrain": features[:2]})
    np.testing.assert_array_equal(read_all(tmp_path / "two.mat", "Xtrain"), features[:2])
    with one_line_error() as error:
        open_vectors(tmp_path / "two.mat")
    assert_one_line(error, "Xtest, Xtrain")


def test_mat_v4_and_integer_classes_round_trip(tmp_path):
    array = np.arange(12, dtype=np.float64).reshape(3, 4)
    scipy.io.savemat(tmp_path / "v4.mat", {"A": array}, format="4")
    np.testing.assert_array_equal(read_all(tmp_path / "v4.mat"), array)
    for dtype in (np.uint8, np.int16, np.uint32, np.int64, np.bool_):
        scipy.io.savemat(tmp_path / "i.mat", {"A": array.astype(dtype)})
        loaded = read_all(tmp_path / "i.mat", "A")
        assert loaded.dtype == dtype
        np.testing.assert_array_equal(loaded, array.astype(dtype))


@pytest.mark.skipif(not Path("../shared/data/siftsmall").is_dir(), reason="needs ../shared/data")
def test_texmex_files_equal_the_npz_copy_of_siftsmall():
    folder = Path("../shared/data/siftsmall")
    with np.load(folder / "siftsmall.npz") as npz:
        for name, suffix in (("base", "fvecs"), ("query", "fvecs"), ("groundtruth", "ivecs")):
            np.testing.assert_array_equal(read_all(folder / f"siftsmall_{name}.{suffix}"),
                                          npz[name])


def test_large_bvecs_reads_chunk_by_chunk_in_bounded_resident_memory(tmp_path):
    # 64 MB of uint8 vectors read in 1.3 MB chunks: positioned reads keep nothing mapped, so the
    # resident set grows by a few chunks at most (a whole-file memmap would add the 64 MB).
    n, d, chunk = 500_000, 128, 10_000
    path = tmp_path / "big.bvecs"
    rows = np.zeros(n, np.dtype([("dim", "<i4"), ("values", "u1", (d,))]))
    rows["dim"], rows["values"][:, 0] = d, np.arange(n) % 251
    rows.tofile(path)
    del rows
    vectors = open_vectors(path)
    baseline, peak, checksum = _resident_bytes(), 0, 0
    for start in range(0, n, chunk):
        block = vectors.read(start, min(start + chunk, n))
        checksum += int(block[:, 0].sum(dtype=np.int64))
        peak = max(peak, _resident_bytes() - baseline)
    assert checksum == int((np.arange(n) % 251).sum())
    assert peak < 16 * 2**20, f"resident memory grew by {peak / 2**20:.1f} MiB"


@pytest.mark.slow
def test_ten_million_bvecs_stream_in_bounded_peak_memory(tmp_path):
    # The [scale] target's file: 10^7 x 128 uint8 (1.3 GB). A fresh process reads it in chunks
    # of 65,536 rows (8.4 MB) and converts each to float32 (34 MB); its peak RSS (about 80 MiB,
    # 40 of them Python and numpy) must stay far below the file, which a whole-file memmap would
    # add page by page.
    n, d, chunk = 10_000_000, 128, 1 << 16
    row = np.dtype([("dim", "<i4"), ("values", "u1", (d,))])
    with open(tmp_path / "big.bvecs", "wb") as out:
        for start in range(0, n, 1_000_000):
            rows = np.zeros(1_000_000, row)
            rows["dim"], rows["values"][:, 0] = d, (np.arange(start, start + 1_000_000) % 251)
            rows.tofile(out)
    # VmHWM, not ru_maxrss: ru_maxrss survives exec and would count the forking parent.
    script = (
        "import numpy as np\n"
        "from sgh.data.feature_conversion import as_float32_features\n"
        "from sgh.data.vector_files import open_vectors\n"
        f"v = open_vectors({str(tmp_path / 'big.bvecs')!r}); total = 0\n"
        f"for a in range(0, len(v), {chunk}):\n"
        f"    x, _ = as_float32_features(v.read(a, min(a + {chunk}, len(v))), v.path, None, a)\n"
        "    total += int(np.rint(x[:, 0] * 255).sum())\n"
        "status = open('/proc/self/status').read().split('VmHWM:')[1].split()[0]\n"
        "print(total, status)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True, timeout=600)
    total, peak_kib = map(int, result.stdout.split())
    assert total == int((np.arange(n) % 251).sum())
    assert peak_kib < 200 * 1024, f"peak RSS {peak_kib / 1024:.0f} MiB"


def _resident_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# --- malformed files ----------------------------------------------------------------------------

def test_missing_path_directory_and_unknown_extension(tmp_path):
    with one_line_error("no such file") as error:
        open_vectors(tmp_path / "nope.fvecs")
    assert_one_line(error, "nope.fvecs")
    with one_line_error("is a directory") as error:
        open_vectors(tmp_path)
    (tmp_path / "x.csv").write_text("1,2\n")
    with one_line_error("unknown extension") as error:
        open_vectors(tmp_path / "x.csv")
    assert_one_line(error, "'.csv'", ".fvecs", ".mat")


def test_a_key_for_a_single_array_format_is_refused(tmp_path, features):
    with one_line_error("keys apply to .npz, .mat, .hdf5, .h5 files"):
        open_vectors(write_any(tmp_path / "x.npy", features), "X")


def test_missing_keys_list_the_keys_found(tmp_path, features):
    for suffix in (".npz", ".mat"):
        path = write_any(tmp_path / f"x{suffix}", features, key="feats")
        with one_line_error("has no key 'X_train'") as error:
            open_vectors(path, "X_train")
        assert_one_line(error, path, "keys found: feats")


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
def test_object_arrays_are_refused_without_unpickling(tmp_path, suffix):
    array = np.empty((2, 2), dtype=object)
    path = tmp_path / f"x{suffix}"
    if suffix == ".npy":
        np.save(path, array, allow_pickle=True)
    else:
        np.savez(path, X=array)
    with one_line_error("object \\(pickled\\) array") as error:
        read_all(path)
    assert_one_line(error, path)


@pytest.mark.parametrize("suffix", [".npy", ".npz", ".mat"])
@pytest.mark.parametrize("shape", [(5,), (2, 3, 4), (0, 4), (4, 0)])
def test_arrays_that_are_not_2d_or_are_empty(tmp_path, suffix, shape):
    if suffix == ".mat" and len(shape) == 1:
        shape = (1, 1, 5)  # MATLAB has no 1-D arrays
    path = write_any(tmp_path / f"x{suffix}", np.zeros(shape, np.float32))
    with one_line_error("expected a (2-D|non-empty)") as error:
        read_all(path)
    assert_one_line(error, path)


@pytest.mark.parametrize("array", [np.array([["a", "b"]]), np.zeros((2, 2), complex),
                                   np.zeros((2, 2), "datetime64[s]"),
                                   np.zeros((2, 2), [("a", "f4"), ("b", "i4")])])
def test_non_numeric_dtypes(tmp_path, array):
    for suffix in (".npy", ".npz"):
        with one_line_error("non-numeric dtype") as error:
            read_all(write_any(tmp_path / f"x{suffix}", array))
        assert_one_line(error, str(array.dtype))


@pytest.mark.parametrize("value", [np.array([["abc", "def"]]), {"a": np.eye(2)},
                                   np.array([[np.eye(2)]], dtype=object),
                                   scipy.sparse.eye(3, format="csc")])
def test_mat_char_struct_cell_and_sparse_arrays_are_refused(tmp_path, value):
    scipy.io.savemat(tmp_path / "x.mat", {"A": value})
    with one_line_error("is a MATLAB .* array; expected a full numeric matrix") as error:
        read_all(tmp_path / "x.mat", "A")
    assert_one_line(error, "x.mat", "'A'")


def test_a_damaged_mat_v73_file_is_refused_as_hdf5(tmp_path):
    # v7.3 files are read as HDF5 (tests/data/test_hdf5_files.py); a header followed by no valid
    # HDF5 structure is one line.
    header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 2024 HDF5 schema"
    (tmp_path / "x.mat").write_bytes(header.ljust(512, b" ") + b"\x89HDF\r\n\x1a\n" + bytes(64))
    with one_line_error("corrupt, truncated or not an HDF5 file .*; expected a MATLAB v7") as error:
        open_vectors(tmp_path / "x.mat")
    assert_one_line(error, "x.mat")


def test_mat_element_of_unknown_type_is_refused_before_scipy_would_crash(tmp_path, features):
    # scipy's compiled reader segfaults on an unknown element type (found by the property
    # tests): the structure check must refuse it first.
    path = write_any(tmp_path / "x.mat", features)
    data = bytearray(path.read_bytes())
    real_part_tag = data.index(struct.pack("<II", 7, features.nbytes))  # miSINGLE, 37 x 5 x 4
    data[real_part_tag] = 0x87
    path.write_bytes(bytes(data))
    with one_line_error("corrupt or unreadable .mat file \\(unknown data type 135 at byte"):
        read_all(path)


@pytest.mark.parametrize("variables, flags_word, flip", [
    ({"X": np.eye(3)}, struct.pack("<II", 6, 0), 0x08),  # double flagged complex, no imaginary
    ({"X": np.eye(3), "t": "abc"}, struct.pack("<II", 4, 0), 0x01),  # char turned sparse
    ({"X": np.eye(3), "s": scipy.sparse.eye(3, format="csc")}, struct.pack("<II", 5, 3), 0x08),
])
def test_mat_flags_inconsistent_with_the_data_are_refused(tmp_path, variables, flags_word, flip):
    # Each of these one-bit changes to an array-flags word segfaults scipy's reader.
    scipy.io.savemat(tmp_path / "x.mat", variables)
    data = bytearray((tmp_path / "x.mat").read_bytes())
    flags = data.index(struct.pack("<II", 6, 8) + flags_word) + 8  # miUINT32 tag, then flags
    data[flags + (1 if flip == 0x08 else 0)] ^= flip
    (tmp_path / "x.mat").write_bytes(bytes(data))
    with one_line_error("corrupt or unreadable .mat file \\(.* has \\d data parts; its flags"):
        read_all(tmp_path / "x.mat", "X")


def test_mat_complex_values_are_refused_not_truncated_to_real(tmp_path):
    scipy.io.savemat(tmp_path / "x.mat", {"X": np.ones((2, 2)) + 1j})
    with one_line_error("key 'X' holds complex values; expected real numbers"):
        read_all(tmp_path / "x.mat", "X")


def test_truncated_and_corrupt_npy(tmp_path, features):
    path = write_any(tmp_path / "x.npy", features)
    data = path.read_bytes()
    path.write_bytes(data[:-7])
    with one_line_error("truncated .npy file") as error:
        open_vectors(path)
    assert_one_line(error, "(37, 5)")
    path.write_bytes(b"\x93NUMPY\x01\x00\x10\x00{'descr': garbage}")
    with one_line_error("not a valid .npy file"):
        open_vectors(path)
    path.write_bytes(b"hello")
    with one_line_error("not a valid .npy file"):
        open_vectors(path)


def test_truncated_and_corrupt_npz(tmp_path, features):
    path = tmp_path / "x.npz"
    np.savez_compressed(path, X=features)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with one_line_error("corrupt or truncated .npz file") as error:
        open_vectors(path, "X")
    assert_one_line(error, path)
    # A flipped byte far inside a member: the header still reads, the data fails its CRC.
    with zipfile.ZipFile(tmp_path / "y.npz", "w", zipfile.ZIP_STORED) as archive:
        with archive.open("X.npy", "w") as member:
            np.lib.format.write_array(member, np.tile(features, (100, 1)))
    corrupt = bytearray((tmp_path / "y.npz").read_bytes())
    corrupt[50_000] ^= 0xFF  # inside the 74,000 bytes of float data
    (tmp_path / "y.npz").write_bytes(bytes(corrupt))
    vectors = open_vectors(tmp_path / "y.npz", "X")
    with one_line_error("key 'X' is corrupt or truncated in the .npz file") as error:
        vectors.read(0, 1)
    assert_one_line(error, "y.npz", "'X'")


def test_corrupt_and_truncated_mat(tmp_path, features):
    path = write_any(tmp_path / "x.mat", features)
    data = path.read_bytes()
    for broken in (data[:100], data[: len(data) // 2], b"not a mat file at all" * 10):
        path.write_bytes(broken)
        with one_line_error("corrupt or unreadable .mat file|no key|holds several|expected a"):
            read_all(path, "X")


@pytest.mark.parametrize("suffix", list(TEXMEX_DTYPES))
def test_texmex_size_not_a_multiple_of_the_row_size(tmp_path, suffix):
    path = write_texmex(tmp_path / f"x{suffix}", np.ones((4, 3)))
    path.write_bytes(path.read_bytes()[:-1])
    row_bytes = 4 + 3 * np.dtype(TEXMEX_DTYPES[suffix]).itemsize
    with one_line_error("is not a multiple of the row size") as error:
        open_vectors(path)
    assert_one_line(error, path, f"= {row_bytes} bytes")


def test_texmex_inconsistent_row_dimensions_name_the_row(tmp_path):
    # Same byte size per row would hide a wrong dimension from the size check: read finds it.
    path = write_texmex(tmp_path / "x.fvecs", np.ones((6, 3)), dims=[3, 3, 3, 7, 3, 3])
    vectors = open_vectors(path)
    np.testing.assert_array_equal(vectors.read(0, 3), np.ones((3, 3)))
    with one_line_error("row 3 declares dimension 7 but the first row declares 3") as error:
        vectors.read(2, 5)
    assert_one_line(error, path)
    write_texmex(path, np.ones((6, 3)), dims=[3, 3, 3, 3, 3, 2])
    with one_line_error("row 5 declares dimension 2"):
        open_vectors(path)  # the last row is checked on open


@pytest.mark.parametrize("content", [b"", b"\x01\x00", (0).to_bytes(4, "little") * 3,
                                     (-5).to_bytes(4, "little", signed=True) + bytes(20),
                                     (10**6).to_bytes(4, "little") + bytes(40)])
def test_texmex_empty_short_or_impossible_first_dimension(tmp_path, content):
    (tmp_path / "x.bvecs").write_bytes(content)
    with one_line_error("empty|truncated|declares dimension") as error:
        open_vectors(tmp_path / "x.bvecs")
    assert_one_line(error, "x.bvecs")


def test_a_file_that_shrinks_after_open_is_reported_as_truncated(tmp_path, features):
    for suffix in (".npy", ".fvecs"):
        path = write_any(tmp_path / f"x{suffix}", features)
        vectors = open_vectors(path)
        path.write_bytes(path.read_bytes()[:200])
        with one_line_error("truncated"):
            vectors.read(30, 37)


# --- conversion to float32 ----------------------------------------------------------------------

def test_conversions_are_stated():
    pixels = np.array([[0, 128, 255]], np.uint8)
    converted, conversion = as_float32_features(pixels, "f.npy", None)
    assert conversion == "uint8 / 255"
    np.testing.assert_array_equal(converted, pixels.astype(np.float32) / np.float32(255))
    assert as_float32_features(np.ones((1, 2), np.int16), "f", None)[1] == "int16 -> float32"
    assert as_float32_features(np.ones((1, 2), bool), "f", None)[1] == "bool -> float32"
    assert as_float32_features(np.ones((1, 2), np.float64), "f", None)[1] == "float64 -> float32"
    same = np.ones((1, 2), np.float32)
    converted, conversion = as_float32_features(same, "f", None)
    assert conversion == "float32 as stored" and converted.dtype == np.float32


def test_nan_and_inf_report_count_and_global_first_position():
    rows = np.zeros((4, 3), np.float32)
    rows[2, 1], rows[3, 0] = np.nan, np.inf
    with one_line_error("has 2 NaN/Inf values \\(first at row 102, column 1: nan\\) in rows "
                        "100..103 read as float32") as error:
        as_float32_features(rows, "data.npz", "X_train", first_row=100)
    assert_one_line(error, "data.npz", "'X_train'")
    with one_line_error("1e\\+300, beyond float32's range"):
        as_float32_features(np.array([[1.0, 1e300]]), "f.npy", None)
    with one_line_error("non-numeric dtype"):
        as_float32_features(np.array([["a"]]), "f.npy", None)


def test_read_float32_converts_chunk_by_chunk_with_global_positions(tmp_path, features):
    vectors = open_vectors(write_any(tmp_path / "x.fvecs", features))
    converted, conversion = read_float32(vectors, chunk_rows=4)
    np.testing.assert_array_equal(converted, features)
    assert conversion == "float32 as stored"
    features[30, 2] = np.nan
    vectors = open_vectors(write_any(tmp_path / "x.fvecs", features))
    with one_line_error("has 1 NaN/Inf values \\(first at row 30, column 2: nan\\) in rows "
                        "28..31"):
        read_float32(vectors, chunk_rows=4)


def test_uint8_beside_other_dtypes_is_refused_as_a_scale_mismatch():
    require_same_scaling("base.bvecs", np.uint8, "learn.bvecs", np.uint8)
    require_same_scaling("base.fvecs", np.float32, "query.ivecs", np.int32)
    with one_line_error("query.fvecs is converted as 'float32 as stored' but base.bvecs as "
                        "'uint8 / 255'"):
        require_same_scaling("base.bvecs", np.uint8, "query.fvecs", np.float32)


# --- property tests: any array, any bytes -> correct data or UserInputError ---------------------

PROPERTY_SETTINGS = settings(max_examples=40, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow])
NUMERIC = st.sampled_from(["f4", "f8", "u1", "i4", "i8", "u2", "?"])
ODD = st.sampled_from(["f2", ">f4", "c8", "U3", "O", "M8[s]"])


def _open_and_read_all(path, key=None):
    """The loader's whole contract: return the data or raise UserInputError, nothing else."""
    try:
        vectors = open_vectors(path, key)
        data = vectors.read(0, len(vectors))
    except UserInputError as error:
        assert str(error) and "\n" not in str(error)
        return None
    assert data.shape == vectors.shape and data.dtype == vectors.dtype
    return data


@PROPERTY_SETTINGS
@given(array=st.one_of(NUMERIC, ODD).flatmap(lambda dtype: hnp.arrays(
           dtype, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5),
           # object arrays hold plain ints: the loader must refuse them whatever they hold
           elements=st.integers(0, 9) if dtype == "O" else None)),
       suffix=st.sampled_from([".npy", ".npz"]))
def test_any_array_saved_as_npy_or_npz_is_returned_exactly_or_refused(array, suffix):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"x{suffix}"
        if suffix == ".npy":
            np.save(path, array, allow_pickle=True)
        else:
            np.savez(path, X=array)
        data = _open_and_read_all(path)
    valid = (array.ndim == 2 and array.size > 0 and array.dtype.kind in "biuf")
    assert (data is not None) == valid
    if valid:
        np.testing.assert_array_equal(data, array)


@PROPERTY_SETTINGS
@given(array=hnp.arrays(st.sampled_from(["f4", "f8", "u1", "i4", "?"]),
                        hnp.array_shapes(min_dims=2, max_dims=3, min_side=0, max_side=4)))
def test_any_array_saved_as_mat_is_returned_exactly_or_refused(array):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "x.mat"
        scipy.io.savemat(path, {"X": array})
        data = _open_and_read_all(path, "X")
    if array.ndim == 2 and array.size > 0:
        np.testing.assert_array_equal(data, array)
    else:
        assert data is None


@PROPERTY_SETTINGS
@given(values=hnp.arrays("f4", hnp.array_shapes(min_dims=2, max_dims=2, max_side=6),
                         elements=st.floats(width=32)),
       suffix=st.sampled_from(list(TEXMEX_DTYPES)), cut=st.integers(0, 400))
def test_texmex_round_trips_or_truncations_are_refused(values, suffix, cut):
    expected = values if suffix == ".fvecs" else (
        np.nan_to_num(values, posinf=255, neginf=0).clip(0, 255).astype(TEXMEX_DTYPES[suffix]))
    with tempfile.TemporaryDirectory() as folder:
        path = write_texmex(Path(folder) / f"x{suffix}", expected)
        data = path.read_bytes()
        np.testing.assert_array_equal(_open_and_read_all(path), expected)
        kept = max(0, len(data) - cut)
        path.write_bytes(data[:kept])
        truncated = _open_and_read_all(path)
    row_bytes = len(data) // len(expected)
    if kept % row_bytes or kept == 0:
        assert truncated is None
    else:  # cut at a row boundary: a valid shorter file
        np.testing.assert_array_equal(truncated, expected[: kept // row_bytes])


@PROPERTY_SETTINGS
@given(content=st.binary(max_size=300), suffix=st.sampled_from(ACCEPTED_SUFFIXES),
       key=st.sampled_from([None, "X"]))
def test_random_bytes_are_refused_or_read_consistently(content, suffix, key):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"x{suffix}"
        path.write_bytes(content)
        _open_and_read_all(path, key)


@PROPERTY_SETTINGS
@given(suffix=st.sampled_from(ACCEPTED_SUFFIXES), position=st.floats(0, 1),
       flip=st.integers(1, 255), cut=st.booleans())
def test_corrupted_valid_files_are_refused_or_read_consistently(suffix, position, flip, cut):
    array = (np.arange(40).reshape(8, 5) % 13).astype(TEXMEX_DTYPES.get(suffix, np.float32))
    with tempfile.TemporaryDirectory() as folder:
        path = write_any(Path(folder) / f"x{suffix}", array)
        damage(path, position, flip, cut)
        _open_and_read_all(path, "X" if suffix in (".npz", ".mat") else None)
