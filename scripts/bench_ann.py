"""Recall against queries/s, as ann-benchmarks draws it: SGH's search modes and faiss's
quantizers at equal bytes per item.

    SGH_DATA_DIR=/path/to/data python scripts/bench_ann.py --runs RUN [RUN ...]
        [--json bench_ann.json] [--png bench_ann_plots] [--threads 1] [--quick] [--sgh-only]
        [--nprobes 1,2,4,8,16,32,64]

RUN: a finished `sgh-train` run of SGH (its config.yaml, codes.npz and asymmetric.npz). The runs
are grouped by dataset and code length (bits); each group is one table, one plot and one set of
anchors, B = bits / 8 bytes per item (4 at 32 bits, 8 at 64). The dataset is the run's own split,
read again through its config.yaml (`sgh.data.load_split`); the ground truth is the run's
codes.npz `groundtruth`: each test query's 10 exact nearest neighbours under the run's similarity,
nearest first, ties by id.

Curves (a point per setting; each method's line its Pareto frontier, as ann-benchmarks plots
it, its dominated settings drawn as crosses):
- SGH, `sgh.SGHIndex.from_run(run)`: mode="scan" (the validated score on faiss's fast-scan
  kernels, the fast scan's refine_factor x k best rescored exactly) at refine_factor 1, 2, 4;
  mode="two_stage" (the encoder score's shortlist, rescored by the validated rescoring score) over
  shortlists of 200 .. 5,000 items (at most the database); and inverted lists,
  `from_run(run, nlist=N)`, N = round(sqrt(n_database)) and round(4 sqrt(n_database)),
  mode="scan" over nprobe 1 .. 64. The inverted lists are SGHIndex's own: a k-means of the
  database features. And the byte decoder,
  `from_run(run, mode="bytes")`: one 256-entry table per code byte fitted on the run's
  training features, the database encoded by its posterior mode, scanned exactly by SGH's
  lookup-table kernel (the reconstruction's norm computed from the code: B bytes); and the byte
  decoder in inverted lists of the
  same sizes, `from_run(run, mode="bytes", nlist=N)` (its decoder fitted on, and the items
  coded as, residuals to their list's centroid; the norm's cross terms computed from the codes:
  B bytes), over nprobe.
- faiss anchors at B bytes per item (index_factory strings), each trained on the run's
  training features only: `PQ{B}np` (IndexPQ, 8-bit sub-quantizers, without the polysemous
  training that only faiss's Hamming-filtered search uses), `PQ{2B}x4fs` (4-bit fast scan),
  `OPQ{B},PQ{B}np` and `OPQ{2B},PQ{2B}x4fs` (a learned rotation first), `PQ{B+1}np` and
  `OPQ{B+1},PQ{B+1}np` (B + 1 bytes: the size of RQ and LSQ below, spent by PQ),
  `RQ{B}x8_Nqint8` and `LSQ{B}x8_Nqint8` (additive quantizers, B codebooks of 256 over the
  whole vector, the reconstruction's norm in one more byte: the byte decoder's structure,
  encoded by beam search and by local search; trained on at most 100,000 training items, as the
  byte decoder), their
  fast-scan forms at B bytes, `RQ{2B-2}x4fs_Nrq2x4` and `LSQ{2B-2}x4fs_Nlsq2x4` (2B - 2
  codebooks of 16, the norm in the last two 4-bit codes),
  `IVF{N},PQ{2B}x4fs`
  (codes of the vectors) and `IVF{N},PQ{2B}x4fsr` (codes of their residuals to the list's
  centroid) over nprobe 1 .. 64, N = round(4 sqrt(n_database)), their lists the byte decoder's
  lists of the first run at N (`SGHIndex.centroids`: faiss's k-means of the training features,
  20 iterations, seed 0), so that SGH and faiss search one partition at equal N and the
  comparison is of codes and scans, not of two k-means runs' luck on the test queries (on
  SIFT10K's 100 queries two seeds' lists differ by 0.03 in the share of true neighbours in the 8
  nearest lists, and by 0.003 on 1,000 validation queries); faiss's own k-means of the training
  features where SGH's lists are of other sizes; `IVF{N},RQ{B}x8_Nqint8` and
  `IVF{N},LSQ{B}x8_Nqint8` in the same lists
  (codes of the residuals, B + 1 bytes: the byte decoder's inverted lists, faiss's way) and
  their fast-scan forms `IVF{N},RQ{2B-2}x4fsr_Nrq2x4` and `IVF{N},LSQ{2B-2}x4fsr_Nlsq2x4` (B
  bytes);
  and `RaBitQ` at its own size (d/8 bytes of signs plus two float factors; faiss's default of
  4-bit quantised queries). `PQ{2B}x4fs,RFlat` is left out: its refine step re-ranks by
  the raw float vectors, 4d more bytes per item. Dimensions that are no multiple of 2B sub-vectors
  (glove's 50) get zero columns appended for the PQ family (no distance changes). Angular data:
  the split holds unit vectors (checked here), searched by L2 distance, which orders them as
  cosine does; inner-product data by faiss's inner-product metric.

Measured for each point:
- Recall10@100: the share of each query's 10 true neighbours among its first 100 results;
  10-recall@10: among its first 10; 1-recall@1: whether the first result is the nearest
  neighbour. Results as each index returns them (SGH: by score, then id; faiss: its own order),
  no tie correction; averaged over the queries.
- queries/s: the number of queries over the median wall time of `rounds` searches of all of
  them (k = 100), on --threads threads (faiss's OpenMP and numpy's BLAS alike); every point of a
  group timed in interleaved rounds in one process, after one untimed warm-up search (which also
  builds SGHIndex's search structures and gives the recalls), so that the machine's noise falls
  on all alike. A search shorter than 50 ms (SIFT10K's 100 queries take about 1 ms) is timed
  in each round as the mean of as many searches in a row as fill 50 ms. Building and training
  (not timed) run on the same threads: more OpenMP threads than free cores make faiss's
  training many times slower, not faster.
- bytes per item: what the scan reads of one item, without an IVF list number, since the list
  an item is stored in says it. faiss: its standalone code size. SGH: bits / 8, plus one byte
  where the ranking reads a stored item constant: the model's decoder and joint scores' ``c(h)``
  (in the fast scan two more nibbles; the exact rescore of candidates, and the two-stage
  search's, read it as a float32 held beside, not counted); the byte decoder computes its
  norm from the code, flat and in lists.
  Index bytes per item: the whole index as saved, over the items (faiss.serialize_index; the
  directory SGHIndex.save writes), so ids, lists, codebooks and models included.

The target (issue 33): SGH's curve at B bytes at or above the upper envelope of the equal-bytes
anchors (every anchor but a RaBitQ of another size) over the recalls a user would pick, Recall10@100
from 0.8 x the highest any of them reached upwards. A curve's queries/s at recall r is the most
queries/s of its points with Recall10@100 >= r (the Pareto frontier, as ann-benchmarks plots it);
SGH's curve there is its points of B bytes. Compared at every recall of a point in that range,
without a noise margin. A second verdict compares every SGH point (B or B + 1 bytes) against
every anchor of at most B + 1 bytes (PQ and OPQ with B + 1 sub-quantizers, RQ and LSQ, flat and
in inverted lists, included; RaBitQ not), the same way.

The inverted lists' target (issue 33): an IVF point at >= 0.95 x the Recall10@100 of the flat
scan (mode="scan" at SGHIndex's default refine factor) with >= 10 x its queries/s. Reported per
run, for the model's score and for the byte decoder, each against its own flat scan: the
fastest IVF point reaching that recall, its share of the flat scan's recall and its speed-up.

--sgh-only: SGH's points and the inverted lists' verdict only (no faiss anchors, no envelope
verdict): minutes where the anchors' training takes an hour.

--quick (a smoke run, minutes): the first 200 queries, fewer settings, one timed round,
N = round(sqrt(n_database)) lists only, anchors trained on the first 10,000 training items and OPQ
with 2 iterations.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import faiss
import matplotlib
import numpy as np
from omegaconf import OmegaConf
from threadpoolctl import threadpool_limits

from sgh.artifacts.codes_file import load_codes
from sgh.config import dataset_config_from
from sgh.data import load_split
from sgh.data.streamed_features import iter_chunks
from sgh.scores.byte_decoder import FIT_ROWS
from sgh.search.fast_scan import DEFAULT_REFINE_FACTOR
from sgh.search.sgh_index import SGHIndex

matplotlib.use("Agg")  # files only: no display
from matplotlib import pyplot  # noqa: E402

K = 100  # results asked of every search: Recall10@100's 100
TRUE_NEIGHBOURS = 10  # Recall10@100's 10
MIN_SAMPLE_SECONDS = 0.05  # a timed sample at least this long (`median_seconds`)
TARGET_RECALL_SHARE = 0.8  # the target's recall range starts at this share of the highest
IVF_RECALL_SHARE = 0.95  # the inverted lists' target: this share of the flat scan's recall ...
IVF_SPEEDUP = 10.0  # ... at this many times its queries/s


@dataclasses.dataclass(frozen=True)
class Settings:
    """What one invocation sweeps and how long it measures (module doc)."""

    refine_factors: tuple[int, ...]
    shortlists: tuple[int, ...]
    nprobes: tuple[int, ...]
    rounds: int
    queries: int | None  # the first this many test queries (None: all)
    lists_per_sqrt_n: int  # the anchors' inverted lists
    sgh_lists_per_sqrt_n: tuple[int, ...]  # SGH's inverted lists, one curve each
    training_rows: int | None  # anchors train on the first this many (None: all)
    opq_iterations: int | None  # None: faiss's default (50)


FULL = Settings(refine_factors=(1, 2, 4),
                shortlists=(200, 500, 1000, 2000, 5000), nprobes=(1, 2, 4, 8, 16, 32, 64),
                rounds=3, queries=None, lists_per_sqrt_n=4, sgh_lists_per_sqrt_n=(1, 4),
                training_rows=None, opq_iterations=None)
QUICK = Settings(refine_factors=(1, 4), shortlists=(500, 2000),
                 nprobes=(1, 8, 64), rounds=1, queries=200, lists_per_sqrt_n=1,
                 sgh_lists_per_sqrt_n=(1,), training_rows=10_000, opq_iterations=2)


@dataclasses.dataclass(eq=False)  # points are compared by identity
class Point:
    """One setting of one method: how to search all queries, and what was measured."""

    method: str
    params: dict
    bytes_per_item: float
    index_bytes_per_item: float
    search: Callable[[], tuple[np.ndarray, np.ndarray]]
    is_sgh: bool
    run: str | None = None
    measured: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Group:
    """The runs of one dataset at one code length: one table, one plot, one set of anchors."""

    dataset: str
    bits: int
    runs: list[str]
    groundtruth: np.ndarray

    @property
    def bytes_per_item(self) -> int:
        return self.bits // 8


@contextlib.contextmanager
def threads(count: int):
    """faiss's OpenMP and numpy's BLAS both limited to `count` threads."""
    previous = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(count)
    try:
        with threadpool_limits(count):
            yield
    finally:
        faiss.omp_set_num_threads(previous)


# ---- runs and their data ----------------------------------------------------------------------
def groups_of(run_dirs: list[str]) -> list[Group]:
    """The runs grouped by (dataset, bits), in the order given; the runs of a group must share
    their ground truth (the same queries and database), or one plot would mix two splits."""
    groups: dict[tuple[str, int], Group] = {}
    for run_dir in run_dirs:
        codes = load_codes(os.path.join(run_dir, "codes.npz"))
        if codes.bits % 8:
            sys.exit(f"{run_dir}: {codes.bits}-bit codes; the anchors need whole bytes per item "
                     "(bits a multiple of 8)")
        if codes.groundtruth is None or codes.groundtruth.shape[1] < TRUE_NEIGHBOURS:
            sys.exit(f"{run_dir}: codes.npz holds no ground truth of {TRUE_NEIGHBOURS} "
                     "neighbours per query")
        dataset = run_config(run_dir)["dataset"]["name"]
        group = groups.setdefault((dataset, codes.bits), Group(
            dataset, codes.bits, [], codes.groundtruth[:, :TRUE_NEIGHBOURS]))
        if not np.array_equal(group.groundtruth, codes.groundtruth[:, :TRUE_NEIGHBOURS]):
            sys.exit(f"{run_dir} and {group.runs[0]}: both {dataset} at {codes.bits} bits, but "
                     "with different ground truth (another split); benchmark them separately")
        group.runs.append(run_dir)
    return list(groups.values())


def run_config(run_dir: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(os.path.join(run_dir, "config.yaml")))


def in_memory(features) -> np.ndarray:
    """float32 rows of an array or of features streamed from disk."""
    return np.concatenate([rows for _, rows in iter_chunks(features)])


def require_unit_vectors(name: str, rows: np.ndarray) -> None:
    """The anchors search angular data by L2, which orders unit vectors as cosine does: the
    split normalises them when it reads the file (sgh.data), checked rather than assumed."""
    norms = np.linalg.norm(rows, axis=1)
    if not np.allclose(norms, 1.0, atol=1e-4):
        sys.exit(f"angular data, but the split's {name} are not unit vectors (norms "
                 f"{norms.min():.4f} .. {norms.max():.4f})")


def coarse_lists(n_database: int, lists_per_sqrt_n: int) -> int:
    return max(1, round(lists_per_sqrt_n * math.sqrt(n_database)))


# ---- SGH ---------------------------------------------------------------------------------------
def sgh_points(run_dir: str, label: str, queries: np.ndarray, lists: list[int],
               settings: Settings) -> tuple[list[Point], dict[int, np.ndarray]]:
    """The scan, two-stage and inverted-list curves of one run (module doc), and its byte
    decoder lists' centroids by nlist."""
    scan = SGHIndex.from_run(run_dir, mode="scan")
    two_stage = SGHIndex.from_run(run_dir, mode="two_stage")
    bytes_per_item = scan.bits / 8
    rescore = scan.scores.rescore_chosen or scan.scores.chosen

    def constant_byte(score: str) -> int:
        """1 where `score` reads a stored item constant (module doc: bytes per item)."""
        return int(scan.scores.scores[score].code_templates is not None)

    # Two-stage and inverted lists keep SGHIndex's default refine factor: it is the scan's
    # sweep that shows what the factor buys.
    default_refine = scan.refine_factor

    def point(method, index, saved_size, params, extra_bytes=0, **attributes):
        return Point(f"SGH {method}{label}", params, bytes_per_item=bytes_per_item + extra_bytes,
                     index_bytes_per_item=saved_size / index.ntotal,
                     search=lambda: sgh_search(index, queries, **attributes), is_sgh=True,
                     run=run_dir)

    points, centroids = [], {}
    size = saved_bytes(scan)
    for factor in settings.refine_factors:
        points.append(point("scan", scan, size, {"mode": "scan", "score": scan.scores.chosen,
                                                 "refine_factor": factor},
                            extra_bytes=constant_byte(scan.scores.chosen),
                            refine_factor=factor))
    size = saved_bytes(two_stage)
    for shortlist in sorted({min(length, two_stage.ntotal) for length in settings.shortlists}):
        points.append(point("two-stage", two_stage, size, {
            "mode": "two_stage", "shortlist": shortlist, "shortlist_score": "encoder",
            "rescore": rescore, "refine_factor": default_refine},
            extra_bytes=constant_byte(rescore),
            shortlist=shortlist))
    decoded = SGHIndex.from_run(run_dir, mode="bytes")
    size = saved_bytes(decoded)
    points.append(point("byte decoder scan", decoded, size,
                        {"mode": "bytes", "norm": "from the code"}))
    for nlist in lists:
        inverted = SGHIndex.from_run(run_dir, mode="scan", nlist=nlist)
        size = saved_bytes(inverted)
        for nprobe in settings.nprobes:
            points.append(point(f"IVF{nlist} scan", inverted, size, {
                "mode": "scan", "nlist": nlist, "nprobe": nprobe,
                "score": inverted.scores.chosen,
                "refine_factor": default_refine},
                extra_bytes=constant_byte(inverted.scores.chosen), nprobe=nprobe))
        inverted = SGHIndex.from_run(run_dir, mode="bytes", nlist=nlist)
        centroids[nlist] = inverted.centroids
        size = saved_bytes(inverted)
        for nprobe in settings.nprobes:
            points.append(point(f"IVF{nlist} byte decoder scan", inverted, size, {
                "mode": "bytes", "nlist": nlist, "nprobe": nprobe,
                "norm": "from the code"}, nprobe=nprobe))
    return points, centroids


