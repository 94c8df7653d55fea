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
from sgh.cli.boundary import exit_on_failure
from sgh.cli.input_scale import refuse_another_scale, refuse_unscaled_rows, scaled, training_scale
from sgh.cli.out_file_command import run_out_file_command
from sgh.config import INPUT_SCALES, IndexBuildConfig, IndexSearchConfig
from sgh.data.neighbours import exact_neighbours
from sgh.data.npz_file import groundtruth as groundtruth_ids
from sgh.data.npz_file import read_npz_arrays
from sgh.data.streamed_features import evenly_spaced
from sgh.data.vector_files import open_vectors
from sgh.errors import UserInputError, check_choice, check_int
from sgh.metrics.neighbour_recall import recall_of_results, results_recall_convention
from sgh.scores.byte_decoder import FIT_ROWS
from sgh.scores.score_set import ScoreSet
from sgh.search.progress import say_progress, vectors_done
from sgh.search.sgh_index import MODES, SAVED_INDEX, VALIDATION_QUERIES, SGHIndex

# Each action's keys without a default (any other of configs/index_<action>.yaml may follow).
USAGE = ("usage: sgh-index build run=RUN_DIR out=INDEX_DIR [KEY=VALUE ...], or sgh-index search "
         "index=INDEX_DIR input=FILE out=RESULTS.npz [KEY=VALUE ...]")
# The results file's marker key: an existing out= is replaced only when it holds it.
RESULTS_MARKER = "sgh_index_results"
RECALL_K = 10  # Recall K@N: of each query's first K ground-truth neighbours, as the paper's
RECALL_CONVENTION = results_recall_convention(RECALL_K)


def _check_arguments(config: IndexBuildConfig | IndexSearchConfig) -> None:
    """What the schema's types leave to check, before any job of a sweep runs."""
    for name in ("nlist", "k", "nprobe", "shortlist", "refine_factor", "batch_size"):
        if getattr(config, name, None) is not None:
            check_int(name, getattr(config, name), 1)
    if config.mode not in (None, *MODES):
        raise UserInputError(f"mode={config.mode} is not known; accepted: {', '.join(MODES)}")
    check_choice("input_scale", config.input_scale, INPUT_SCALES)


def _batches(config: IndexBuildConfig | IndexSearchConfig, index: SGHIndex, where: str):
    """``(first row, total, float32 rows)`` of the ``input`` file, converted as the model's
    training features were; ``where``: the index's origin, for a refusal."""
    vectors = open_vectors(config.input, config.key)
    if vectors.shape[1] != index.dim:
        raise UserInputError(f"{vectors.where} has {vectors.shape[1]} features per vector but "
                             f"the model takes {index.dim}; give vectors of the kind it was "
                             "trained on")
    training = training_scale(index.scores.feature_conversion, config.input_scale, where)
    refuse_another_scale(vectors, training)
    for start in range(0, len(vectors), config.batch_size):
        rows = vectors.read(start, min(start + config.batch_size, len(vectors)))
        features = scaled(rows, vectors, start, config.input_scale)[0]
        refuse_unscaled_rows(features, vectors.dtype, training, vectors.where, start)
        yield start, len(vectors), features


def build(config: IndexBuildConfig) -> SGHIndex:
    """The index of `build` (module doc), saved at ``out``."""
    _check_arguments(config)
    out = Path(config.out)  # checked before minutes of work, and again by `save`
    refuse_a_run_file("out", out, "mnist.sghindex", runs=(config.run,))
    refuse_to_replace(out, SAVED_INDEX)
    check_writable_place("out", out, directory_wanted=True)
    if config.input is None:
        try:
            index = SGHIndex.from_run(config.run, config.mode, config.nlist,
                                      config.encoding, verbose=True)
        except ValueError as error:
            raise UserInputError(str(error)) from None
    else:
        run = RunDirectory(config.run, create=False)
        try:
            index = SGHIndex(ScoreSet.of_run(run), config.mode, config.nlist,
                             config.encoding, verbose=True)
        except ValueError as error:
            raise UserInputError(str(error)) from None
        try:  # the vectors' values (off scale, overflowing float32): one line
            sample = None if index.is_trained else _training_sample(config, index)
            if sample is not None:
                index.train(sample)  # its progress lines
            added = _AddedRows(config, index, f"run={run.path}")
            if index.nlist:  # rows of the input it was trained on, and their neighbours in it,
                queries = sample[evenly_spaced(len(sample), VALIDATION_QUERIES)]  # in one pass
                index.choose_nprobe(queries, exact_neighbours(queries, added, min(10, len(added))))
            else:
                for _ in added.chunks():  # the pass that adds them
                    pass
        except UserInputError:
            raise
        except ValueError as error:
            raise UserInputError(f"input={config.input}: {error}") from None
    index.save(out)
    print(f"[sgh] wrote {out}: {index!r}")
    return index


