"""ANN datasets kept as one array per file: the database at `dataset.path` and its companions,
given or found by texmex name (docs/guide/data.md, "One array per file"). All headers are
checked before any data is read, except that a database in a format read whole is read first.
"""

from __future__ import annotations

from pathlib import Path

from sgh.data.feature_conversion import conversion_of, read_float32, require_same_scaling
from sgh.data.npz_file import groundtruth as checked_groundtruth
from sgh.data.similarity import conversion_with, normalise_in_place
from sgh.data.split import RetrievalSplit, ann_split
from sgh.data.streamed_features import Features, StreamedFeatures, choose_streaming
from sgh.data.vector_file import VectorFile
from sgh.data.vector_files import WholeArrayVectors, open_vectors, refuse_special_file
from sgh.errors import UserInputError

TEXMEX_BASE_SUFFIX = "_base"
SETTINGS = {"query": "dataset.query_path", "groundtruth": "dataset.groundtruth_path",
            "learn": "dataset.learn_path"}


def refuse_companion_paths(dataset, what: str) -> None:
    """Refuse the `dataset.*_path` settings (companions of a single-array database) for a file
    that holds its queries itself (`what` says what it holds)."""
    for role, setting in SETTINGS.items():
        value = getattr(dataset, f"{role}_path", None)
        if value is not None:
            raise UserInputError(f"{setting}={value} applies when dataset.path holds one array; "
                                 f"{what}")


def has_texmex_name(path: Path) -> bool:
    """Whether the file is named `<name>_base<ext>`, the texmex database."""
    return path.stem.endswith(TEXMEX_BASE_SUFFIX)


def companion_paths(dataset, base: Path) -> dict[str, Path | None]:
    """The file of each role (query, groundtruth, learn), or None where there is none."""
    prefix = base.stem[: -len(TEXMEX_BASE_SUFFIX)] if has_texmex_name(base) else None
    siblings = {"query": f"{prefix}_query{base.suffix}",
                "groundtruth": f"{prefix}_groundtruth.ivecs",
                "learn": f"{prefix}_learn{base.suffix}"}
    paths: dict[str, Path | None] = dict.fromkeys(SETTINGS)
    for role, setting in SETTINGS.items():
        explicit = getattr(dataset, setting.split(".")[1])
        if explicit is not None:
            paths[role] = Path(explicit).expanduser()
            refuse_special_file(paths[role], setting)
            if not paths[role].exists():
                raise UserInputError(f"{setting}={explicit}: no such file")
        elif prefix is not None and (base.parent / siblings[role]).exists():
            paths[role] = base.parent / siblings[role]
    if paths["query"] is None:
        hint = (f"expected its queries in {base.parent / siblings['query']} (texmex naming)"
                if prefix is not None else
                f"name the files <name>{TEXMEX_BASE_SUFFIX}{base.suffix} and "
                f"<name>_query{base.suffix} (texmex naming)")
        raise UserInputError(f"{base}: holds one array, read as the database; {hint}, or give "
                             "the queries with dataset.query_path=FILE")
    return paths


def loaded_features(vectors: VectorFile, similarity: str, streamed: bool = False,
                    reader: str = "mmap") -> Features:
    """The float32 features of `vectors`, in memory or streamed, unit-normalised for angular."""
    angular = similarity == "angular"
    if streamed:
        return StreamedFeatures(vectors, unit_normalise=angular, reader=reader)
    rows = read_float32(vectors)[0]
    return normalise_in_place(rows, vectors.where) if angular else rows


def load_ann_files(dataset, base_path: Path, similarity: str = "euclidean") -> RetrievalSplit:
    """The protocol-C split of the database at `base_path` and its companion files."""
    base = open_vectors(base_path)  # first: a directory, a bad extension, ... is said as such
    if isinstance(base, WholeArrayVectors):
        # Read whole anyway (.npz, .mat): its corruption is reported before missing companions.
        base.read(0, 1)
    paths = companion_paths(dataset, base_path)
    files = {"query": open_vectors(paths["query"])}
    if paths["learn"] is not None:
        files["learn"] = open_vectors(paths["learn"])
    for vectors in files.values():
        if vectors.shape[1] != base.shape[1]:
            raise UserInputError(f"{vectors.where} has {vectors.shape[1]} features per item but "
                                 f"the database ({base.where}) has {base.shape[1]}; all splits "
                                 "must agree")
        require_same_scaling(f"the database ({base.where})", base.dtype, vectors.where,
                             vectors.dtype)
    truth_file = None
    if paths["groundtruth"] is not None:
        truth_file = open_vectors(paths["groundtruth"])
        if len(truth_file) != len(files["query"]):
            raise UserInputError(
                f"{truth_file.path}: has {len(truth_file)} rows of ground truth but "
                f"{files['query'].path} has {len(files['query'])} queries; they must match")

    query = loaded_features(files["query"], similarity)
    learn_file = files.get("learn")
    streamed = choose_streaming(dataset.streaming,
                                [base] if learn_file is None else [base, learn_file])
    base_features = loaded_features(base, similarity, streamed, dataset.stream_reader)
    learn = (None if learn_file is None
             else loaded_features(learn_file, similarity, streamed, dataset.stream_reader))
    truth = None
    if truth_file is not None:
        truth = checked_groundtruth(truth_file.path, truth_file.read(0, len(truth_file)),
                                    len(query), len(base_features), key=None)
    conversion = conversion_with(conversion_of(base.dtype), similarity)
    return ann_split(dataset.name, base_features, query, truth, learn, conversion, similarity)