def sgh_search(index: SGHIndex, queries: np.ndarray, **attributes
               ) -> tuple[np.ndarray, np.ndarray]:
    """Search with `attributes` (refine_factor, shortlist, nprobe) set first: the points of one
    index take turns in the interleaved rounds."""
    for name, value in attributes.items():
        setattr(index, name, value)
    return index.search(queries, K)


def saved_bytes(index: SGHIndex) -> int:
    """The size of the directory `index.save` writes."""
    with tempfile.TemporaryDirectory() as root:
        saved = index.save(Path(root) / "index")
        return sum(path.stat().st_size for path in saved.iterdir())


# ---- faiss anchors -----------------------------------------------------------------------------
def anchor_points(split, queries: np.ndarray, group: Group, nlist: int,
                  settings: Settings, centroids: np.ndarray | None) -> list[Point]:
    """faiss's quantizers at the group's bytes per item, and RaBitQ at its own (module doc);
    the inverted ones in the lists of ``centroids`` (None: faiss's own k-means)."""
    B = group.bytes_per_item
    train = in_memory(split.train)[: settings.training_rows]
    database = in_memory(split.database)
    if split.similarity == "angular":
        for name, rows in (("training items", train), ("database items", database),
                           ("queries", queries)):
            require_unit_vectors(name, rows)
    metric = faiss.METRIC_INNER_PRODUCT if split.similarity == "inner_product" else \
        faiss.METRIC_L2
    # Every PQ below splits the vector into B or 2B equal sub-vectors.
    pq_train, pq_database, pq_queries = (zero_padded(rows, 2 * B)
                                         for rows in (train, database, queries))
    dim, padded_dim = train.shape[1], pq_train.shape[1]
    # RQ's and LSQ's B + 1 bytes as PQ and OPQ spend them: one more 8-bit sub-quantizer.
    plus_one = [f"PQ{B + 1}np", f"OPQ{B + 1},PQ{B + 1}np"]
    plus_one_train, plus_one_database, plus_one_queries = (zero_padded(rows, B + 1)
                                                           for rows in (train, database, queries))
    # np: no polysemous training, which serves only faiss's Hamming-filtered search (minutes
    # of annealing; the ADC ranking measured here is the same without it).
    flat = [f"PQ{B}np", f"PQ{2 * B}x4fs", f"OPQ{B},PQ{B}np", f"OPQ{2 * B},PQ{2 * B}x4fs"]
    inverted = [f"IVF{nlist},PQ{2 * B}x4fs", f"IVF{nlist},PQ{2 * B}x4fsr"]
    # Whole-vector codebooks: no sub-vectors, so no padding; the byte decoder's training cap.
    # The fast-scan forms: 2B - 2 codebooks of 16 and the norm in two more 4-bit codes.
    additive = [f"RQ{B}x8_Nqint8", f"LSQ{B}x8_Nqint8", f"RQ{2 * B - 2}x4fs_Nrq2x4",
                f"LSQ{2 * B - 2}x4fs_Nlsq2x4"]
    built = {}
    for key in additive:
        index = faiss.index_factory(dim, key, metric)
        index.train(train[:FIT_ROWS])
        index.add(database)
        built[key] = index
    for key in flat + inverted + plus_one:
        rows = (plus_one_train, plus_one_database) if key in plus_one else (pq_train, pq_database)
        index = faiss.index_factory(rows[0].shape[1], key, metric)
        if settings.opq_iterations is not None and key.startswith("OPQ"):
            faiss.downcast_VectorTransform(index.chain.at(0)).niter = settings.opq_iterations
        if key in inverted and centroids is not None:  # SGH's lists, trained already
            index.quantizer.add(zero_padded(np.asarray(centroids, np.float32), 2 * B))
        elif key in inverted[1:]:  # the same coarse lists as the first: k-means once
            index.quantizer.add(built[inverted[0]].quantizer.reconstruct_n(0, nlist))
        index.train(rows[0])
        index.add(rows[1])
        built[key] = index
    # The byte decoder's structure in inverted lists, faiss's way: codes of residuals.
    inverted_additive = [f"IVF{nlist},RQ{B}x8_Nqint8", f"IVF{nlist},LSQ{B}x8_Nqint8",
                         f"IVF{nlist},RQ{2 * B - 2}x4fsr_Nrq2x4",
                         f"IVF{nlist},LSQ{2 * B - 2}x4fsr_Nlsq2x4"]
    coarse = built[inverted[0]].quantizer.reconstruct_n(0, nlist)[:, :dim]
    for key in inverted_additive:
        index = faiss.index_factory(dim, key, metric)
        index.quantizer.add(np.ascontiguousarray(coarse))
        index.train(train[:FIT_ROWS])
        index.add(database)
        built[key] = index
    inverted += inverted_additive
    rabitq = faiss.index_factory(dim, "RaBitQ", metric)
    rabitq.train(train)
    rabitq.add(database)
    padding = {} if padded_dim == dim else {"zero_padded_dim": padded_dim}
    lists_origin = "faiss k-means" if centroids is None else "SGH byte decoder's"
    points = []
    for key, index in built.items():
        sizes = {"bytes_per_item": code_bytes(index), "index_bytes_per_item": index_bytes(index)}
        if key in additive:
            points.append(Point(f"faiss {key}", {}, search=faiss_search(index, queries),
                                is_sgh=False, **sizes))
            continue
        if key in flat:
            points.append(Point(f"faiss {key}", dict(padding), search=faiss_search(
                index, pq_queries), is_sgh=False, **sizes))
            continue
        if key in plus_one:
            padded = plus_one_queries.shape[1]
            points.append(Point(f"faiss {key}", {} if padded == dim else {
                "zero_padded_dim": padded}, search=faiss_search(index, plus_one_queries),
                is_sgh=False, **sizes))
            continue
        whole = key in inverted_additive  # whole-vector codebooks: no padding
        for nprobe in settings.nprobes:
            points.append(Point(f"faiss {key}", {"nlist": nlist, "nprobe": nprobe,
                                                 "lists": lists_origin,
                                                 **({} if whole else padding)},
                                search=faiss_search(index, queries if whole else pq_queries,
                                                    nprobe),
                                is_sgh=False, **sizes))
    points.append(Point("faiss RaBitQ", {"query_bits": rabitq.qb},
                        bytes_per_item=code_bytes(rabitq),
                        index_bytes_per_item=index_bytes(rabitq),
                        search=faiss_search(rabitq, queries), is_sgh=False))
    return points


