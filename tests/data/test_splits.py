"""Datasets: the protocols' splits exactly, and one clear line for every malformed file."""


import numpy as np
import pytest

from sgh.cli.resources import BUNDLED_DATA_DIR
from sgh.config import FileDatasetConfig, SyntheticDatasetConfig
from sgh.data import load_split
from sgh.errors import UserInputError
from tests.helpers import SHARED_DATA, labelled_arrays

needs_shared = pytest.mark.skipif(not SHARED_DATA.is_dir(),
                                  reason="../shared/data is not beside the checkout")


def _dataset(path, **overrides):
    return FileDatasetConfig(**{"name": "test", "path": str(path), **overrides})


@pytest.mark.slow  # ~10 s: reads and splits the bundled MNIST
def test_protocol_a_on_bundled_mnist():
    split = load_split(_dataset(BUNDLED_DATA_DIR / "mnist" / "mnist.npz", name="mnist"))
    raw = np.load(BUNDLED_DATA_DIR / "mnist" / "mnist.npz")
    query_ids = np.random.default_rng(0).permutation(10000)[:1000]
    rest = np.setdiff1d(np.arange(10000), query_ids)  # remaining test items, original order
    assert split.train.shape == (60000, 784) and split.train.dtype == np.float32
    assert split.database.shape == (69000, 784) and split.query.shape == (1000, 784)
    np.testing.assert_array_equal(split.query, raw["X_test"][query_ids].astype(np.float32) / 255)
    np.testing.assert_array_equal(split.database[60000:],
                                  raw["X_test"][rest].astype(np.float32) / 255)
    np.testing.assert_array_equal(split.database_labels,
                                  np.concatenate([raw["y_train"], raw["y_test"][rest]]))
    np.testing.assert_array_equal(split.query_labels, raw["y_test"][query_ids])
    assert split.feature_conversion == "uint8 / 255" and split.groundtruth is None
    np.testing.assert_array_equal(split.train, raw["X_train"].astype(np.float32) / 255)
    # What the table prints says the order the database ids follow, not the queries' order.
    assert "database = train, then the remaining test items in index order" in split.protocol
    # The training set is the database's head, held once in memory.
    assert np.shares_memory(split.train, split.database[:60000])
    assert split.train.flags.c_contiguous


@needs_shared
def test_protocol_b_on_cifar10_gist_draws_100_queries_per_class():
    split = load_split(_dataset(SHARED_DATA / "cifar10_gist" / "cifar10_gist512.npz",
                                query_selection="per_class"))
    y_test = np.load(SHARED_DATA / "cifar10_gist" / "cifar10_gist512.npz")["y_test"]
    rng = np.random.default_rng(0)
    expected = np.concatenate([rng.permutation(np.nonzero(y_test == c)[0])[:100]
                               for c in range(10)])
    np.testing.assert_array_equal(split.query_labels, y_test[expected])
    assert np.bincount(split.query_labels).tolist() == [100] * 10
    assert split.database.shape == (59000, 512) and len(split.train) == 50000


@needs_shared
def test_protocol_c_on_siftsmall_keeps_the_file_ground_truth():
    split = load_split(_dataset(SHARED_DATA / "siftsmall" / "siftsmall.npz"))
    assert split.database.shape == (10000, 128) and split.query.shape == (100, 128)
    assert split.groundtruth.shape == (100, 100) and not split.has_labels
    assert split.train is split.database


@needs_shared
def test_pooled_layout_on_digits():
    split = load_split(_dataset(SHARED_DATA / "sklearn_digits" / "digits.npz", n_queries=200))
    assert len(split.query) == 200 and len(split.database) == 1797 - 200
    assert split.feature_conversion == "uint8 / 255"
    assert split.train is split.database  # one array, held once


