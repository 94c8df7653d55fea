"""Threads: `SGHIndex.search` in every mode on 1 thread and on more, the same results and the
queries/s each gives.

    SGH_DATA_DIR=/path/to/data python scripts/bench_threads.py --runs RUN [RUN ...]
        [--threads 1 2] [--queries 1000] [--json bench_threads.json]

RUN: a finished `sgh-train` run of SGH. Indexes of its database, each from `SGHIndex.from_run`:
the model's scan, its two-stage search and its Hamming ranking (flat), the model's scan in
inverted lists (round(4 sqrt(n)) lists, nprobe 8), the byte decoder's scan and its inverted
lists (the same lists' count, nprobe 8). Each searches the
first --queries test queries for their top 100 in one call, with faiss's thread count
(`faiss.omp_set_num_threads`, which `SGHIndex.search` follows in every mode) and numpy's BLAS
both set to each of --threads. Figures: queries/s, the median of 3 rounds in which every index
and thread count takes its turn (interleaved, so that the machine's noise falls on all alike),
and each count's speed-up over one thread; the results must be identical at every count (the
script stops otherwise). The machine's cores and load average are recorded: on a machine
shared with other work, a second thread finds its core busy part of the time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ann import in_memory, median_seconds, run_config, threads  # noqa: E402

from sgh.config import dataset_config_from  # noqa: E402
from sgh.data import load_split  # noqa: E402
from sgh.search.sgh_index import SGHIndex  # noqa: E402

K, ROUNDS, NPROBE = 100, 3, 8


def indexes(run_dir: str, n_database: int) -> dict[str, tuple[SGHIndex, dict]]:
    """The indexes of the module doc, by label, each with the settings its search sets first."""
    nlist = max(1, round(4 * math.sqrt(n_database)))
    built = {"model scan": (SGHIndex.from_run(run_dir), {}),
             "model two-stage": (SGHIndex.from_run(run_dir, mode="two_stage"), {}),
             "model Hamming": (SGHIndex.from_run(run_dir, mode="hamming"), {}),
             f"model IVF{nlist} scan": (SGHIndex.from_run(run_dir, nlist=nlist),
                                        {"nprobe": NPROBE}),
             "byte decoder scan": (SGHIndex.from_run(run_dir, mode="bytes"), {}),
             f"byte decoder IVF{nlist}": (SGHIndex.from_run(run_dir, mode="bytes",
                                                         nlist=nlist), {"nprobe": NPROBE})}
    return built


def measured(run_dir: str, thread_counts: list[int], n_queries: int) -> dict:
    split = load_split(dataset_config_from(run_config(run_dir)["dataset"]))
    queries = np.ascontiguousarray(in_memory(split.query)[:n_queries], np.float32)
    with threads(1):  # built on one thread, as bench_ann builds
        built = indexes(run_dir, len(split.database))

    def search(label: str, count: int):
        index, settings = built[label]
        for name, value in settings.items():
            setattr(index, name, value)
        with threads(count):
            return index.search(queries, K)

    results = {}
    for label in built:
        answers = [search(label, count) for count in thread_counts]  # also the warm-up
        for count, (D, I) in zip(thread_counts, answers, strict=True):
            if not (np.array_equal(I, answers[0][1]) and np.array_equal(D, answers[0][0])):
                sys.exit(f"{label}: {count} threads gave other results than "
                         f"{thread_counts[0]}")
        results[label] = {}
    load_before = os.getloadavg()
    pairs = [(label, count) for label in built for count in thread_counts]
    seconds = median_seconds([partial(search, label, count) for label, count in pairs], ROUNDS)
    for (label, count), taken in zip(pairs, seconds, strict=True):
        results[label][str(count)] = {"queries_per_second": round(len(queries) / taken, 1)}
    for by_count in results.values():
        one = by_count[str(thread_counts[0])]["queries_per_second"]
        for figures in by_count.values():
            figures["speedup"] = round(figures["queries_per_second"] / one, 2)
    return {"run": run_dir, "queries": len(queries), "k": K, "cpu_count": os.cpu_count(),
            "load_average_before": load_before, "load_average_after": os.getloadavg(),
            "identical_results": True, "indexes": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", nargs="+", required=True, help="finished sgh-train runs")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                        help="thread counts, the first the reference (default 1 2)")
    parser.add_argument("--queries", type=int, default=1000, help="test queries searched")
    parser.add_argument("--json", help="write every figure here")
    args = parser.parse_args()
    results = []
    for run_dir in args.runs:
        result = measured(run_dir, args.threads, args.queries)
        results.append(result)
        print(f"\n{run_dir}: {result['queries']} queries, top {K}, queries/s (speed-up over "
              f"{args.threads[0]} thread(s)); {result['cpu_count']} cores, load average "
              f"{result['load_average_before'][0]:.2f} before, "
              f"{result['load_average_after'][0]:.2f} after; results identical at every count")
        for label, by_count in result["indexes"].items():
            cells = "  ".join(f"{count}: {figures['queries_per_second']:>9,.0f} "
                              f"({figures['speedup']:.2f}x)"
                              for count, figures in by_count.items())
            print(f"  {label:<28} {cells}", flush=True)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()