def faiss_search(index, queries: np.ndarray, nprobe: int | None = None):
    """All queries' top K; ``nprobe`` set on the index first (faiss's fast-scan additive
    quantizers in lists take no search parameters), so an index's points take turns."""
    def search():
        if nprobe is not None:
            faiss.extract_index_ivf(index).nprobe = nprobe
        return index.search(queries, K)

    return search


def zero_padded(rows: np.ndarray, multiple: int) -> np.ndarray:
    """`rows` with zero columns appended up to a multiple of `multiple` dimensions."""
    missing = -rows.shape[1] % multiple
    return np.ascontiguousarray(np.pad(rows, ((0, 0), (0, missing))) if missing else rows)


def code_bytes(index) -> int:
    """One item's code: faiss's standalone code size, less an IVF's list number."""
    ivf = faiss.try_extract_index_ivf(index)
    return index.sa_code_size() - (ivf.coarse_code_size() if ivf is not None else 0)


def index_bytes(index) -> float:
    return len(faiss.serialize_index(index)) / index.ntotal


# ---- measuring ---------------------------------------------------------------------------------
def measure(points: list[Point], groundtruth: np.ndarray, rounds: int) -> None:
    """Recalls from a warm-up search of each point, then queries/s from `rounds` interleaved
    rounds of all points (module doc)."""
    for point in points:
        _, I = point.search()
        point.measured.update(recalls(I, groundtruth))
    medians = median_seconds([point.search for point in points], rounds, MIN_SAMPLE_SECONDS)
    for point, seconds in zip(points, medians, strict=True):
        point.measured["queries_per_second"] = len(groundtruth) / seconds


