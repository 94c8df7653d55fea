"""The validation split's ground truth follows the split's similarity (`carve(similarity=...)`):
model selection scores the neighbours the test will score."""

import numpy as np

from sgh.config import ValidationConfig
from sgh.data.streamed_features import StreamedFeatures
from sgh.data.vector_files import open_vectors
from sgh.training.holdout import carve

RNG = np.random.default_rng(0)
TRAIN = RNG.normal(0.3, 1.0, (1200, 8)).astype(np.float32)
CONFIG = ValidationConfig(queries=60, database=400)


def _best(validation, similarity):
    """Brute force on the validation items: sorted ids of each query's 5 best."""
    query, database = (validation.query.astype(np.float64),
                       validation.database.astype(np.float64))
    if similarity == "inner_product":
        keys = -(query @ database.T)
    else:
        keys = ((query[:, None] - database[None]) ** 2).sum(-1)
    return np.argsort(keys, axis=1, kind="stable")[:, :5]


def test_validation_ground_truth_is_by_the_splits_similarity():
    by_similarity = {}
    for similarity in ("euclidean", "inner_product"):
        _, validation = carve(TRAIN, CONFIG, recall_k=5, similarity=similarity)
        np.testing.assert_array_equal(validation.groundtruth, _best(validation, similarity))
        by_similarity[similarity] = validation
    assert "exact inner-product neighbours" in by_similarity["inner_product"].convention
    assert "exact Euclidean neighbours" in by_similarity["euclidean"].convention
    # Same items (the draw does not depend on the similarity), other neighbours.
    np.testing.assert_array_equal(by_similarity["euclidean"].query,
                                  by_similarity["inner_product"].query)
    assert not np.array_equal(by_similarity["euclidean"].groundtruth,
                              by_similarity["inner_product"].groundtruth)
    # The default is the paper's: Euclidean.
    _, default = carve(TRAIN, CONFIG, recall_k=5)
    np.testing.assert_array_equal(default.groundtruth, by_similarity["euclidean"].groundtruth)


def test_a_streamed_angular_training_set_validates_on_unit_vectors(tmp_path):
    np.save(tmp_path / "train.npy", TRAIN)
    streamed = StreamedFeatures(open_vectors(tmp_path / "train.npy"), unit_normalise=True)
    train_items, validation = carve(streamed, CONFIG, recall_k=5, similarity="angular")
    np.testing.assert_allclose(np.linalg.norm(validation.database, axis=1), 1, rtol=1e-6)
    np.testing.assert_array_equal(validation.groundtruth, _best(validation, "angular"))
    assert "exact angular neighbours" in validation.convention
    assert isinstance(train_items, StreamedFeatures) and train_items.unit_normalise
