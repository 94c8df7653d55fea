"""Encoding as a measured choice: the byte decoder's recall and encoding throughput for each
encoding of SGH trained with its byte decoder, against faiss's OPQ, RQ and LSQ at the same bytes.

    SGH_DATA_DIR=/path/to/data python scripts/bench_encoding.py [--datasets mnist ...]
        [--bits 32 64] [--split validation|test] [--json F] [--cache DIR] [--quick]

Split. ``validation`` (the default): a dataset's training rows, shuffled with a fixed seed, as
scripts/bench_equal_bytes.py carves them: the first 2,000 (a quarter at most) are the queries,
the next up to 100,000 (at most half of the rest) the database, up to 100,000 of the others the
fitting rows, on which every model is trained (SGH carves its own validation split from them)
and every faiss index; no test query is read. ``test``: the dataset's own protocol, as sgh-train
splits it: trained on its training set, its database searched by its test queries (glove: the
first 1,000 of them). Ground truth: each query's 10 nearest database items by squared Euclidean
distance (glove: of unit vectors, the cosine order), ties by row.

Methods, B = bits / 8 bytes per item:
- SGH with its byte decoder (`SGHHasher(n_bits, decoder="bytes")`, the default training
  otherwise), searched by `SGHIndex(..., mode="bytes", encoding=E)` for each encoding E
  (`sgh.scores.posterior_modes`): its B code bytes.
- The default recipe's linear SGH with the byte decoder fitted after training, local search: the
  product before the byte decoder was trained (B bytes).
- Ablation, what the encoder adds: the same decoder fitted by hard EM from random codes (LSQ's
  initialisation) instead of an encoder's, the database coded by local search from random codes.
- faiss, trained on the same rows: ``OPQ{B},PQ{B}`` (B bytes), ``RQ{B}x8_Nqint8`` and
  ``LSQ{B}x8_Nqint8`` (their norm in one more byte: B + 1), and ``LSQ{B}x8`` with its norm
  computed from its tables (``ST_norm_from_LUT``, B bytes; set after ``compute_codebook_tables``).

Measured: Recall10@100 of the results as returned; encoding throughput, items/s of encoding
(SGH: `SGHIndex.encode`, the encoder and the decoder's steps; faiss: ``sa_encode``) of
`ENCODE_ITEMS` database rows, one thread (faiss's OpenMP and numpy's BLAS), the median of
`ROUNDS` interleaved rounds in one process; and queries/s of searching the database likewise.
``--cache DIR`` keeps the trained models (SGH's, faiss's before their items are added) there and
takes them from there on a later run of the same split: the figures again without the hours of
training, to measure speed once more on a quieter machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from functools import partial
from pathlib import Path

import faiss
import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ann import median_seconds, zero_padded  # noqa: E402
from bench_equal_bytes import carved  # noqa: E402  (the same validation split)

from sgh.config import FileDatasetConfig  # noqa: E402
from sgh.data import load_split  # noqa: E402
from sgh.data.neighbours import exact_neighbours  # noqa: E402
from sgh.metrics.neighbour_recall import recall_of_results  # noqa: E402
from sgh.scores.byte_decoder import ByteDecoder  # noqa: E402
from sgh.search.sgh_index import SGHIndex  # noqa: E402
from sgh.training.sgh_hasher import SGHHasher  # noqa: E402

# The datasets (under SGH_DATA_DIR) as sgh-train's dataset configs name them.
DATASETS = {
    "mnist": {"path": "mnist/mnist.npz"},
    "cifar10_gist": {"path": "cifar10_gist/cifar10_gist512.npz", "query_selection": "per_class"},
    "siftsmall": {"path": "siftsmall/siftsmall.npz", "n_queries": 100},
    "glove50": {"path": "glove50/glove-50-angular.hdf5"},
}
K = 100
# SGH's encodings measured, cheapest first: the validated ones, and ICM's full sweeps.
ENCODINGS = ("encoder", "flip4", "flip5", "flip6", "icm1", "icm2", "local_search")
TEST_QUERIES = 1_000  # at most, of a test split (glove has 10,000)
ENCODE_ITEMS, ROUNDS = 10_000, 3


def data(name: str, split: str, data_dir: str) -> tuple[np.ndarray, ...]:
    """(queries, database, training rows) of `split` (module doc), float32 as the model sees
    them (unit vectors for an angular dataset)."""
    settings = DATASETS[name]
    loaded = load_split(FileDatasetConfig(name=name, **{**settings, "path": os.path.join(
        data_dir, settings["path"])}))
    if split == "validation":
        return carved(np.asarray(loaded.train, np.float32))
    return (np.asarray(loaded.query[:TEST_QUERIES], np.float32),
            np.asarray(loaded.database, np.float32), np.asarray(loaded.train, np.float32))


class Method:
    """A way to code the database: ``encode(rows)`` its codes, ``searcher(database)`` a
    search of the queries' first `K` ids over it (indexing the whole database)."""

    def __init__(self, name: str, code_bytes: float, encode, searcher):
        self.name, self.code_bytes, self.encode, self.searcher = name, code_bytes, encode, searcher