def median_seconds(searches: list[Callable[[], object]], rounds: int,
                   min_sample_seconds: float = 0.0) -> list[float]:
    """Each search's median wall time over `rounds` rounds, the searches taking turns in each
    round, so that the machine's noise falls on all alike. A round's sample of a search lasting
    less than `min_sample_seconds` is the mean of as many calls in a row as fill it (as timeit's
    autorange does): a call of a millisecond is timed mostly by the scheduler's noise."""
    repeats = [1] * len(searches)
    if min_sample_seconds > 0:
        for position, search in enumerate(searches):
            started = time.perf_counter()
            search()
            once = max(time.perf_counter() - started, 1e-9)
            repeats[position] = max(1, math.ceil(min_sample_seconds / once))
    seconds: list[list[float]] = [[] for _ in searches]
    for _ in range(rounds):
        for search, calls, timings in zip(searches, repeats, seconds, strict=True):
            started = time.perf_counter()
            for _ in range(calls):
                search()
            timings.append((time.perf_counter() - started) / calls)
    return [statistics.median(timings) for timings in seconds]


def recalls(I: np.ndarray, groundtruth: np.ndarray) -> dict[str, float]:
    """Recall10@100, 10-recall@10 and 1-recall@1 of result ids `I` (module doc)."""
    def share_found(true: np.ndarray, depth: int) -> float:
        return float((I[:, :depth, None] == true[:, None, :]).any(axis=1).mean())

    return {"recall10@100": share_found(groundtruth, K),
            "10-recall@10": share_found(groundtruth, TRUE_NEIGHBOURS),
            "1-recall@1": share_found(groundtruth[:, :1], 1)}