def test_validation_split_mirrors_the_test_protocol_inside_the_training_set():
    config = SyntheticDatasetConfig(n_train=600, n_test=100, n_queries=30)
    test_split = load_split(config)
    config.split = "validation"
    validation = load_split(config)
    # 600 // 6 = 100 held out: 30 queries + 70 unseen database items; the model trains on 500.
    assert len(validation.query) == 30 and len(validation.train) == 500
    assert len(validation.database) == 570

    def rows(array):
        return {row.tobytes() for row in array}

    assert rows(validation.query) <= rows(test_split.train)  # carved from the training set
    assert not rows(validation.query) & rows(test_split.query)  # never the test queries
    assert not rows(validation.query) & rows(validation.train)  # unseen by training...
    assert not rows(validation.query) & rows(validation.database)
    unseen = rows(validation.database) - rows(validation.train)
    assert len(unseen) == 70  # ...like the test items of protocol A's database
    np.testing.assert_array_equal(validation.database[:500], validation.train)


def _write(tmp_path, name="data.npz", **arrays):
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


def test_integer_features_are_converted_and_the_conversion_is_stated(tmp_path):
    arrays = labelled_arrays()
    arrays["X_train"] = np.arange(80, dtype=np.int16).reshape(20, 4)
    arrays["X_test"] = np.arange(40, dtype=np.int16).reshape(10, 4)
    split = load_split(_dataset(_write(tmp_path, **arrays), n_queries=5))
    assert split.feature_conversion == "int16 -> float32"
    assert split.train.dtype == np.float32 and split.train[1, 0] == 4.0


def _bad_cases(tmp_path):
    """(path, what the one-line message must contain) for each malformed input."""
    nan = labelled_arrays()
    nan["X_train"][3, 2] = np.nan
    nan["X_train"][5, 0] = np.inf
    corrupt = tmp_path / "corrupt.npz"
    corrupt.write_bytes(b"PK\x03\x04 definitely not a zip archive")
    truncated = _write(tmp_path, "truncated.npz", **labelled_arrays(n_train=2000))
    truncated.write_bytes(truncated.read_bytes()[:3000])
    csv = tmp_path / "data.csv"
    csv.write_text("0,0\n")
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, X=np.array([{"a": 1}], dtype=object), y=np.zeros(1))
    return [
        (tmp_path / "missing.npz", "which does not exist"),
        (tmp_path, "is a directory"),
        (csv, "unknown extension '.csv'; accepted: .npy, .npz, .fvecs, .bvecs, .ivecs, .mat"),
        (corrupt, "corrupt or truncated"),
        (truncated, "corrupt or truncated"),
        (pickled, "object (pickled) arrays, which are refused"),
        (_write(tmp_path, "keys.npz", features=np.zeros((3, 2))),
         "keys found: features; expected labelled"),
        (_write(tmp_path, "dim.npz", **{**labelled_arrays(), "X_test": np.zeros((10, 5))}),
         "'X_test' has 5 features per item but the other splits have 4"),
        (_write(tmp_path, "labels.npz", **{**labelled_arrays(), "y_train": np.zeros(7, int)}),
         "'y_train' has 7 labels but 'X_train' has 20 items"),
        (_write(tmp_path, "empty.npz", **{**labelled_arrays(), "X_train": np.zeros((0, 4))}),
         "'X_train' has shape (0, 4); expected a non-empty 2-D array"),
        (_write(tmp_path, "text.npz", **{**labelled_arrays(), "X_train": np.full((20, 4), "a")}),
         "non-numeric dtype <U1"),
        (_write(tmp_path, "nan.npz", **nan),
         "'X_train' has 2 NaN/Inf values (first at row 3, column 2: nan)"),
        (_write(tmp_path, "gt.npz", base=np.zeros((5, 2)), query=np.zeros((2, 2)),
                groundtruth=np.array([[0, 1], [4, 5]])),
         "'groundtruth' has ids outside 0..4 (min 0, max 5; first at row 1: 5)"),
    ]


def test_every_malformed_file_gets_one_line_naming_the_problem(tmp_path):
    for path, expected in _bad_cases(tmp_path):
        with pytest.raises(UserInputError) as error:
            load_split(_dataset(path))
        message = str(error.value)
        assert expected in message, (path, message)
        assert "\n" not in message and str(path) in message


def test_missing_bundled_dataset_says_which_file_is_expected_where(tmp_path):
    with pytest.raises(UserInputError, match=r"expected the file .*cifar.npz.*SGH_DATA_DIR"):
        load_split(_dataset(tmp_path / "cifar10_gist" / "cifar.npz"))
