"""Datasets: from a config to the `RetrievalSplit` every method trains and is scored on.

A dataset section (`FileDatasetConfig`, or `SyntheticDatasetConfig`: no `path`) is read by its
fields, without importing `sgh.config`, which imports its similarities from here.
"""

from __future__ import annotations

from pathlib import Path

from sgh.data import npz_file
from sgh.data.ann_benchmarks import load_hdf5_split
from sgh.data.ann_files import (
    SETTINGS,
    companion_paths,
    has_texmex_name,
    load_ann_files,
    refuse_companion_paths,
)
from sgh.data.feature_conversion import require_same_scaling
from sgh.data.hdf5_files import HDF5_SUFFIXES
from sgh.data.similarity import conversion_with, normalise_in_place, resolve_similarity
from sgh.data.split import (
    RetrievalSplit,
    ann_split,
    labelled_split,
    pooled_split,
    training_set_split,
)
from sgh.data.streamed_features import StreamedFeatures
from sgh.data.synthetic import gaussian_clusters
from sgh.data.vector_files import list_keys, read_mat_arrays, refuse_special_file
from sgh.errors import UserInputError

__all__ = ["RetrievalSplit", "load_split", "load_split_and_files"]


def load_split(dataset) -> RetrievalSplit:
    """The dataset's `RetrievalSplit` (a ``config.dataset``)."""
    return load_split_and_files(dataset)[0]


def load_split_and_files(dataset) -> tuple[RetrievalSplit, dict[str, Path]]:
    """`load_split`, and the files it read by the setting that names them (a texmex sibling
    under the setting it stands in for; none for synthetic data): what a run records."""
    files: dict[str, Path] = {}
    if not hasattr(dataset, "path"):  # synthetic
        similarity = resolve_similarity(dataset.similarity)
        x_train, y_train, x_test, y_test = gaussian_clusters(
            dataset.n_train, dataset.n_test, dataset.dim, dataset.n_classes, dataset.seed)
        if similarity == "angular":
            normalise_in_place(x_train, f"dataset {dataset.name!r}: training items")
            normalise_in_place(x_test, f"dataset {dataset.name!r}: test items")
        split = labelled_split(dataset.name, x_train, y_train, x_test, y_test,
                               dataset.query_selection, dataset.n_queries,
                               conversion_with(f"synthetic Gaussian clusters, seed "
                                               f"{dataset.seed}", similarity), similarity)
    else:
        split, files = _load_file(dataset)
    if len(split.train) < 2:
        raise UserInputError(f"dataset {dataset.name!r}: the training set has {len(split.train)} "
                             "items; at least 2 are needed")
    if dataset.split == "validation":
        if isinstance(split.train, StreamedFeatures):
            raise UserInputError(
                f"dataset.split=validation reorders the training set in memory, and "
                f"{split.train.path} is streamed from disk; use the built-in model selection "
                "(validation.every, on by default) or dataset.streaming=never")
        split = training_set_split(split, dataset.n_queries)
    return split, files