# ---- the target --------------------------------------------------------------------------------
def frontier_qps(points: list[Point], recall: float) -> tuple[float, Point | None]:
    """The most queries/s among `points` at Recall10@100 >= `recall`, and that point
    (0 and None when none reaches it)."""
    reaching = [point for point in points if point.measured["recall10@100"] >= recall]
    best = max(reaching, key=lambda point: point.measured["queries_per_second"], default=None)
    return (best.measured["queries_per_second"] if best else 0.0), best


def envelope(points: list[Point]) -> list[Point]:
    """The Pareto frontier: the points no other beats on both recall and queries/s, by
    recall."""
    frontier = dict.fromkeys(frontier_qps(points, point.measured["recall10@100"])[1]
                             for point in points)
    return sorted(frontier, key=lambda point: point.measured["recall10@100"])


def target(sgh: list[Point], anchors: list[Point]) -> dict:
    """SGH's curve against the anchors' envelope over Recall10@100 from 0.8 x the highest
    reached (module doc)."""
    reached = [point.measured["recall10@100"] for point in sgh + anchors]
    highest = max(reached)
    floor = TARGET_RECALL_SHARE * highest
    levels = sorted({floor, *(recall for recall in reached if recall >= floor)})
    below = []
    for recall in levels:
        sgh_qps, sgh_best = frontier_qps(sgh, recall)
        anchor_qps, anchor_best = frontier_qps(anchors, recall)
        if sgh_qps < anchor_qps:
            below.append({"recall10@100": recall, "sgh_queries_per_second": sgh_qps,
                          "sgh_point": describe(sgh_best) if sgh_best else None,
                          "anchor_queries_per_second": anchor_qps,
                          "anchor_point": describe(anchor_best)})
    return {"recall_range": [floor, highest], "levels_compared": len(levels),
            "at_or_above": not below, "below_at": below}


