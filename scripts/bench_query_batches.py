"""Queries per call: the time a query takes when it comes alone or in a batch, SGH's flat indexes
against faiss's at the same bytes.

    SGH_DATA_DIR=/path/to/data python scripts/bench_query_batches.py --runs RUN [RUN ...]
        [--json bench_query_batches.json] [--queries 256]

RUN: a finished `sgh-train` run of SGH at B bits (B a multiple of 8). Indexes of its database:
`SGHIndex.from_run(run, mode="bytes")` (the byte decoder: a few queries a call scan by each
item's one-byte bound of its cross terms, more by the terms computed per tile for all of them),
`SGHIndex.from_run(run)` (the model's scan on faiss's fast-scan kernels), and faiss's
`OPQ{B/8},PQ{B/8}` and `OPQ{B/4},PQ{B/4}x4fs` trained on the run's training set. Each searches
the first --queries test queries for their top 100, in calls of 1, 4, 16 and all of them; the
figure is milliseconds per query: the median of 3 interleaved rounds of all the calls, one
thread (faiss's OpenMP and numpy's BLAS), over the number of queries.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

import faiss

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ann import in_memory, median_seconds, run_config, threads, zero_padded  # noqa: E402

from sgh.config import dataset_config_from  # noqa: E402
from sgh.data import load_split  # noqa: E402
from sgh.search.sgh_index import SGHIndex  # noqa: E402

K, ROUNDS, CALL_SIZES = 100, 3, (1, 4, 16)


def padded_search(index, sub_quantizers: int, rows, k: int):
    return index.search(zero_padded(rows, sub_quantizers), k)


def in_calls(search, queries, size: int) -> None:
    """Every query searched, `size` of them a call."""
    for start in range(0, len(queries), size):
        search(queries[start:start + size], K)


def measured(run_dir: str, n_queries: int) -> dict:
    """One run's milliseconds per query, by index and queries per call (module doc)."""
    split = load_split(dataset_config_from(run_config(run_dir)["dataset"]))
    queries = in_memory(split.query)[:n_queries]
    model_scan = SGHIndex.from_run(run_dir)
    bits = model_scan.bits
    if bits % 8:
        raise SystemExit(f"{run_dir}: {bits} bits; accepted: a multiple of 8")
    searches = {"SGH byte decoder": SGHIndex.from_run(run_dir, mode="bytes").search,
                "SGH model's scan": model_scan.search}
    train, database = in_memory(split.train), in_memory(split.database)
    for key in (f"OPQ{bits // 8},PQ{bits // 8}", f"OPQ{bits // 4},PQ{bits // 4}x4fs"):
        sub_quantizers = int(key.split(",")[0][3:])
        index = faiss.index_factory(zero_padded(train, sub_quantizers).shape[1], key)
        index.train(zero_padded(train, sub_quantizers))
        index.add(zero_padded(database, sub_quantizers))
        searches[f"faiss {key}"] = partial(padded_search, index, sub_quantizers)
    calls = {}
    for name, search in searches.items():
        search(queries, K)  # warm-up: builds the search structures
        for size in (*CALL_SIZES, len(queries)):
            calls[(name, size)] = partial(in_calls, search, queries, size)
    seconds = median_seconds(list(calls.values()), ROUNDS)
    result = {"run": run_dir, "bits": bits, "queries": len(queries), "k": K,
              "figure": "milliseconds per query, one thread", "by_queries_per_call": {}}
    for (name, size), total in zip(calls, seconds, strict=True):
        label = "all" if size == len(queries) else str(size)
        result["by_queries_per_call"].setdefault(name, {})[label] = round(
            1000 * total / len(queries), 4)
    print(f"\n{run_dir} ({bits} bits, {len(queries)} queries, top {K}; {result['figure']})")
    print(f"{'queries per call':<28}" + "".join(f"{label:>9}" for label in
                                                 (*map(str, CALL_SIZES), "all")))
    for name, row in result["by_queries_per_call"].items():
        print(f"{name:<28}" + "".join(f"{value:>9.3f}" for value in row.values()), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", nargs="+", required=True, help="finished sgh-train runs")
    parser.add_argument("--json", help="write every figure here")
    parser.add_argument("--queries", type=int, default=256, help="test queries (default 256)")
    args = parser.parse_args()
    with threads(1):
        results = [measured(run_dir, args.queries) for run_dir in args.runs]
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()
