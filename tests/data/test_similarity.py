"""`dataset.similarity` (`sgh.data.similarity`): resolved once per split, angular features
unit-normalised at load time in every format, in memory and streamed alike, and every mistake one
line."""

import numpy as np
import pytest

from sgh.artifacts.ground_truth_cache import features_digest
from sgh.config import FileDatasetConfig, SyntheticDatasetConfig, validate
from sgh.data import load_split
from sgh.data.similarity import normalise_in_place, resolve_similarity, unit_normalised
from sgh.data.split import training_set_split
from sgh.data.streamed_features import StreamedFeatures, take_rows
from sgh.data.vector_files import open_vectors
from sgh.errors import UserInputError
from tests.helpers import compose_config
from tests.helpers_vector_files import write_texmex

RNG = np.random.default_rng(0)
BASE = RNG.normal(0.5, 2.0, (200, 5)).astype(np.float32)
QUERY = RNG.normal(0.5, 2.0, (7, 5)).astype(np.float32)


def unit(rows):
    """The definition: float32 row / its float64 L2 norm, rounded once."""
    wide = rows.astype(np.float64)
    return (wide / np.linalg.norm(wide, axis=1, keepdims=True)).astype(np.float32)


def _message(call, *args) -> str:
    with pytest.raises(UserInputError) as error:
        call(*args)
    assert "\n" not in str(error.value)
    return str(error.value)


def test_auto_takes_what_the_file_states_else_euclidean():
    assert resolve_similarity("auto") == "euclidean"
    assert resolve_similarity("auto", "inner_product", "f.hdf5: attribute distance='dot'") == (
        "inner_product")
    assert resolve_similarity("angular", "angular", "...") == "angular"
    assert resolve_similarity("inner_product") == "inner_product"
    assert "accepted: auto, euclidean, angular, inner_product" in _message(
        resolve_similarity, "cosine")
    assert _message(resolve_similarity, "euclidean", "angular",
                    "f.hdf5: attribute distance='angular'").startswith(
        "dataset.similarity=euclidean contradicts f.hdf5: attribute distance='angular'")


def test_the_setting_is_checked_with_the_others():
    for dataset in ("synthetic", "mnist"):
        config = compose_config(f"dataset={dataset}", "dataset.similarity=cosine")
        assert "dataset.similarity='cosine' is not known; accepted: auto, euclidean, angular, " \
               "inner_product" in _message(validate, config)
    assert compose_config("dataset.similarity=inner_product").dataset.similarity == (
        "inner_product")


def test_unit_normalisation_and_its_zero_rows():
    np.testing.assert_array_equal(unit_normalised(BASE, "x.npy"), unit(BASE))
    in_place = BASE.copy()
    assert normalise_in_place(in_place, "x.npy") is in_place
    np.testing.assert_array_equal(in_place, unit(BASE))
    zeros = BASE.copy()
    zeros[[13, 150]] = 0
    assert _message(normalise_in_place, zeros, "data.npz: key 'X_train'").startswith(
        "data.npz: key 'X_train': row 13 is all zeros, which has no direction")
    rows = np.arange(100, 200)
    assert "row 150 is all zeros" in _message(unit_normalised, zeros[100:], "f", rows)


def test_angular_normalises_every_split_of_a_named_array_file(tmp_path):
    labels = RNG.integers(0, 3, 200)
    np.savez(tmp_path / "d.npz", X_train=BASE[:150], y_train=labels[:150], X_test=BASE[150:],
             y_test=labels[150:])
    split = load_split(FileDatasetConfig(name="d", path=str(tmp_path / "d.npz"), n_queries=10,
                                         similarity="angular"))
    plain = load_split(FileDatasetConfig(name="d", path=str(tmp_path / "d.npz"), n_queries=10))
    assert (split.similarity, plain.similarity) == ("angular", "euclidean")
    for field in ("train", "database", "query"):
        np.testing.assert_array_equal(getattr(split, field), unit(getattr(plain, field)))
    assert split.feature_conversion == "float32 as stored, then unit-normalised (angular)"
    # The validation split keeps the similarity (and the already normalised features).
    assert training_set_split(split, 5).similarity == "angular"
    inner = load_split(FileDatasetConfig(name="d", path=str(tmp_path / "d.npz"), n_queries=10,
                                         similarity="inner_product"))
    assert inner.similarity == "inner_product"
    np.testing.assert_array_equal(inner.database, plain.database)


def test_angular_streams_the_same_unit_vectors_as_it_loads(tmp_path):
    write_texmex(tmp_path / "toy_base.fvecs", BASE)
    write_texmex(tmp_path / "toy_query.fvecs", QUERY)
    write_texmex(tmp_path / "toy_learn.fvecs", BASE[::2])
    settings = dict(name="toy", path=str(tmp_path / "toy_base.fvecs"), similarity="angular")
    loaded = load_split(FileDatasetConfig(**settings, streaming="never"))
    streamed = load_split(FileDatasetConfig(**settings, streaming="always"))
    np.testing.assert_array_equal(loaded.database, unit(BASE))
    np.testing.assert_array_equal(loaded.train, unit(BASE[::2]))
    np.testing.assert_array_equal(loaded.query, unit(QUERY))
    for field in ("train", "database"):
        features = getattr(streamed, field)
        assert isinstance(features, StreamedFeatures) and features.unit_normalise
        np.testing.assert_array_equal(features.load(), getattr(loaded, field))
        ids = RNG.integers(0, len(features), 50)
        np.testing.assert_array_equal(take_rows(features, ids), getattr(loaded, field)[ids])
        hidden = features.without([0, 3])  # validation's held-out rows keep the normalisation
        np.testing.assert_array_equal(hidden.load(), np.delete(getattr(loaded, field), [0, 3], 0))
    assert streamed.feature_conversion == loaded.feature_conversion == (
        "float32 as stored, then unit-normalised (angular)")
    # ...so the ground-truth cache of one serves the other.
    assert features_digest(streamed.query, streamed.database, "angular") == features_digest(
        loaded.query, loaded.database, "angular")


def test_a_zero_row_is_named_by_its_file_and_row(tmp_path):
    base = BASE.copy()
    base[77] = 0
    write_texmex(tmp_path / "toy_base.fvecs", base)
    write_texmex(tmp_path / "toy_query.fvecs", QUERY)
    dataset = FileDatasetConfig(name="toy", path=str(tmp_path / "toy_base.fvecs"),
                                similarity="angular")
    assert _message(load_split, dataset).startswith(
        f"{tmp_path / 'toy_base.fvecs'}: row 77 is all zeros")
    streamed = StreamedFeatures(open_vectors(tmp_path / "toy_base.fvecs"), unit_normalise=True)
    assert "toy_base.fvecs: row 77 is all zeros" in _message(streamed.take, [5, 77, 100])
    # Euclidean and inner-product search take zero rows as they are.
    dataset.similarity = "inner_product"
    assert load_split(dataset).database[77].sum() == 0


def test_synthetic_data_takes_the_setting_too():
    split = load_split(SyntheticDatasetConfig(n_train=100, n_test=30, n_queries=10,
                                              similarity="angular"))
    assert split.similarity == "angular"
    np.testing.assert_allclose(np.linalg.norm(split.database, axis=1), 1, rtol=1e-6)
    assert split.feature_conversion.endswith(", then unit-normalised (angular)")
    assert load_split(SyntheticDatasetConfig(n_train=100, n_test=30)).similarity == "euclidean"