def inverted_lists_verdicts(sgh: list[Point]) -> dict[str, dict]:
    """Per SGHIndex mode that has inverted lists here ("scan": the model's score, "bytes": the
    byte decoder), its inverted lists against its own flat scan (module doc)."""
    verdicts = {}
    for mode in ("scan", "bytes"):
        ours = [point for point in sgh if point.params["mode"] == mode]
        # The flat point: the byte decoder's scan, or the model's at the default refine factor.
        (flat,) = [point for point in ours if "nprobe" not in point.params and (
            mode == "bytes" or point.params["refine_factor"] == DEFAULT_REFINE_FACTOR)]
        verdicts[mode] = inverted_lists_verdict(
            flat, [point for point in ours if "nprobe" in point.params])
    return verdicts


def inverted_lists_verdict(flat: Point, inverted: list[Point]) -> dict:
    """The fastest of the `inverted` points at >= IVF_RECALL_SHARE x the `flat` scan's
    Recall10@100, and its speed-up (module doc)."""
    flat_recall = flat.measured["recall10@100"]
    flat_qps = flat.measured["queries_per_second"]
    qps, best = frontier_qps(inverted, IVF_RECALL_SHARE * flat_recall)
    verdict = {"flat_point": describe(flat), "flat_recall10@100": flat_recall,
               "flat_queries_per_second": flat_qps, "ivf_point": None, "recall_share": None,
               "speedup": None, "met": False}
    if best is not None:
        verdict.update(ivf_point=describe(best),
                       recall_share=best.measured["recall10@100"] / flat_recall,
                       speedup=qps / flat_qps, met=qps >= IVF_SPEEDUP * flat_qps)
    return verdict


def settings_text(point: Point) -> str:
    return ", ".join(f"{name}={value}" for name, value in point.params.items())


def describe(point: Point) -> str:
    settings = settings_text(point)
    return f"{point.method} ({settings})" if settings else point.method


def equal_bytes_anchors(points: list[Point], group: Group) -> list[Point]:
    """The anchors the target compares with: every faiss point at the group's bytes per item."""
    return [point for point in points
            if not point.is_sgh and point.bytes_per_item == group.bytes_per_item]


# ---- output ------------------------------------------------------------------------------------
def print_table(group: Group, points: list[Point], thread_count: int, n_queries: int,
                rounds: int) -> None:
    print(f"\n== {group.dataset}, {group.bits}-bit codes = {group.bytes_per_item} bytes per "
          f"item; {n_queries} test queries, k = {K}, {thread_count} thread(s), queries/s = "
          f"queries / median of {rounds} interleaved full searches ==")
    print("R10@100: share of the 10 true neighbours in the first 100 results; 10-R@10: in the "
          "first 10; 1-R@1: first result = the nearest (ids as returned, no tie correction). "
          "B/item: what the scan reads per item (SGH: the code, and the item constant's byte where "
          "its ranking reads a stored one); index B/item: the index as saved, per item.")
    double = 2 * group.bytes_per_item
    print(f"Not measured: faiss PQ{double}x4fs,RFlat, whose refine step re-ranks by the raw "
          "float vectors (4 bytes per dimension more per item), so not at equal bytes.")
    described = [(point, settings_text(point)) for point in points]
    method_width = max(len("method"), *(len(point.method) for point in points))
    settings_width = max(len("settings"), *(len(settings) for _, settings in described))
    header = f"{'method':<{method_width}} {'settings':<{settings_width}} {'B/item':>6} " \
             f"{'index B/item':>12} {'R10@100':>7} {'10-R@10':>7} {'1-R@1':>6} {'queries/s':>10}"
    print(header)
    print("-" * len(header))
    for point, settings in described:
        m = point.measured
        print(f"{point.method:<{method_width}} {settings:<{settings_width}} "
              f"{point.bytes_per_item:>6g} {point.index_bytes_per_item:>12.2f} "
              f"{m['recall10@100']:>7.4f} {m['10-recall@10']:>7.4f} {m['1-recall@1']:>6.4f} "
              f"{m['queries_per_second']:>10,.0f}", flush=True)


