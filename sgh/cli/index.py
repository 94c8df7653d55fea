"""`sgh-index build|search`: build an `SGHIndex` from a run over a vector file, and query it.

`build` indexes the run's own database codes, or the vectors of `input` (ids = rows); `search`
writes ``D`` and ``I`` as `SGHIndex.search` returns them, and with ``groundtruth`` the results'
Recall10@N (printed, and in the results file). Vector files are read as `sgh-encode`
reads them. The guide: docs/guide/search.md.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from sgh.artifacts.atomic import atomic_file, refuse_to_replace
from sgh.artifacts.output_places import check_writable_place
from sgh.artifacts.run_directory import RunDirectory
from sgh.artifacts.run_outputs import refuse_a_run_file
from sgh.cli.boundary import exit_on_failure, print_help
from sgh.cli.input_scale import (
    refuse_another_scale,
    refuse_unscaled_rows,
    scaled,
    training_scale,
)
from sgh.config import INPUT_SCALES
from sgh.data.neighbours import exact_neighbours
from sgh.data.npz_file import groundtruth as groundtruth_ids
from sgh.data.npz_file import read_npz_arrays
from sgh.data.streamed_features import evenly_spaced
from sgh.data.vector_files import open_vectors
from sgh.errors import UserInputError, check_choice, check_int
from sgh.metrics.neighbour_recall import recall_of_results, results_recall_convention
from sgh.scores.byte_decoder import FIT_ROWS
from sgh.scores.score_set import ScoreSet
from sgh.search import sgh_index
from sgh.search.sgh_index import DECODERS, MODES, SAVED_INDEX, VALIDATION_QUERIES, SGHIndex

USAGE = ("usage: sgh-index build run=RUN_DIR out=INDEX_DIR [input=FILE [key=NAME]] [nlist=N] "
         "[mode=M] [decoder=model|bytes] [encoding=encoder|flipT|icmN|local_search] "
         "[input_scale=auto|none|uint8]\n"
         "       sgh-index search index=INDEX_DIR input=QUERIES [key=NAME] "
         "out=RESULTS.npz [k=100] [mode=M] [nprobe=N] [shortlist=S] [refine_factor=F] "
         "[groundtruth=FILE [groundtruth_key=NAME]] [input_scale=auto|none|uint8]")
# The keys of each action, with their defaults (None: required or unset).
KEYS = {"build": {"run": None, "out": None, "input": None, "key": None, "nlist": None,
                  "mode": "scan", "decoder": "model", "encoding": None, "batch_size": "65536",
                  "input_scale": "auto"},
        "search": {"index": None, "input": None, "key": None, "out": None, "k": "100",
                   "mode": None, "nprobe": None, "shortlist": None, "refine_factor": None,
                   "groundtruth": None, "groundtruth_key": None, "batch_size": "65536",
                   "input_scale": "auto"}}
REQUIRED = {"build": ("run", "out"), "search": ("index", "input", "out")}
# The results file's marker key: an existing out= is replaced only when it holds it.
RESULTS_MARKER = "sgh_index_results"
RECALL_K = 10  # Recall K@N: of each query's first K ground-truth neighbours, as the paper's
RECALL_CONVENTION = results_recall_convention(RECALL_K)


def parse_arguments(argv: list[str]) -> tuple[str, dict]:
    """``(action, settings)`` of ``sgh-index ACTION key=value ...``; UserInputError otherwise."""
    if not argv or argv[0] not in KEYS:
        raise UserInputError(f"the first argument is the action, build or search\n{USAGE}")
    action, settings = argv[0], dict(KEYS[argv[0]])
    for argument in argv[1:]:
        name, equals, value = argument.partition("=")
        if not equals or name not in settings:
            raise UserInputError(f"{argument!r} is not a setting of sgh-index {action}; "
                                 f"accepted: {', '.join(f'{key}=' for key in KEYS[action])}")
        settings[name] = value
    missing = [name for name in REQUIRED[action] if settings[name] is None]
    if missing:
        raise UserInputError(f"{', '.join(f'{name}=' for name in missing)} missing\n{USAGE}")
    for name in ("nlist", "k", "nprobe", "shortlist", "refine_factor", "batch_size"):
        if settings.get(name) is not None:
            try:
                value = int(settings[name])
            except ValueError:
                raise UserInputError(f"{name}={settings[name]} is impossible; accepted: an "
                                     "integer >= 1") from None
            settings[name] = check_int(name, value, 1)
    for name, accepted in (("mode", MODES), ("decoder", DECODERS)):
        if settings.get(name) not in (None, *accepted):
            raise UserInputError(f"{name}={settings[name]} is not known; accepted: "
                                 f"{', '.join(accepted)}")
    check_choice("input_scale", settings["input_scale"], INPUT_SCALES)
    return action, settings


def _batches(settings: dict, index: SGHIndex, where: str):
    """``(first row, total, float32 rows)`` of the ``input`` file, converted as the model's
    training features were; ``where``: the index's origin, for a refusal."""
    vectors = open_vectors(settings["input"], settings["key"])
    if vectors.shape[1] != index.dim:
        raise UserInputError(f"{vectors.where} has {vectors.shape[1]} features per vector but "
                             f"the model takes {index.dim}; give vectors of the kind it was "
                             "trained on")
    training = training_scale(index.scores.feature_conversion, settings["input_scale"], where)
    refuse_another_scale(vectors, training)
    for start in range(0, len(vectors), settings["batch_size"]):
        rows = vectors.read(start, min(start + settings["batch_size"], len(vectors)))
        features = scaled(rows, vectors, start, settings["input_scale"])[0]
        refuse_unscaled_rows(features, vectors.dtype, training, vectors.where, start)
        yield start, len(vectors), features


