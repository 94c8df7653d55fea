"""Benchmark of the evaluation engine against faiss exact binary search, side by side in one run.

Random packed codes (generated directly packed: no unpacked bit matrix) and random labels:

* tie-aware mAP@all (:func:`sgh.metrics.mean_average_precision`) with 1 worker and with the
  default number of workers, and mAP@all with ties broken by database index;
* hash lookup precision within radius 2 (:func:`sgh.metrics.hash_lookup`);
* every label metric from one scan (:func:`sgh.metrics.evaluate_labels`);
* top-100 search with faiss ``IndexBinaryFlat`` on the same codes (the scan of
  ``SGHIndex(mode="hamming")``), with as many threads as our workers and with 1 thread;
* tie-aware mAP@all of the same queries against the first 69,000 database codes (the size of the
  MNIST protocol's database).

Every measurement runs ``--repeats`` times, round-robin (each round runs all of them once, mAP@all
right next to faiss), so a shared machine's changing load hits them alike; the report gives the
median time of each, (query, database item) pairs per second, the ratio of the medians of
mAP@all and faiss top-100 throughput (same number of threads, 1 vs 1, and against faiss's
faster thread setting), the first call's
time (numba kernels loaded from the on-disk cache, or compiled), the load average, and the peak
resident memory. ``--json PATH`` also writes the numbers.

    python scripts/bench_eval.py [--json PATH] [--repeats 5] [--n-database 1000000]
        [--n-queries 1000] [--bits 64] [--labels 10] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from sgh.metrics import DEFAULT_WORKERS, evaluate_labels, hash_lookup, mean_average_precision

SMALL_DATABASE = 69_000


def random_codes(rng: np.random.Generator, n: int, bits: int) -> np.ndarray:
    """``(n, ceil(bits/8))`` uint8 random packed codes with zero padding bits."""
    codes = rng.integers(0, 256, size=(n, -(-bits // 8)), dtype=np.uint8)
    padding = -bits % 8
    codes[:, -1] &= np.uint8((0xFF << padding) & 0xFF)
    return codes


def timed(function, *args, **kwargs):
    started = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - started


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--repeats", type=int, default=5, help="rounds; medians are reported")
    parser.add_argument("--n-database", type=int, default=1_000_000)
    parser.add_argument("--n-queries", type=int, default=1000)
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--labels", type=int, default=10, help="number of classes")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import faiss  # a benchmark (dev) dependency, not needed by sgh itself

    rng = np.random.default_rng(args.seed)
    database = random_codes(rng, args.n_database, args.bits)
    queries = random_codes(rng, args.n_queries, args.bits)
    database_labels = rng.integers(0, args.labels, args.n_database)
    query_labels = rng.integers(0, args.labels, args.n_queries)
    pairs = args.n_queries * args.n_database
    labelled = (queries, database, args.bits, query_labels, database_labels)
    small = min(SMALL_DATABASE, args.n_database)
    small_labelled = (queries, database[:small], args.bits, query_labels, database_labels[:small])

    results: dict = {
        "n_database": args.n_database,
        "n_queries": args.n_queries,
        "bits": args.bits,
        "labels": args.labels,
        "workers": args.workers,
        "repeats": args.repeats,
        "load_average_before": os.getloadavg()[0],
    }
    # First call: numba loads the kernels from its cache (or compiles them: a fresh checkout).
    _, results["jit_first_call_seconds"] = timed(
        mean_average_precision,
        queries[:8],
        database[:8],
        args.bits,
        query_labels[:8],
        database_labels[:8],
        ties="stable",
    )

    faiss_index = faiss.IndexBinaryFlat(8 * database.shape[1])
    faiss_index.add(database)

    def faiss_search(threads: int):
        faiss.omp_set_num_threads(threads)
        return faiss_index.search(queries, 100)

    # (name, key, function, pairs); mAP@all and faiss run next to each other in every round.
    measurements = [
        (
            f"tie-aware mAP@all, {args.workers} workers",
            "map",
            lambda: mean_average_precision(*labelled, workers=args.workers),
            pairs,
        ),
        (
            f"faiss IndexBinaryFlat top-100, {args.workers} threads",
            "faiss",
            lambda: faiss_search(args.workers),
            pairs,
        ),
        (
            "tie-aware mAP@all, 1 worker",
            "map_1_worker",
            lambda: mean_average_precision(*labelled, workers=1),
            pairs,
        ),
        (
            "faiss IndexBinaryFlat top-100, 1 thread",
            "faiss_1_thread",
            lambda: faiss_search(1),
            pairs,
        ),
        (
            "mAP@all, ties by database index",
            "map_stable",
            lambda: mean_average_precision(*labelled, ties="stable", workers=args.workers),
            pairs,
        ),
        (
            "radius-2 lookup precision/recall",
            "radius",
            lambda: hash_lookup(*labelled, radius=2, workers=args.workers),
            pairs,
        ),
        (
            "evaluate_labels: mAP@all, mAP@100/1000, P/R@100/1000, r2, PR curve",
            "all",
            lambda: evaluate_labels(
                *labelled, map_k=(100, 1000), pr_curve=True, workers=args.workers
            ),
            pairs,
        ),
        (
            f"tie-aware mAP@all vs {small:,} codes",
            "small_map",
            lambda: mean_average_precision(*small_labelled, workers=args.workers),
            args.n_queries * small,
        ),
    ]
    faiss_search(1)  # warm-up
    seconds: dict[str, list[float]] = {key: [] for _, key, _, _ in measurements}
    outputs: dict[str, list] = {key: [] for _, key, _, _ in measurements}
    for _ in range(args.repeats):
        for _, key, function, _ in measurements:
            output, elapsed = timed(function)
            seconds[key].append(elapsed)
            outputs[key].append(output)
    faiss.omp_set_num_threads(args.workers)

    # Exact integer counts underneath: every repeat and worker count gives the same numbers.
    maps = {result["map"] for key in ("map", "map_1_worker") for result in outputs[key]}
    assert len(maps) == 1, f"mAP@all differs between repeats or worker counts: {maps}"
    results["map"] = maps.pop()
    results["map_stable"] = outputs["map_stable"][0]["map"]
    results["lookup_precision_r2"] = outputs["radius"][0]["precision"]

    rows = []
    for name, key, _, n_pairs in measurements:
        median = statistics.median(seconds[key])
        results[f"{key}_seconds"] = median
        results[f"{key}_seconds_all"] = seconds[key]
        results[f"{key}_pairs_per_s"] = n_pairs / median
        rows.append((name, median, n_pairs / median))
    results["map_over_faiss"] = results["map_pairs_per_s"] / results["faiss_pairs_per_s"]
    results["map_over_faiss_1_thread"] = (
        results["map_1_worker_pairs_per_s"] / results["faiss_1_thread_pairs_per_s"]
    )
    # On a shared machine faiss's OpenMP threads can lose to its single thread (spinning at
    # barriers while a sibling thread waits for a core): also compare with faiss at its best.
    results["faiss_best_pairs_per_s"] = max(
        results["faiss_pairs_per_s"], results["faiss_1_thread_pairs_per_s"]
    )
    results["map_over_faiss_best"] = results["map_pairs_per_s"] / results["faiss_best_pairs_per_s"]
    results["map_thread_speedup"] = results["map_1_worker_seconds"] / results["map_seconds"]
    results["load_average_after"] = os.getloadavg()[0]
    results["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    print(
        f"{args.n_queries:,} queries x {args.n_database:,} database codes, {args.bits} bits, "
        f"{args.labels} labels; median of {args.repeats} rounds"
    )
    for name, median, rate in rows:
        print(f"  {name:<72} {median:8.3f} s {rate / 1e6:9.0f} M pairs/s")
    print(
        f"  ratio mAP@all / faiss top-100 throughput, {args.workers} threads each: "
        f"{results['map_over_faiss']:.2f}; 1 thread each: "
        f"{results['map_over_faiss_1_thread']:.2f}; mAP@all ({args.workers} workers) / "
        f"faiss's faster setting: {results['map_over_faiss_best']:.2f}"
    )
    print(f"  mAP@all threads speed-up (1 -> {args.workers}): {results['map_thread_speedup']:.2f}x")
    print(
        f"  first call (numba kernels from cache or compiled): "
        f"{results['jit_first_call_seconds']:.2f} s"
    )
    print(
        f"  load average (1 min) before / after: {results['load_average_before']:.2f} / "
        f"{results['load_average_after']:.2f}"
    )
    print(f"  peak RSS: {results['peak_rss_mb']:.0f} MB")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
