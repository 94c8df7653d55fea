"""Datasets in every vector-file format: the texmex ANN layout (`<name>_base.fvecs` and its
siblings), explicit companion paths, `.mat` files of named arrays, and one clear line for every
inconsistency between the files."""


import numpy as np
import pytest
import scipy.io

from sgh.config import FileDatasetConfig
from sgh.data import load_split, load_split_and_files
from sgh.errors import UserInputError
from tests.helpers import SHARED_DATA, assert_same_split, labelled_arrays
from tests.helpers_vector_files import write_texmex

SIFTSMALL = SHARED_DATA / "siftsmall"


def _dataset(path, **overrides):
    return FileDatasetConfig(**{"name": "test", "path": str(path), **overrides})


@pytest.mark.skipif(not SIFTSMALL.is_dir(), reason="needs ../shared/data/siftsmall")
def test_siftsmall_fvecs_route_gives_the_npz_split():
    from_texmex = load_split(_dataset(SIFTSMALL / "siftsmall_base.fvecs"))
    from_npz = load_split(_dataset(SIFTSMALL / "siftsmall.npz"))
    assert_same_split(from_texmex, from_npz)
    assert from_texmex.groundtruth.shape == (100, 100)  # the sibling .ivecs was found


@pytest.fixture
def ann(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (50, 8)).astype(np.uint8)
    query = rng.integers(0, 256, (4, 8)).astype(np.uint8)
    learn = rng.integers(0, 256, (30, 8)).astype(np.uint8)
    truth = np.argsort(((query[:, None].astype(float) - base[None]) ** 2).sum(-1), 1)[:, :10]
    return tmp_path, base, query, learn, truth.astype(np.int32)


def test_texmex_siblings_are_found_by_name(ann):
    folder, base, query, learn, truth = ann
    for name, array in (("base", base), ("query", query), ("learn", learn)):
        write_texmex(folder / f"toy_{name}.bvecs", array)
    write_texmex(folder / "toy_groundtruth.ivecs", truth)
    split, files = load_split_and_files(_dataset(folder / "toy_base.bvecs"))
    assert files == {"dataset.path": folder / "toy_base.bvecs",  # as a run records them
                     "dataset.query_path": folder / "toy_query.bvecs",
                     "dataset.groundtruth_path": folder / "toy_groundtruth.ivecs",
                     "dataset.learn_path": folder / "toy_learn.bvecs"}
    np.testing.assert_array_equal(split.database, base.astype(np.float32) / np.float32(255))
    np.testing.assert_array_equal(split.query, query.astype(np.float32) / np.float32(255))
    np.testing.assert_array_equal(split.train, learn.astype(np.float32) / np.float32(255))
    np.testing.assert_array_equal(split.groundtruth, truth)
    assert split.feature_conversion == "uint8 / 255"
    assert split.protocol.endswith("training set = learn")


def test_optional_siblings_may_be_absent(ann):
    folder, base, query, *_ = ann
    write_texmex(folder / "toy_base.fvecs", base)
    write_texmex(folder / "toy_query.fvecs", query)
    split = load_split(_dataset(folder / "toy_base.fvecs"))
    assert split.groundtruth is None and split.train is split.database
    assert split.feature_conversion == "float32 as stored"


def test_explicit_paths_in_any_format(ann):
    folder, base, query, learn, truth = ann
    np.save(folder / "db.npy", base.astype(np.float64))
    scipy.io.savemat(folder / "q.mat", {"queries": query.astype(np.float64)})
    np.savez(folder / "learn.npz", anything=learn.astype(np.int16))
    np.save(folder / "gt.npy", truth.astype(np.float64))  # whole-valued floats are accepted
    split, files = load_split_and_files(_dataset(
        folder / "db.npy", query_path=str(folder / "q.mat"), learn_path=str(folder / "learn.npz"),
        groundtruth_path=str(folder / "gt.npy")))
    assert files == {"dataset.path": folder / "db.npy", "dataset.query_path": folder / "q.mat",
                     "dataset.groundtruth_path": folder / "gt.npy",
                     "dataset.learn_path": folder / "learn.npz"}
    np.testing.assert_array_equal(split.query, query.astype(np.float32))
    np.testing.assert_array_equal(split.train, learn.astype(np.float32))
    np.testing.assert_array_equal(split.groundtruth, truth)
    assert split.feature_conversion == "float64 -> float32"


def test_mat_file_of_named_arrays_gives_the_npz_split(tmp_path):
    rng = np.random.default_rng(1)
    arrays = {"X_train": rng.normal(size=(40, 6)), "y_train": rng.integers(0, 3, 40),
              "X_test": rng.normal(size=(12, 6)), "y_test": rng.integers(0, 3, 12)}
    np.savez(tmp_path / "d.npz", **arrays)
    # MATLAB keeps labels as double column vectors: accepted as whole-valued ids.
    scipy.io.savemat(tmp_path / "d.mat", {**arrays, "y_train": arrays["y_train"][:, None] * 1.0,
                                          "y_test": arrays["y_test"][None, :] * 1.0})
    from_mat, files = load_split_and_files(_dataset(tmp_path / "d.mat", n_queries=5))
    assert files == {"dataset.path": tmp_path / "d.mat"}  # it holds every split
    assert_same_split(from_mat, load_split(_dataset(tmp_path / "d.npz", n_queries=5)))
    # Extensions in any case, as every reader takes them.
    (tmp_path / "d.npz").rename(tmp_path / "upper.NPZ")
    assert_same_split(load_split(_dataset(tmp_path / "d.mat", n_queries=5)),
                       load_split(_dataset(tmp_path / "upper.NPZ", n_queries=5)))