def build(settings: dict) -> SGHIndex:
    """The index of `build` (module doc), saved at ``out``."""
    out = Path(settings["out"])  # checked before minutes of work, and again by `save`
    refuse_a_run_file("out", out, "mnist.sghindex", runs=(settings["run"],))
    refuse_to_replace(out, SAVED_INDEX)
    check_writable_place("out", out, directory_wanted=True)
    if settings["input"] is None:
        try:
            index = SGHIndex.from_run(settings["run"], settings["mode"], settings["nlist"],
                                      settings["decoder"], settings["encoding"], verbose=True)
        except ValueError as error:
            raise UserInputError(str(error)) from None
    else:
        run = RunDirectory(settings["run"], create=False)
        try:
            index = SGHIndex(ScoreSet.of_run(run), settings["mode"], settings["nlist"],
                             settings["decoder"], settings["encoding"], verbose=True)
        except ValueError as error:
            raise UserInputError(str(error)) from None
        try:  # the vectors' values (off scale, overflowing float32): one line
            sample = None if index.is_trained else _training_sample(settings, index)
            if sample is not None:
                index.train(sample)  # its progress lines
            added = _AddedRows(settings, index, f"run={run.path}")
            if index.nlist:  # rows of the input it was trained on, and their neighbours in it,
                queries = sample[evenly_spaced(len(sample), VALIDATION_QUERIES)]  # in one pass
                index.choose_nprobe(queries, exact_neighbours(queries, added, min(10, len(added))))
            else:
                for _ in added.chunks():  # the pass that adds them
                    pass
        except UserInputError:
            raise
        except ValueError as error:
            raise UserInputError(f"input={settings['input']}: {error}") from None
    index.save(out)
    print(f"[sgh] wrote {out}: {index!r}")
    return index


class _AddedRows:
    """The input's batches as the model takes them, each added to the index (ids: the rows) as
    it streams past: a build's one pass over the file, which `exact_neighbours` may read too."""

    def __init__(self, settings: dict, index: SGHIndex, where: str) -> None:
        self.settings, self.index, self.where = settings, index, where
        self.total = len(open_vectors(settings["input"], settings["key"]))

    def __len__(self) -> int:
        return self.total

    def chunks(self, chunk_rows: int | None = None):  # the input's own batches (batch_size)
        started = time.perf_counter()
        for start, total, rows in _batches(self.settings, self.index, self.where):
            self.index.add(rows)
            sgh_index.say_progress(
                sgh_index.vectors_done("added", start + len(rows), total, started))
            yield start, rows


