"""Datasets: from a config to the `RetrievalSplit` every method trains and is scored on."""

from __future__ import annotations

from pathlib import Path

from sgh.config import FileDatasetConfig, SyntheticDatasetConfig
from sgh.data import npz_file
from sgh.data.split import (
    RetrievalSplit,
    ann_split,
    labelled_split,
    pooled_split,
    validation_split,
)
from sgh.data.synthetic import gaussian_clusters
from sgh.errors import UserInputError

__all__ = ["RetrievalSplit", "load_split"]


def load_split(dataset: FileDatasetConfig | SyntheticDatasetConfig) -> RetrievalSplit:
    if isinstance(dataset, SyntheticDatasetConfig):
        x_train, y_train, x_test, y_test = gaussian_clusters(
            dataset.n_train, dataset.n_test, dataset.dim, dataset.n_classes, dataset.seed)
        split = labelled_split(dataset.name, x_train, y_train, x_test, y_test,
                               dataset.query_selection, dataset.n_queries,
                               f"synthetic Gaussian clusters, seed {dataset.seed}")
    else:
        split = _load_file(dataset)
    if len(split.train) < 2:
        raise UserInputError(f"dataset {dataset.name!r}: the training set has {len(split.train)} "
                             "items; at least 2 are needed")
    if dataset.split == "validation":
        split = validation_split(split, dataset.n_queries)
    return split


def _load_file(dataset: FileDatasetConfig) -> RetrievalSplit:
    path = Path(dataset.path).expanduser()
    if not path.exists():
        raise UserInputError(
            f"dataset {dataset.name!r}: expected the file {path.resolve()}, which does not exist; "
            "put it there, or point data_dir (or the SGH_DATA_DIR environment variable) at a "
            "folder laid out as <data_dir>/<dataset>/<file>, or pass dataset.path=FILE")
    arrays = npz_file.open_npz(path)
    layout = npz_file.detect_layout(path, arrays)
    if layout == "labelled":
        x_train, conversion = npz_file.features(path, "X_train", arrays["X_train"])
        x_test, _ = npz_file.features(path, "X_test", arrays["X_test"], x_train.shape[1])
        y_train = npz_file.labels(path, "y_train", arrays["y_train"], len(x_train), "X_train")
        y_test = npz_file.labels(path, "y_test", arrays["y_test"], len(x_test), "X_test")
        return labelled_split(dataset.name, x_train, y_train, x_test, y_test,
                              dataset.query_selection, dataset.n_queries, conversion)
    if layout == "pooled":
        x, conversion = npz_file.features(path, "X", arrays["X"])
        y = npz_file.labels(path, "y", arrays["y"], len(x), "X")
        if dataset.n_queries >= len(x):
            raise UserInputError(f"dataset.n_queries={dataset.n_queries} leaves no database in "
                                 f"{path} ({len(x)} items); accepted: fewer than {len(x)}")
        return pooled_split(dataset.name, x, y, dataset.n_queries, conversion)
    base, conversion = npz_file.features(path, "base", arrays["base"])
    query, _ = npz_file.features(path, "query", arrays["query"], base.shape[1])
    learn = None
    if "learn" in arrays:
        learn, _ = npz_file.features(path, "learn", arrays["learn"], base.shape[1])
    truth = None
    if "groundtruth" in arrays:
        truth = npz_file.groundtruth(path, arrays["groundtruth"], len(query), len(base))
    return ann_split(dataset.name, base, query, truth, learn, conversion)
