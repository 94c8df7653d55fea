"""Benchmark of the evaluation engine against faiss exact binary search, in one run.

Random packed codes (generated directly packed: no unpacked bit matrix) and random labels:

* tie-aware mAP@all (:func:`sgh.metrics.mean_average_precision`) with 1 worker and with the
  default number of workers;
* hash lookup precision within radius 2 (:func:`sgh.metrics.hash_lookup`);
* every label metric from one scan (:func:`sgh.metrics.evaluate_labels`);
* top-100 search with :class:`sgh.search.HammingIndex` (skipped if it does not import) and with
  faiss ``IndexBinaryFlat`` on the same codes;
* tie-aware mAP@all of the same queries against the first 69,000 database codes (the size of the
  MNIST protocol's database);

and prints (query, database item) pairs per second, the ratio mAP@all / faiss top-100, and the
peak resident memory. ``--json PATH`` also writes the numbers.

    python scripts/bench_eval.py [--json PATH] [--n-database 1000000] [--n-queries 1000] [--bits 64]
"""

from __future__ import annotations

import argparse
import json
import resource
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


def top_k_search_seconds(index, queries: np.ndarray, k: int) -> float:
    index.search(queries[:1], k)  # warm-up: lazily built structures are not the search
    return timed(index.search, queries, k)[1]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--n-database", type=int, default=1_000_000)
    parser.add_argument("--n-queries", type=int, default=1000)
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--labels", type=int, default=10, help="number of classes")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    database = random_codes(rng, args.n_database, args.bits)
    queries = random_codes(rng, args.n_queries, args.bits)
    database_labels = rng.integers(0, args.labels, args.n_database)
    query_labels = rng.integers(0, args.labels, args.n_queries)
    pairs = args.n_queries * args.n_database
    labelled = (queries, database, args.bits, query_labels, database_labels)
    results: dict = {
        "n_database": args.n_database,
        "n_queries": args.n_queries,
        "bits": args.bits,
        "labels": args.labels,
        "workers": args.workers,
    }
    rows = []

    def record(name: str, key: str, seconds: float, n_pairs: int = pairs) -> None:
        results[f"{key}_seconds"] = seconds
        results[f"{key}_pairs_per_s"] = n_pairs / seconds
        rows.append((name, seconds, n_pairs / seconds))

    single, seconds = timed(mean_average_precision, *labelled, workers=1)
    record("tie-aware mAP@all, 1 worker", "map_1_worker", seconds)
    result, seconds = timed(mean_average_precision, *labelled, workers=args.workers)
    record(f"tie-aware mAP@all, {args.workers} workers", "map", seconds)
    assert result["map"] == single["map"], "1 and n workers must give identical results"
    results["map"] = result["map"]
    results["map_thread_speedup"] = results["map_1_worker_seconds"] / results["map_seconds"]

    lookup, seconds = timed(hash_lookup, *labelled, radius=2, workers=args.workers)
    record("radius-2 lookup precision/recall", "radius", seconds)
    results["lookup_precision_r2"] = lookup["precision"]

    combined, seconds = timed(
        evaluate_labels, *labelled, map_k=(100, 1000), pr_curve=True, workers=args.workers
    )
    record("evaluate_labels: mAP@all, mAP@100/1000, P/R@100/1000, r2, PR curve", "all", seconds)
    results["evaluate_labels"] = {k: v for k, v in combined.items() if k != "pr_curve"}

    try:
        from sgh.search import HammingIndex
    except ImportError as error:  # another module of the project; may not exist yet
        print(f"sgh.search top-100: skipped ({error})")
        results["search_pairs_per_s"] = None
    else:
        index = HammingIndex(args.bits)
        index.add(database)
        record(
            "sgh.search.HammingIndex top-100", "search", top_k_search_seconds(index, queries, 100)
        )

    import faiss

    faiss_index = faiss.IndexBinaryFlat(8 * database.shape[1])
    faiss_index.add(database)
    record(
        f"faiss IndexBinaryFlat top-100 ({faiss.omp_get_max_threads()} threads)",
        "faiss",
        top_k_search_seconds(faiss_index, queries, 100),
    )
    results["map_over_faiss"] = results["map_pairs_per_s"] / results["faiss_pairs_per_s"]

    small = min(SMALL_DATABASE, args.n_database)
    small_args = (queries, database[:small], args.bits, query_labels, database_labels[:small])
    _, seconds = timed(mean_average_precision, *small_args, workers=args.workers)
    record(f"tie-aware mAP@all vs {small:,} codes", "small_map", seconds, args.n_queries * small)

    results["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{args.n_queries:,} queries x {args.n_database:,} database codes, {args.bits} bits, "
        f"{args.labels} labels"
    )
    for name, seconds, rate in rows:
        print(f"  {name:<72} {seconds:8.3f} s {rate / 1e6:9.0f} M pairs/s")
    print(f"  mAP@all threads speed-up (1 -> {args.workers}): {results['map_thread_speedup']:.2f}x")
    print(f"  ratio mAP@all / faiss top-100 throughput: {results['map_over_faiss']:.2f}")
    print(f"  peak RSS: {results['peak_rss_mb']:.0f} MB")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