def test_arrays_outside_the_layout_are_neither_read_nor_refused(tmp_path):
    # Arrays no reader takes beside a valid layout: an object (pickled) array in an .npz, a
    # complex variable in a .mat. The split is read from the layout's keys alone...
    arrays = labelled_arrays(40, 12, rng=np.random.default_rng(2))
    expected = _dataset(tmp_path / "plain.npz", n_queries=5)
    np.savez(expected.path, **arrays)
    expected = load_split(expected)
    np.savez(tmp_path / "notes.npz", **arrays, notes=np.array([None, {"a": 1}], dtype=object))
    scipy.io.savemat(tmp_path / "notes.mat", {**arrays, "notes": np.ones((2, 2)) * 1j})
    for name in ("notes.npz", "notes.mat"):
        assert_same_split(load_split(_dataset(tmp_path / name, n_queries=5)), expected)
    # ...which are refused as before when they hold the same.
    np.savez(tmp_path / "bad.npz", **{**arrays, "y_test": np.full(12, None, dtype=object)})
    assert _message(_dataset(tmp_path / "bad.npz")) == (
        f"{tmp_path / 'bad.npz'}: holds object (pickled) arrays, which are refused; save plain "
        "numeric arrays")
    scipy.io.savemat(tmp_path / "bad.mat", {**arrays, "X_test": arrays["X_test"] * 1j})
    assert _message(_dataset(tmp_path / "bad.mat")) == (
        f"{tmp_path / 'bad.mat'}: key 'X_test' holds complex values; expected real numbers "
        "(save real(X) or abs(X))")


def _message(dataset):
    with pytest.raises(UserInputError) as error:
        load_split(dataset)
    message = str(error.value)
    assert message and "\n" not in message
    return message


def test_missing_companions_say_which_file_is_expected(ann):
    folder, base, *_ = ann
    write_texmex(folder / "toy_base.fvecs", base)
    assert f"expected its queries in {folder / 'toy_query.fvecs'}" in _message(
        _dataset(folder / "toy_base.fvecs"))
    np.save(folder / "vectors.npy", base)
    assert "give the queries with dataset.query_path=FILE" in _message(
        _dataset(folder / "vectors.npy"))
    assert "dataset.learn_path=nowhere.npy: no such file" in _message(
        _dataset(folder / "toy_base.fvecs", query_path=str(folder / "toy_base.fvecs"),
                 learn_path="nowhere.npy"))


def test_inconsistent_companions_are_refused_before_reading_data(ann):
    folder, base, query, learn, truth = ann
    write_texmex(folder / "toy_base.fvecs", base)
    write_texmex(folder / "toy_query.fvecs", query[:, :5])
    assert "has 5 features per item but the database" in _message(
        _dataset(folder / "toy_base.fvecs"))
    write_texmex(folder / "toy_query.bvecs", query)
    message = _message(_dataset(folder / "toy_base.fvecs",
                                query_path=str(folder / "toy_query.bvecs")))
    assert "converted as 'uint8 / 255' but the database" in message
    write_texmex(folder / "toy_query.fvecs", query)
    write_texmex(folder / "toy_groundtruth.ivecs", truth[:3])
    assert "has 3 rows of ground truth but" in _message(_dataset(folder / "toy_base.fvecs"))
    write_texmex(folder / "toy_groundtruth.ivecs", truth + 45)
    assert "ids outside 0..49" in _message(_dataset(folder / "toy_base.fvecs"))


def test_named_array_files_refuse_companion_paths_and_mixed_scales(tmp_path):
    np.savez(tmp_path / "ann.npz", base=np.ones((5, 2)), query=np.ones((2, 2)))
    assert "dataset.query_path=q.npy applies when dataset.path holds one array" in _message(
        _dataset(tmp_path / "ann.npz", query_path="q.npy"))
    np.savez(tmp_path / "mixed.npz", base=np.ones((5, 2), np.uint8), query=np.ones((2, 2)))
    assert "key 'query' is converted as 'float64 -> float32' but" in _message(
        _dataset(tmp_path / "mixed.npz"))
    np.savez(tmp_path / "other.npz", a=np.ones((5, 2)), b=np.ones((2, 2)))
    assert "keys found: a, b; expected labelled" in _message(_dataset(tmp_path / "other.npz"))
    scipy.io.savemat(tmp_path / "labels.mat", {"X": np.ones((6, 2)), "y": np.full((6, 1), 0.5)})
    assert "key 'y' has dtype float64 with values that are not whole numbers" in _message(
        _dataset(tmp_path / "labels.mat", n_queries=2))
