"""The byte decoder's flat scan on the processor's byte permute against the scalar scan, and
against faiss's `PQ8x4fs` (the 4-byte fast scan): [envelope]'s flat target.

    SGH_DATA_DIR=/path/to/data python scripts/bench_flat_scan.py --runs RUN [RUN ...]
        [--json F] [--rounds 7] [--queries N]

For each finished 32-bit run: `SGHIndex.from_run(run, mode="bytes")` searched for its test
queries (all, or the first N), k = 100, in one call, with `sgh.scores.permute_scan` (where the
processor has AVX-512 VBMI) and with the scalar scan (`permute_scan.AVAILABLE` off), beside a
faiss `PQ8x4fs` built from the run's training set and database. One thread (faiss's OpenMP and
numpy's BLAS); queries/s from the median of --rounds interleaved rounds, each sample at least
50 ms of searches in a row (`bench_ann.median_seconds`). Recall10@100: each query's 10 exact
neighbours (the run's ground truth) among its first 100 results, ids as returned. The two SGH
kernels must return the same scores and ids, to the bit; the script says whether they did.

The target: the byte decoder's flat recall (within 0.002) at no fewer queries/s than `PQ8x4fs`
on MNIST, one thread. Both SGH kernels give the exact scan's results, so its recall is the flat
recall itself; `permute_over_pq8x4fs` is the queries/s ratio that decides it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ann import (  # noqa: E402
    MIN_SAMPLE_SECONDS,
    K,
    groups_of,
    in_memory,
    median_seconds,
    recalls,
    run_config,
    threads,
    zero_padded,
)

from sgh.config import dataset_config_from  # noqa: E402
from sgh.data import load_split  # noqa: E402
from sgh.scores import permute_scan  # noqa: E402
from sgh.search.sgh_index import SGHIndex  # noqa: E402

PERMUTE_AVAILABLE = permute_scan.AVAILABLE  # the search switches it off for the scalar rows


def kernel_search(index: SGHIndex, queries: np.ndarray, permuted: bool):
    def search():
        permute_scan.AVAILABLE = permuted and PERMUTE_AVAILABLE
        try:
            return index.search(queries, K)
        finally:
            permute_scan.AVAILABLE = PERMUTE_AVAILABLE
    return search


def bench_run(run: str, groundtruth: np.ndarray, queries_wanted: int | None,
              rounds: int) -> dict:
    split = load_split(dataset_config_from(run_config(run)["dataset"]))
    queries = np.ascontiguousarray(in_memory(split.query)[:queries_wanted], np.float32)
    groundtruth = groundtruth[: len(queries)]
    index = SGHIndex.from_run(run, mode="bytes")
    if index.bits != 32:
        sys.exit(f"{run}: {index.bits}-bit codes; the flat target compares 4 bytes per item")
    # PQ8x4fs's 8 sub-vectors: zero columns appended up to a multiple of 8, as bench_ann does.
    database, pq_queries = zero_padded(in_memory(split.database), 8), zero_padded(queries, 8)
    pq = faiss.index_factory(database.shape[1], "PQ8x4fs")
    pq.train(zero_padded(in_memory(split.train), 8))
    pq.add(database)
    searches = {
        "SGH byte decoder flat, byte-permute scan": kernel_search(index, queries, True),
        "SGH byte decoder flat, scalar scan": kernel_search(index, queries, False),
        "faiss PQ8x4fs": lambda: pq.search(pq_queries, K),
    }
    results = {name: search() for name, search in searches.items()}
    permuted, scalar = (results[name] for name in list(searches)[:2])
    identical = all(np.array_equal(a.view(np.uint8), b.view(np.uint8))
                    for a, b in zip(permuted, scalar, strict=True))
    seconds = median_seconds(list(searches.values()), rounds, MIN_SAMPLE_SECONDS)
    points = {name: {"queries_per_second": len(queries) / sec,
                     **recalls(results[name][1], groundtruth)}
              for name, sec in zip(searches, seconds, strict=True)}
    qps = [point["queries_per_second"] for point in points.values()]
    return {"run": run, "dataset": run_config(run)["dataset"]["name"],
            "queries": len(queries), "database": len(database),
            "permute_available": PERMUTE_AVAILABLE, "identical_results": identical,
            "points": points, "permute_over_scalar": qps[0] / qps[1],
            "permute_over_pq8x4fs": qps[0] / qps[2]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", nargs="+", required=True,
                        help="finished 32-bit sgh-train run directories")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--queries", type=int, default=None,
                        help="the first this many test queries (default: all)")
    args = parser.parse_args()
    if not PERMUTE_AVAILABLE:
        print("this processor has no AVX-512 VBMI (or numba does not compile for it): both SGH "
              "rows run the scalar scan")
    out = {"conventions": __doc__, "threads": 1, "k": K, "rounds": args.rounds, "runs": []}
    with threads(1):
        for group in groups_of(args.runs):
            for run in group.runs:
                figures = bench_run(run, group.groundtruth, args.queries, args.rounds)
                out["runs"].append(figures)
                print(f"\n{figures['dataset']} ({figures['queries']:,} queries, "
                      f"{figures['database']:,} items, k = {K}, one thread; {run})")
                for name, point in figures["points"].items():
                    print(f"  {name:42s} Recall10@100 {point['recall10@100']:.4f}  "
                          f"{point['queries_per_second']:>9,.0f} queries/s")
                print(f"  same scores and ids, to the bit: {figures['identical_results']}; "
                      f"byte permute / scalar {figures['permute_over_scalar']:.2f}x; "
                      f"byte permute / PQ8x4fs {figures['permute_over_pq8x4fs']:.2f}x")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(out, file, indent=1)
        print(f"json: {args.json}")


if __name__ == "__main__":
    main()
