"""The byte decoder against faiss PQ, OPQ and LSQ at equal bytes, on a validation split carved
from a run's training rows (no test query is read).

    SGH_DATA_DIR=/path/to/data python scripts/bench_equal_bytes.py --runs RUN [RUN ...]
        [--json bench_equal_bytes.json]

RUN: a finished `sgh-train` run of SGH at B bits (B a multiple of 8). `SGHIndex(...,
mode="bytes")` holds B / 8 bytes per item, the codes alone (each item's norm is computed from
its code during the scan), so it is compared with faiss's `PQ{B/8}`, `OPQ{B/8},PQ{B/8}` and
`LSQ{B/8}x8` with its norm computed from the codes as well (faiss's `ST_norm_from_LUT`), and
with faiss's fast-scan forms `PQ{B/4}x4fs` and `OPQ{B/4},PQ{B/4}x4fs` (4-bit sub-quantizers
scanned in SIMD registers, no refinement): the same B / 8 bytes per item. Beside its own scan,
the byte decoder's tables and codes in faiss's `IndexLocalSearchQuantizer`, searched by faiss
with the norm computed from the tables (`ST_norm_from_LUT`, B / 8 bytes), in one byte
(`ST_norm_qint8`, a saved index's `codes.faiss`) or as a float32 (`ST_norm_float`): whether
faiss's kernel does the byte decoder's search at least as fast as ours.

Validation split: the run's training rows as the model saw them (unit vectors for an angular
run), shuffled with a fixed seed: the first 2,000 (a quarter of them at most) are the queries,
the next up to 100,000 (at most half of the rest) the database, the others the rows the byte
decoder is fitted and PQ, OPQ and LSQ trained on (at most 100,000 of them). Ground truth: each
query's 10 nearest database rows by squared Euclidean distance, ties by row. Figure:
Recall10@100, the share of those 10 among the first 100 results, averaged over the queries;
queries/s: all queries in one call, one thread, the median of 3 interleaved rounds. One thread
throughout (OPQ's training differs between thread counts).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from functools import partial
from pathlib import Path

import faiss
import numpy as np
from omegaconf import OmegaConf
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ann import median_seconds, recalls, zero_padded  # noqa: E402

from sgh.config import dataset_config_from  # noqa: E402
from sgh.data import load_split  # noqa: E402
from sgh.data.neighbours import exact_neighbours  # noqa: E402
from sgh.data.similarity import unit_normalised  # noqa: E402
from sgh.scores.score_set import ScoreSet  # noqa: E402
from sgh.search.faiss_codes import additive_quantizer  # noqa: E402
from sgh.search.sgh_index import SGHIndex  # noqa: E402

QUERIES, MAX_DATABASE, MAX_FIT, SEED, K, ROUNDS = 2_000, 100_000, 100_000, 1, 100, 3


def validation_split(run_dir: str, angular: bool) -> tuple[np.ndarray, ...]:
    """(queries, database, fitting rows) from the run's training rows (module doc)."""
    dataset = OmegaConf.to_container(OmegaConf.load(os.path.join(run_dir, "config.yaml")))
    train = np.asarray(load_split(dataset_config_from(dataset["dataset"])).train, np.float32)
    if angular:
        train = unit_normalised(train, "the training rows")
    return carved(train)