def sgh_methods(hasher: SGHHasher, encodings, label: str) -> list[Method]:
    methods = []
    for encoding in encodings:
        def make(database, encoding=encoding):
            index = SGHIndex(hasher, mode="bytes", encoding=encoding)
            index.add(database)
            return lambda queries: index.search(queries, K)[1]

        encoder = SGHIndex(hasher, mode="bytes", encoding=encoding)
        methods.append(Method(f"{label}, {encoding}", hasher.n_bits / 8, encoder.encode, make))
    return methods


def random_start_method(fit: np.ndarray, bits: int) -> Method:
    """The ablation (module doc): the byte decoder fitted from random codes, LSQ's start."""
    def random_codes(n: int, seed: int) -> np.ndarray:
        codes = np.random.default_rng(seed).integers(0, 256, (n, bits // 8), dtype=np.uint8)
        return codes

    decoder = ByteDecoder.fit(fit, random_codes(len(fit), 0), bits)

    def encode(rows: np.ndarray) -> np.ndarray:
        return decoder.encode(rows, random_codes(len(rows), 1), "local_search")

    def make(database):
        from sgh.scores.asymmetric_index import AsymmetricIndex

        index = AsymmetricIndex(decoder)
        index.add(encode(database))
        return lambda queries: index.search(queries, K)[1]

    return Method("byte decoder from random codes (LSQ's start), local_search", bits / 8,
                  encode, make)


def faiss_method(key: str, n_bytes: int, fit: np.ndarray, cached: Path | None) -> Method:
    """faiss's ``key`` at ``n_bytes`` code bytes (module doc), trained on ``fit`` (or read from
    ``cached``, where it is then written)."""
    dim = fit.shape[1]
    pad = (lambda rows: zero_padded(rows, n_bytes)) if key.startswith("OPQ") else (
        lambda rows: rows)
    width = pad(fit[:1]).shape[1]
    if key == "LSQ_LUT":
        index = faiss.IndexLocalSearchQuantizer(width, n_bytes, 8, faiss.METRIC_L2,
                                                faiss.AdditiveQuantizer.ST_norm_from_LUT)
        name, stored = f"faiss LSQ{n_bytes}x8, norm from its tables", n_bytes
    else:
        index = faiss.index_factory(width, key)
        name = f"faiss {key}"
        stored = None
    if cached is not None and cached.exists():
        index = faiss.read_index(str(cached))
    else:
        index.train(pad(fit))
        if cached is not None:
            faiss.write_index(index, str(cached))
    if key == "LSQ_LUT":
        index.aq.compute_codebook_tables()
    stored = index.sa_code_size() if stored is None else stored
    if dim != width:
        name += f" (dims padded to {width})"

    def make(database):
        index.reset()
        index.add(pad(database))
        return lambda queries: index.search(pad(queries), K)[1]

    return Method(name, stored, lambda rows: index.sa_encode(pad(rows)), make)


def hasher(cached: Path | None, **params) -> SGHHasher:
    """`SGHHasher(**params)` fitted on ``params["X"]``, or read from ``cached`` (then saved)."""
    if cached is not None and cached.exists():
        return SGHHasher.load(cached)
    features = params.pop("X")
    fitted = SGHHasher(**params).fit(features)
    if cached is not None:
        fitted.save(cached)
    return fitted


def measured(name: str, bits: int, split: str, data_dir: str, quick: bool,
             cache: Path | None = None) -> dict:
    """Every method's figures on one dataset at ``bits`` (module doc), printed as they come."""
    queries, database, fit = data(name, split, data_dir)
    if quick:
        queries, database, fit = queries[:200], database[:3000], fit[:3000]
    truth = exact_neighbours(queries, database, 10, "euclidean")
    n_bytes = bits // 8
    steps = {"steps": 300, "validation_every": 100} if quick else {}
    prefix = f"{name}-{split}-{bits}{'-quick' if quick else ''}"

    def cached(kind: str) -> Path | None:
        return None if cache is None else cache / f"{prefix}-{kind}"

    started = time.perf_counter()
    trained = hasher(cached("bytes"), X=fit, n_bits=bits, decoder="bytes", random_state=0,
                     **steps)
    linear = hasher(cached("linear"), X=fit, n_bits=bits, random_state=0, **steps)
    training_seconds = time.perf_counter() - started
    methods = [*sgh_methods(trained, ENCODINGS, "SGH byte decoder, trained"),
               *sgh_methods(linear, ["local_search"], "SGH linear, decoder fitted after"),
               random_start_method(fit, bits)]
    for key in (f"OPQ{n_bytes},PQ{n_bytes}", f"RQ{n_bytes}x8_Nqint8",
                f"LSQ{n_bytes}x8_Nqint8", "LSQ_LUT"):
        methods.append(faiss_method(key, n_bytes, fit, cached(f"{key}.faiss")))
    sample = database[:ENCODE_ITEMS]
    results = {}
    searches = []
    for method in methods:
        search = method.searcher(database)
        results[method.name] = {"bytes_per_item": method.code_bytes,
                                "recall10@100": recall_of_results(search(queries), truth)}
        searches.append(partial(search, queries))
    encode_seconds = median_seconds([partial(method.encode, sample) for method in methods],
                                    ROUNDS)
    search_seconds = median_seconds(searches, ROUNDS)
    for method, encoding, searching in zip(methods, encode_seconds, search_seconds, strict=True):
        results[method.name].update(encoded_per_s=round(len(sample) / encoding, 1),
                                    queries_per_s=round(len(queries) / searching, 1))
    result = {"dataset": name, "bits": bits, "split": split, "queries": len(queries),
              "database": len(database), "fitted_on": len(fit),
              "validated_encoding": trained.scores_.encoding,
              "sgh_validation_by_encoding": trained.scores_.encodings,
              "sgh_training_seconds": round(training_seconds, 1),  # 0-ish: read from --cache
              "figure": ("Recall10@100 of exact Euclidean 10-NN (ids as returned); items/s "
                         f"encoding {len(sample)} database rows and queries/s, one thread, "
                         f"median of {ROUNDS} interleaved rounds"),
              "methods": results}
    print(f"\n{name}, {bits} bits, {split} split ({len(queries)} queries, {len(database)} "
          f"database items, trained on {len(fit)}; SGH's validated encoding: "
          f"{result['validated_encoding']})", flush=True)
    print(f"  {'method':<62} {'bytes':>5} {'R10@100':>8} {'encoded/s':>10} {'queries/s':>10}")
    for method_name, value in results.items():
        print(f"  {method_name:<62} {value['bytes_per_item']:>5g} {value['recall10@100']:>8.4f} "
              f"{value['encoded_per_s']:>10,.0f} {value['queries_per_s']:>10,.0f}", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--bits", nargs="+", type=int, default=[32, 64])
    parser.add_argument("--split", choices=("validation", "test"), default="validation")
    parser.add_argument("--json", help="write every figure here")
    parser.add_argument("--cache", type=Path, help="keep (and reuse) the trained models here")
    parser.add_argument("--quick", action="store_true",
                        help="a few hundred steps on a few thousand rows: a smoke test")
    args = parser.parse_args()
    data_dir = os.environ.get("SGH_DATA_DIR")
    if not data_dir:
        raise SystemExit("set SGH_DATA_DIR to the folder holding the datasets")
    faiss.omp_set_num_threads(1)
    if args.cache:
        args.cache.mkdir(parents=True, exist_ok=True)
    results = []
    with threadpool_limits(1):
        for name in args.datasets:
            for bits in args.bits:
                results.append(measured(name, bits, args.split, data_dir, args.quick,
                                        args.cache))
                if args.json:  # after each: a long run's figures are kept as they come
                    Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