def print_inverted_lists_verdict(group: Group, run: str, mode: str, verdict: dict) -> None:
    whose = "the model's score" if mode == "scan" else "the byte decoder"
    where = f"SGH's inverted lists ({whose}; {run}) on {group.dataset} at {group.bits} bits"
    goal = (f">= {IVF_RECALL_SHARE} x the flat scan's Recall10@100 "
            f"({verdict['flat_recall10@100']:.4f}, {verdict['flat_queries_per_second']:,.0f} "
            f"q/s) at >= {IVF_SPEEDUP:g} x its queries/s")
    if verdict["ivf_point"] is None:
        print(f"IVF TARGET NOT MET: {where}: no IVF point reaches {goal}.")
        return
    print(f"IVF TARGET {'MET' if verdict['met'] else 'NOT MET'}: {where}, {goal}: fastest "
          f"there {verdict['ivf_point']}, {verdict['recall_share']:.3f} x its recall at "
          f"{verdict['speedup']:.1f} x its queries/s.")


def print_target(group: Group, run: str, anchors: list[Point], verdict: dict,
                 size: str) -> None:
    low, high = verdict["recall_range"]
    print(f"\nUpper envelope of the faiss anchors at {size} "
          f"({group.dataset}; Recall10@100 -> queries/s):")
    for point in envelope(anchors):
        m = point.measured
        print(f"  {m['recall10@100']:.4f}  {m['queries_per_second']:>10,.0f}  {describe(point)}")
    where = f"SGH ({run}) on {group.dataset} at {size}"
    span = f"Recall10@100 {low:.4f} .. {high:.4f} ({TARGET_RECALL_SHARE} x the highest reached " \
           "and up, " \
           f"{verdict['levels_compared']} recall levels compared)"
    if verdict["at_or_above"]:
        print(f"TARGET MET: {where} is at or above the anchors' envelope over {span}.")
        return
    print(f"TARGET NOT MET: {where} is below the anchors' envelope at "
          f"{len(verdict['below_at'])} of the recall levels of {span}:")
    for level in verdict["below_at"]:
        sgh = (f"SGH {level['sgh_queries_per_second']:,.0f} q/s ({level['sgh_point']})"
               if level["sgh_point"] else "SGH does not reach it")
        print(f"  at {level['recall10@100']:.4f}: {sgh}; anchors "
              f"{level['anchor_queries_per_second']:,.0f} q/s ({level['anchor_point']})")


def plot(group: Group, points: list[Point], anchors_envelope: list[Point], thread_count: int,
         n_queries: int, directory: Path) -> Path:
    """Recall10@100 against queries/s (log): each method's Pareto frontier as a line (as
    ann-benchmarks draws it), its dominated settings as crosses; the anchors' envelope dashed."""
    figure, axes = pyplot.subplots(figsize=(9, 6))
    # tab20: one colour a method (the default cycle has 10, fewer than the methods here).
    colours = matplotlib.colormaps["tab20"].colors
    for number, method in enumerate(dict.fromkeys(point.method for point in points)):
        curve = [point for point in points if point.method == method]
        frontier = envelope(curve)
        size = curve[0].bytes_per_item
        label = method if size == group.bytes_per_item else f"{method} ({size:g} B/item)"
        (line,) = axes.plot([p.measured["recall10@100"] for p in frontier],
                            [p.measured["queries_per_second"] for p in frontier], marker="o",
                            linewidth=2 if curve[0].is_sgh else 1, label=label,
                            color=colours[number % len(colours)])
        dominated = [point for point in curve if point not in frontier]  # by identity
        axes.scatter([p.measured["recall10@100"] for p in dominated],
                     [p.measured["queries_per_second"] for p in dominated], marker="x",
                     color=line.get_color())
    axes.plot([p.measured["recall10@100"] for p in anchors_envelope],
              [p.measured["queries_per_second"] for p in anchors_envelope], linestyle="--",
              color="grey", drawstyle="steps-pre", label="anchors' envelope (equal bytes)")
    axes.set_yscale("log")
    axes.set_xlabel(f"Recall10@100 ({n_queries} test queries, 10 exact neighbours)")
    axes.set_ylabel(f"queries/s ({thread_count} thread(s), k = {K}, median of interleaved rounds)")
    axes.set_title(f"{group.dataset}: {group.bytes_per_item} bytes per item "
                   f"({group.bits}-bit codes)")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize="small")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{group.dataset}_{group.bytes_per_item}bytes.png"
    figure.savefig(path, dpi=120, bbox_inches="tight")
    pyplot.close(figure)
    return path


def as_json(group: Group, point: Point, thread_count: int) -> dict:
    return {"dataset": group.dataset, "bits": group.bits, "threads": thread_count,
            "method": point.method, "params": point.params, "run": point.run,
            "bytes_per_item": point.bytes_per_item,
            "index_bytes_per_item": point.index_bytes_per_item, **point.measured}