def _load_file(dataset) -> tuple[RetrievalSplit, dict[str, Path]]:
    path = Path(dataset.path).expanduser()
    refuse_special_file(path, "dataset.path")
    if not path.exists():
        raise UserInputError(
            f"dataset {dataset.name!r}: expected the file {path.resolve()}, which does not exist; "
            "put it there, or point data_dir (or the SGH_DATA_DIR environment variable) at a "
            "folder laid out as <data_dir>/<dataset>/<file>, or, for your own file, pass "
            "dataset=file dataset.path=FILE")
    itself = {"dataset.path": path}  # a file that holds every split
    if not path.is_dir() and path.suffix.lower() in HDF5_SUFFIXES:
        return load_hdf5_split(dataset, path), itself  # ann-benchmarks: train, test, neighbors
    # No other format states a similarity: `auto` is euclidean.
    similarity = resolve_similarity(dataset.similarity)
    if path.is_dir() or path.suffix.lower() not in (".npz", ".mat"):
        return _load_single_arrays(dataset, path, similarity)  # one array per file (or an error)
    keys = list_keys(path)
    layout = npz_file.match_layout(keys)
    if layout is None:
        # One array is a database only when its queries are named: else more likely a misnamed
        # layout, and the message says both.
        if len(keys) == 1 and (dataset.query_path is not None or has_texmex_name(path)):
            return _load_single_arrays(dataset, path, similarity)
        raise UserInputError(f"{path}: keys found: {', '.join(sorted(keys)) or 'none'}; "
                             f"expected {npz_file.ACCEPTED_LAYOUTS}, or a single array (the "
                             "database, with dataset.query_path=FILE)")
    npz_file.refuse_mixed_layouts(path, layout, keys)
    if dataset.streaming == "always":
        raise UserInputError(f"dataset.streaming=always: {path} holds named arrays, which are "
                             "read whole; store the database (and training set) as single-array "
                             ".npy, .fvecs or .bvecs files (or an ann-benchmarks .hdf5 file), "
                             "or use dataset.streaming=auto")
    refuse_companion_paths(dataset, f"{path} holds the {layout} layout ({', '.join(keys)})")
    names = [key for key in npz_file.LAYOUT_KEYS[layout] if key in keys]
    return _load_named_arrays(dataset, path, layout, names, similarity), itself


def _load_single_arrays(dataset, path: Path, similarity: str):
    """The split of a single-array database and its companions, and those files."""
    split = load_ann_files(dataset, path, similarity)
    companions = companion_paths(dataset, path)
    return split, {"dataset.path": path, **{SETTINGS[role]: companion for role, companion
                                            in companions.items() if companion is not None}}


def _load_named_arrays(dataset, path: Path, layout: str, names: list[str],
                       similarity: str) -> RetrievalSplit:
    # Only the layout's arrays (`names`) are read: another array is neither read nor refused.
    arrays = (read_mat_arrays(path, names) if path.suffix.lower() == ".mat"
              else npz_file.read_npz_arrays(path, names))

    def features(key: str, reference: str | None = None):
        dim = None
        if reference is not None:
            require_same_scaling(f"{path}: key {reference!r}", arrays[reference].dtype,
                                 f"{path}: key {key!r}", arrays[key].dtype)
            dim = arrays[reference].shape[1]
        converted, conversion = npz_file.features(path, key, arrays[key], dim)
        if similarity == "angular":
            normalise_in_place(converted, f"{path}: key {key!r}")
        return converted, conversion_with(conversion, similarity)

    if layout == "labelled":
        x_train, conversion = features("X_train")
        x_test, _ = features("X_test", "X_train")
        y_train = npz_file.labels(path, "y_train", arrays["y_train"], len(x_train), "X_train")
        y_test = npz_file.labels(path, "y_test", arrays["y_test"], len(x_test), "X_test")
        return labelled_split(dataset.name, x_train, y_train, x_test, y_test,
                              dataset.query_selection, dataset.n_queries, conversion, similarity)
    if layout == "pooled":
        x, conversion = features("X")
        y = npz_file.labels(path, "y", arrays["y"], len(x), "X")
        if dataset.n_queries >= len(x):
            raise UserInputError(f"dataset.n_queries={dataset.n_queries} leaves no database in "
                                 f"{path} ({len(x)} items); accepted: fewer than {len(x)}")
        return pooled_split(dataset.name, x, y, dataset.n_queries, conversion, similarity)
    base, conversion = features("base")
    query, _ = features("query", "base")
    learn = features("learn", "base")[0] if "learn" in arrays else None
    truth = (npz_file.groundtruth(path, arrays["groundtruth"], len(query), len(base))
             if "groundtruth" in arrays else None)
    return ann_split(dataset.name, base, query, truth, learn, conversion, similarity)