class _AddedRows:
    """The input's batches as the model takes them, each added to the index (ids: the rows) as
    it streams past: a build's one pass over the file, which `exact_neighbours` may read too."""

    def __init__(self, config: IndexBuildConfig, index: SGHIndex, where: str) -> None:
        self.config, self.index, self.where = config, index, where
        self.total = len(open_vectors(config.input, config.key))

    def __len__(self) -> int:
        return self.total

    def chunks(self, chunk_rows: int | None = None):  # the input's own batches (batch_size)
        started = time.perf_counter()
        for start, total, rows in _batches(self.config, self.index, self.where):
            self.index.add(rows)
            say_progress(vectors_done("added", start + len(rows), total, started))
            yield start, rows


def _training_sample(config: IndexBuildConfig, index: SGHIndex) -> np.ndarray:
    """Rows spread evenly over the input: 256 per list for k-means, or `FIT_ROWS` for the byte
    decoder, whichever is more."""
    wanted = max(FIT_ROWS if index.codes_by_bytes else 0, 256 * (index.nlist or 0))
    sample = []
    for start, total, rows in _batches(config, index, f"run={config.run}"):
        if index.nlist is not None and total < index.nlist:
            raise UserInputError(f"input={config.input} has {total} vectors for nlist="
                                 f"{index.nlist} lists; accepted: nlist <= {total} (at least "
                                 "one vector per list)")
        stride = max(1, total // wanted)
        sample.append(rows[(-start) % stride :: stride].copy())  # a view would keep the batch
    return np.concatenate(sample)[:wanted]


def search(config: IndexSearchConfig) -> tuple[np.ndarray, np.ndarray]:
    """``(D, I)`` of `search` (module doc), written to ``out``."""
    _check_arguments(config)
    out = Path(config.out)
    _refuse_output(out, Path(config.input))
    index = SGHIndex.load(config.index)
    truth = None if config.groundtruth is None else _groundtruth(
        config, index, len(open_vectors(config.input, config.key)))
    for name in ("mode", "nprobe", "shortlist", "refine_factor"):
        if getattr(config, name) is not None:
            try:
                setattr(index, name, getattr(config, name))
            except ValueError as error:
                raise UserInputError(str(error)) from None
    results, started = [], time.perf_counter()
    for start, total, rows in _batches(config, index, f"index={config.index}"):
        try:
            results.append(index.search(rows, config.k))
        except ValueError as error:  # e.g. nprobe on an index without lists
            raise UserInputError(str(error)) from None
        say_progress(vectors_done("searched", start + len(rows), total, started))
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


def _groundtruth(config: IndexSearchConfig, index: SGHIndex, n_queries: int) -> np.ndarray:
    """The neighbour ids of ``groundtruth=``: a row per query, each at least `RECALL_K` ids of
    the index's items (int64); read before any query is searched, so a bad file costs none."""
    path = Path(config.groundtruth)
    truth_file = open_vectors(path, config.groundtruth_key)
    truth = groundtruth_ids(path, truth_file.read(0, len(truth_file)), n_queries,
                            max(index.ntotal, 1), config.groundtruth_key)
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


def _job(config: IndexBuildConfig | IndexSearchConfig) -> None:
    """A build or a search; its mistakes told here, or Hydra's `run_job` prints a line first."""
    with exit_on_failure("sgh-index", output_key="out", output_path=config.out):
        (build if isinstance(config, IndexBuildConfig) else search)(config)


def main() -> None:
    """`sgh-index ACTION KEY=VALUE ...`: ACTION picks the configuration, Hydra reads the rest."""
    action = sys.argv[1] if len(sys.argv) > 1 else None
    if action in ("--help", "-h"):  # the build's help, which gives the search's usage too
        sys.argv.insert(1, action := "build")
    if action not in ("build", "search"):
        given = "" if action is None else f", not {action!r}"
        with exit_on_failure("sgh-index"):
            raise UserInputError(f"the first word is the action, build or search{given}; {USAGE}")
    del sys.argv[1]  # the rest is Hydra's, as for sgh-encode (`-m`, `--help`, `--cfg job` ...)
    run_out_file_command("sgh-index", f"index_{action}", _job, _check_arguments,
                         lambda config: config.out)


if __name__ == "__main__":
    main()