def _training_sample(settings: dict, index: SGHIndex) -> np.ndarray:
    """Rows spread evenly over the input: 256 per list for k-means, or `FIT_ROWS` for the byte
    decoder, whichever is more."""
    wanted = max(FIT_ROWS if index.decoder == "bytes" else 0, 256 * (index.nlist or 0))
    sample = []
    for start, total, rows in _batches(settings, index, f"run={settings['run']}"):
        if index.nlist is not None and total < index.nlist:
            raise UserInputError(f"input={settings['input']} has {total} vectors for nlist="
                                 f"{index.nlist} lists; accepted: nlist <= {total} (at least "
                                 "one vector per list)")
        stride = max(1, total // wanted)
        sample.append(rows[(-start) % stride :: stride].copy())  # a view would keep the batch
    return np.concatenate(sample)[:wanted]


def search(settings: dict) -> tuple[np.ndarray, np.ndarray]:
    """``(D, I)`` of `search` (module doc), written to ``out``."""
    out = Path(settings["out"])
    _refuse_output(out, Path(settings["input"]))
    index = SGHIndex.load(settings["index"])
    truth = None if settings["groundtruth"] is None else _groundtruth(
        settings, index, len(open_vectors(settings["input"], settings["key"])))
    for name in ("mode", "nprobe", "shortlist", "refine_factor"):
        if settings[name] is not None:
            try:
                setattr(index, name, settings[name])
            except ValueError as error:
                raise UserInputError(str(error)) from None
    results, started = [], time.perf_counter()
    for start, total, rows in _batches(settings, index, f"index={settings['index']}"):
        try:
            results.append(index.search(rows, settings["k"]))
        except ValueError as error:  # e.g. nprobe on an index without lists
            raise UserInputError(str(error)) from None
        sgh_index.say_progress(
            sgh_index.vectors_done("searched", start + len(rows), total, started))
    D = np.concatenate([d for d, _ in results])
    I = np.concatenate([i for _, i in results])  # noqa: E741  (faiss's name)
    recalls = {}
    if truth is not None:
        cutoffs = sorted({n for n in (1, 10, 100, 1000) if n < I.shape[1]} | {I.shape[1]})
        recalls = {f"recall{RECALL_K}@{n}": recall_of_results(I[:, :n], truth, RECALL_K)
                   for n in cutoffs}
    with atomic_file(out, suffix=".npz") as temporary:
        np.savez(temporary, D=D, I=I, **{RESULTS_MARKER: np.str_(repr(index))},
                 **{name: np.float64(value) for name, value in recalls.items()},
                 **({"recall_convention": np.str_(RECALL_CONVENTION)} if recalls else {}))
    print(f"[sgh] wrote {out}: D, I of shape {I.shape} ({index!r})")
    if recalls:
        figures = ", ".join(f"{value:.4f}" for value in recalls.values())
        print(f"[sgh] Recall{RECALL_K}@{'/@'.join(name.split('@')[1] for name in recalls)} "
              f"{figures} ({RECALL_CONVENTION}; {len(I)} queries)")
    return D, I


def _groundtruth(settings: dict, index: SGHIndex, n_queries: int) -> np.ndarray:
    """The neighbour ids of ``groundtruth=``: a row per query, each at least `RECALL_K` ids of
    the index's items (int64); read before any query is searched, so a bad file costs none."""
    path = Path(settings["groundtruth"])
    truth_file = open_vectors(path, settings["groundtruth_key"])
    truth = groundtruth_ids(path, truth_file.read(0, len(truth_file)), n_queries,
                            max(index.ntotal, 1), settings["groundtruth_key"])
    if truth.shape[1] < RECALL_K:
        raise UserInputError(f"groundtruth={path} holds {truth.shape[1]} neighbours per query; "
                             f"accepted: at least {RECALL_K} (Recall{RECALL_K}@N reads each "
                             f"query's first {RECALL_K})")
    return truth


def _refuse_output(out: Path, queries: Path) -> None:
    """`out` replaces only results this command wrote before."""
    if out.suffix != ".npz":
        raise UserInputError(f"out={out}: the results are an .npz (D, I); accepted: a path "
                             "ending in .npz")
    refuse_a_run_file("out", out, "results.npz")
    check_writable_place("out", out, directory_wanted=False)
    if out.is_symlink() or (out.exists() and queries.exists() and out.samefile(queries)):
        raise UserInputError(f"out={out} is the queries' file or a link; accepted: a new path "
                             "ending in .npz")
    if out.exists():
        try:
            ours = RESULTS_MARKER in read_npz_arrays(out)
        except UserInputError:
            ours = False
        if not ours:
            raise UserInputError(f"out={out} exists and is not results of sgh-index search; "
                                 "accepted: a new path, or earlier results (replaced)")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["--help"], ["-h"]):
        print_help("sgh-index: build an SGHIndex of a run over a vector file, and search it",
                   USAGE, "guide/search.md")
        return
    with exit_on_failure("sgh-index", output_key="out"):
        action, settings = parse_arguments(argv)
        (build if action == "build" else search)(settings)


if __name__ == "__main__":
    main()