# ---- the benchmark -----------------------------------------------------------------------------
def benchmark(group: Group, settings: Settings, thread_count: int, with_anchors: bool
              ) -> tuple[list[Point], list[dict]]:
    """Every point of one group, measured and printed; the targets' verdicts per run."""
    split = load_split(dataset_config_from(run_config(group.runs[0])["dataset"]))
    queries = np.ascontiguousarray(in_memory(split.query)[: settings.queries], np.float32)
    groundtruth = group.groundtruth[: settings.queries]
    if len(split.query) != len(group.groundtruth):
        sys.exit(f"{group.runs[0]}: {len(split.query)} test queries in the dataset, "
                 f"{len(group.groundtruth)} in codes.npz; the dataset changed since the run")
    sgh_lists = [coarse_lists(len(split.database), share)
                 for share in settings.sgh_lists_per_sqrt_n]
    points_by_run, centroids_by_nlist = {}, {}
    for run in group.runs:
        points_by_run[run], run_centroids = sgh_points(
            run, "" if len(group.runs) == 1 else f" [{run}]", queries, sgh_lists, settings)
        # The first run's: every run's byte decoder lists are the same k-means of one split.
        centroids_by_nlist = centroids_by_nlist or run_centroids
    anchor_lists = coarse_lists(len(split.database), settings.lists_per_sqrt_n)
    anchors = anchor_points(split, queries, group, anchor_lists, settings,
                            centroids_by_nlist.get(anchor_lists)) if with_anchors else []
    points = [point for run_points in points_by_run.values() for point in run_points] + anchors
    measure(points, groundtruth, settings.rounds)
    print_table(group, points, thread_count, len(queries), settings.rounds)
    equal_bytes = equal_bytes_anchors(anchors, group)
    verdicts = []
    for run, run_points in points_by_run.items():
        verdict = {"dataset": group.dataset, "bits": group.bits, "run": run}
        if with_anchors:
            at_bytes = [point for point in run_points
                        if point.bytes_per_item == group.bytes_per_item]
            verdict.update(target(at_bytes, equal_bytes))
            print_target(group, run, equal_bytes, verdict,
                         f"{group.bytes_per_item} bytes per item (SGH's points of as many)")
            # Every point of the run, some of which store one byte more, against every anchor
            # of up to as many.
            plus_one = group.bytes_per_item + 1
            up_to = [point for point in anchors
                     if point.bytes_per_item <= plus_one and point.method != "faiss RaBitQ"]
            verdict["up_to_one_byte_more"] = target(run_points, up_to)
            print_target(group, run, up_to, verdict["up_to_one_byte_more"],
                         f"up to {plus_one} bytes per item (every SGH point)")
        verdict["inverted_lists"] = inverted_lists_verdicts(run_points)
        for mode, inverted in verdict["inverted_lists"].items():
            print_inverted_lists_verdict(group, run, mode, inverted)
        verdicts.append(verdict)
    return points, verdicts


def nprobe_list(text: str) -> tuple[int, ...]:
    """``--nprobes``' value: positive integers, comma-separated."""
    try:
        nprobes = tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError:
        nprobes = ()
    if not nprobes or nprobes[0] < 1:
        raise argparse.ArgumentTypeError(f"{text!r}; accepted: positive integers separated by "
                                         "commas, such as 1,2,3,4,6,8")
    return nprobes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", nargs="+", required=True,
                        help="finished sgh-train run directories of SGH")
    parser.add_argument("--json", help="write every point and verdict here")
    parser.add_argument("--png", help="write one plot per dataset and bytes per item here")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads for building and searching (default 1)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: fewer queries and settings (module doc)")
    parser.add_argument("--queries", type=int, default=None,
                        help="the first this many test queries only (glove's 10,000 take hours)")
    parser.add_argument("--sgh-only", action="store_true",
                        help="SGH's points and the inverted lists' verdict only (module doc)")
    parser.add_argument("--nprobes", type=nprobe_list, default=None,
                        help="comma-separated nprobe settings of every inverted-list index, "
                             "SGH's and faiss's alike (default 1,2,4,8,16,32,64)")
    args = parser.parse_args()
    settings = QUICK if args.quick else FULL
    if args.queries is not None:
        settings = dataclasses.replace(settings, queries=args.queries)
    if args.nprobes is not None:
        settings = dataclasses.replace(settings, nprobes=args.nprobes)
    print(f"bench_ann: {args.threads} thread(s) (faiss OpenMP and numpy BLAS), building and "
          f"searching; {'QUICK: ' if args.quick else ''}{settings}", flush=True)
    result = {"conventions": __doc__, "threads": args.threads, "quick": args.quick,
              "sgh_only": args.sgh_only,
              "settings": dataclasses.asdict(settings), "points": [], "targets": []}
    for group in groups_of(args.runs):
        with threads(args.threads):
            points, verdicts = benchmark(group, settings, args.threads, not args.sgh_only)
        result["points"] += [as_json(group, point, args.threads) for point in points]
        result["targets"] += verdicts
        if args.png:
            path = plot(group, points, envelope(equal_bytes_anchors(points, group)), args.threads,
                        len(group.groundtruth[: settings.queries]), Path(args.png))
            print(f"plot: {path}")
        if args.json:  # what has run so far, kept
            with open(args.json, "w") as file:
                json.dump(result, file, indent=1)
    if args.json:
        print(f"json: {args.json}")


if __name__ == "__main__":
    main()
