"""The byte decoder against faiss PQ and OPQ at equal bytes, on a validation split carved from a
run's training rows (no test query is read).

    SGH_DATA_DIR=/path/to/data python scripts/bench_equal_bytes.py --runs RUN [RUN ...]
        [--json bench_equal_bytes.json]

RUN: a finished `sgh-train` run of SGH at B bits (B a multiple of 8). The byte decoder stores
B / 8 code bytes and the reconstruction's norm, one more byte (faiss's `ST_norm_qint8`), so it is
compared with faiss's `PQ{B/8+1}` and `OPQ{B/8+1},PQ{B/8+1}` (the same B / 8 + 1 bytes) and,
for reference, `PQ{B/8}` and `OPQ{B/8},PQ{B/8}` (one byte fewer). A 24-bit run's byte decoder
takes 4 bytes, a 32-bit run's 5.

Validation split: the run's training rows as the model saw them (unit vectors for an angular
run), shuffled with a fixed seed: the first 2,000 (a quarter of them at most) are the queries,
the next up to 100,000 (at most half of the rest) the database, the others the rows the byte
decoder is fitted and PQ/OPQ trained on (at most 100,000 of them). Ground truth: each query's
10 nearest database rows by squared Euclidean distance, ties by row. Figure: Recall10@100, the
share of those 10 among the first 100 results, averaged over the queries; for the byte decoder
with its norm as stored in one byte (min-max over the database, 256 levels) and as a float.
One thread (OPQ's training differs between thread counts).
"""

from __future__ import annotations

import argparse
import json
import os

import faiss
import numpy as np
from omegaconf import OmegaConf

from sgh.config import dataset_config_from
from sgh.data import load_split
from sgh.data.neighbours import exact_neighbours
from sgh.data.similarity import unit_normalised
from sgh.search.score_set import ScoreSet
from sgh.search.sgh_index import SGHIndex

QUERIES, MAX_DATABASE, MAX_FIT, SEED, K = 2_000, 100_000, 100_000, 1, 100


def validation_split(run_dir: str, angular: bool) -> tuple[np.ndarray, ...]:
    """(queries, database, fitting rows) from the run's training rows (module doc)."""
    dataset = OmegaConf.to_container(OmegaConf.load(os.path.join(run_dir, "config.yaml")))
    train = np.asarray(load_split(dataset_config_from(dataset["dataset"])).train, np.float32)
    if angular:
        train = unit_normalised(train, "the training rows")
    rows = np.random.default_rng(SEED).permutation(len(train))
    n_queries = min(QUERIES, len(train) // 4)
    n_database = min(MAX_DATABASE, (len(train) - n_queries) // 2)
    database = rows[n_queries:n_queries + n_database]
    fit = rows[n_queries + n_database:][:MAX_FIT]
    return train[rows[:n_queries]], train[database], train[fit]


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float((found[:, :K, None] == truth[:, None, :]).any(axis=1).mean())


def byte_decoder_recalls(scores: ScoreSet, queries, database, fit, truth) -> dict[str, float]:
    index = SGHIndex(scores, decoder="bytes")
    index.train(fit)
    decoder, codes = index.byte_decoder, index.encode(database)
    tables = decoder.lookup_tables(queries)  # (nq, bytes, 256): -2 <q, C_j[v]>
    products = sum(table[:, codes[:, j]] for j, table in enumerate(tables.transpose(1, 0, 2)))
    norms = decoder.item_norms(codes)
    low, high = float(norms.min()), float(norms.max())
    step = (high - low) / 255 or 1.0
    one_byte = low + step * np.round((norms - low) / step)
    ranked = {"float norm": norms, "one-byte norm": one_byte}
    return {name: recall(np.argsort(products + norm[None], axis=1, kind="stable"), truth)
            for name, norm in ranked.items()}


def quantizer_recall(key: str, n_bytes: int, queries, database, fit, truth) -> float:
    pad = lambda rows: np.pad(rows, ((0, 0), (0, -rows.shape[1] % n_bytes)))  # noqa: E731
    index = faiss.index_factory(pad(fit).shape[1], key)
    index.train(pad(fit))
    index.add(pad(database))
    return recall(index.search(pad(queries), K)[1], truth)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", nargs="+", required=True, help="finished sgh-train runs")
    parser.add_argument("--json", help="write every figure here")
    args = parser.parse_args()
    faiss.omp_set_num_threads(1)  # OPQ's training differs between thread counts
    results = []
    for run_dir in args.runs:
        scores = ScoreSet.load(os.path.join(run_dir, "asymmetric.npz"))
        bits = scores.scores["encoder"].bits
        if bits % 8:
            raise SystemExit(f"{run_dir}: {bits} bits; accepted: a multiple of 8")
        queries, database, fit = validation_split(run_dir, scores.similarity == "angular")
        truth = exact_neighbours(queries, database, 10, "euclidean")
        result = {"run": run_dir, "bits": bits, "queries": len(queries),
                  "database": len(database), "fitted_on": len(fit),
                  "figure": "validation Recall10@100, ties by row",
                  **{f"byte decoder ({bits // 8} + 1 B, {name})": value for name, value in
                     byte_decoder_recalls(scores, queries, database, fit, truth).items()}}
        for n_bytes in (bits // 8, bits // 8 + 1):
            for key in (f"PQ{n_bytes}", f"OPQ{n_bytes},PQ{n_bytes}"):
                result[f"faiss {key} ({n_bytes} B)"] = quantizer_recall(
                    key, n_bytes, queries, database, fit, truth)
        print(f"\n{run_dir} ({bits} bits; {result['figure']}, {len(queries)} training rows as "
              f"queries against {len(database)} others)")
        for name, value in result.items():
            if isinstance(value, float):
                print(f"  {name:<42} {value:.4f}")
        results.append(result)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()