def carved(train: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(queries, database, fitting rows) of the training rows, shuffled with `SEED`: the first
    `QUERIES` (a quarter at most), the next `MAX_DATABASE` (half the rest at most), then up to
    `MAX_FIT` (module doc)."""
    rows = np.random.default_rng(SEED).permutation(len(train))
    n_queries = min(QUERIES, len(train) // 4)
    n_database = min(MAX_DATABASE, (len(train) - n_queries) // 2)
    database = rows[n_queries:n_queries + n_database]
    fit = rows[n_queries + n_database:][:MAX_FIT]
    return train[rows[:n_queries]], train[database], train[fit]


def timed(searches: dict[str, object], queries, truth) -> dict[str, dict[str, float]]:
    """Each search's recall and the median queries/s of `ROUNDS` interleaved rounds; a search
    maps the queries to their first K ids."""
    results = {name: {"recall": recalls(search(queries), truth)["recall10@100"]}
               for name, search in searches.items()}
    medians = median_seconds([partial(search, queries) for search in searches.values()], ROUNDS)
    for result, seconds in zip(results.values(), medians, strict=True):
        result["queries_per_s"] = round(len(queries) / seconds, 1)
    return results


def byte_decoder_searches(scores: ScoreSet, database, fit, n_bytes: int) -> dict:
    """The byte decoder's own scan, and faiss's additive-quantizer search of the same tables and
    codes with each way faiss stores or computes the reconstruction's norm."""
    # A byte decoder the run fitted saw every training row, the validation queries and database
    # too: fitted again on the fitting rows alone, as faiss's quantizers are trained.
    index = SGHIndex(dataclasses.replace(scores, byte_decoder=None), mode="bytes")
    index.train(fit)
    index.add(database)
    codes, decoder = index.encode(database), index.byte_decoder
    searches = {f"SGH byte decoder ({n_bytes} B)": lambda queries: index.search(queries, K)[1]}
    for norm, extra in (("ST_norm_from_LUT", 0), ("ST_norm_qint8", 1), ("ST_norm_float", 4)):
        same = same_codes_in_faiss(decoder, codes, norm)
        searches[f"its codes in faiss LSQ, {norm} ({n_bytes} + {extra} B)"] = (
            lambda queries, same=same: same.search(queries, K)[1])
    return searches


def same_codes_in_faiss(decoder, codes: np.ndarray, norm: str):
    """faiss's `IndexLocalSearchQuantizer` holding ``codes`` with the decoder's tables as its
    codebooks and each item's norm as ``norm`` says (faiss's `AdditiveQuantizer.Search_type_t`)."""
    if norm == "ST_norm_qint8":  # what a saved SGHIndex's codes.faiss holds
        return additive_quantizer(decoder, codes)
    index = faiss.IndexLocalSearchQuantizer(decoder.dim, len(decoder.books), 8, faiss.METRIC_L2,
                                            getattr(faiss.AdditiveQuantizer, norm))
    faiss.copy_array_to_vector(np.ascontiguousarray(decoder.books).ravel(), index.aq.codebooks)
    index.aq.is_trained = index.is_trained = True
    stored = codes
    if norm == "ST_norm_float":  # the float32's bytes after the code, as faiss encodes it
        norms = decoder.squared_norms(codes).astype("<f4")
        stored = np.concatenate([codes, norms.view(np.uint8).reshape(-1, 4)], axis=1)
    else:  # ST_norm_from_LUT: the norm from the codebooks' cross products, at search time
        index.aq.compute_codebook_tables()
    index.add_sa_codes(np.ascontiguousarray(stored))
    return index


def quantizer_search(key: str, n_bytes: int, database, fit):
    """A faiss index of ``key`` (LSQ with its norm from the codes: ``n_bytes`` per item), the
    rows padded with zeros to a multiple of PQ's sub-quantizer count where PQ needs it."""
    sub_quantizers = re.search(r"PQ(\d+)", key)

    def pad(rows: np.ndarray) -> np.ndarray:
        return zero_padded(rows, int(sub_quantizers[1])) if sub_quantizers else rows

    width = pad(fit).shape[1]
    if key.startswith("LSQ"):
        index = faiss.IndexLocalSearchQuantizer(width, n_bytes, 8, faiss.METRIC_L2,
                                                faiss.AdditiveQuantizer.ST_norm_from_LUT)
    else:
        index = faiss.index_factory(width, key)
    index.train(pad(fit))
    if key.startswith("LSQ"):
        index.aq.compute_codebook_tables()
    if index.sa_code_size() != n_bytes:
        raise AssertionError(f"{key}: {index.sa_code_size()} bytes per item, not {n_bytes}")
    index.add(pad(database))
    return lambda queries: index.search(pad(queries), K)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", nargs="+", required=True, help="finished sgh-train runs")
    parser.add_argument("--json", help="write every figure here")
    args = parser.parse_args()
    faiss.omp_set_num_threads(1)  # OPQ's training differs between thread counts
    with threadpool_limits(1):  # numpy's BLAS too: the byte decoder's fit and query tables
        results = [measured(run_dir) for run_dir in args.runs]
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)


def measured(run_dir: str) -> dict:
    """One run's figures (module doc), printed as they come."""
    scores = ScoreSet.load(os.path.join(run_dir, "asymmetric.npz"))
    bits = scores.scores["encoder"].bits
    if bits % 8:
        raise SystemExit(f"{run_dir}: {bits} bits; accepted: a multiple of 8")
    queries, database, fit = validation_split(run_dir, scores.similarity == "angular")
    truth = exact_neighbours(queries, database, 10, "euclidean")
    n_bytes = bits // 8
    searches = byte_decoder_searches(scores, database, fit, n_bytes)
    nibbles = 2 * n_bytes
    for key in (f"PQ{n_bytes}", f"OPQ{n_bytes},PQ{n_bytes}", f"LSQ{n_bytes}x8",
                f"PQ{nibbles}x4fs", f"OPQ{nibbles},PQ{nibbles}x4fs"):
        searches[f"faiss {key} ({n_bytes} B)"] = quantizer_search(key, n_bytes, database, fit)
    result = {"run": run_dir, "bits": bits, "queries": len(queries), "database": len(database),
              "fitted_on": len(fit),
              "figure": "validation Recall10@100, ties by row; queries/s, one thread",
              **timed(searches, queries, truth)}
    print(f"\n{run_dir} ({bits} bits; {result['figure']}, {len(queries)} training rows as "
          f"queries against {len(database)} others)", flush=True)
    for name, value in result.items():
        if isinstance(value, dict):
            print(f"  {name:<52} {value['recall']:.4f}  {value['queries_per_s']:>9,.0f} q/s",
                  flush=True)
    return result


if __name__ == "__main__":
    main()
