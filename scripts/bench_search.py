"""Search beyond Hamming ranking: scan speed against faiss, and quality in every ranking.

    SGH_DATA_DIR=../shared/data python scripts/bench_search.py --json bench_search.json
        [--datasets mnist cifar10_gist] [--bits 32] [--skip-quality] [--skip-speed]

1. Speed, one thread each, side by side in one process (medians of --repeats runs):
   1,000 queries x 1,000,000 random 32-bit codes, top 100:
   - our asymmetric scan (`AsymmetricIndex.search`: per-query lookup tables over the 4 code
     bytes, one float per item);
   - our Hamming scan (`HammingIndex.search`);
   - faiss `IndexPQ(d=32, M=4, nbits=8)`: the same 4 bytes per item, its ADC lookup-table scan.
   `asymmetric_over_pq` = our asymmetric pairs/s over faiss's (target >= 1).
2. Quality at --bits on each dataset, the test queries of its protocol: every method (SGH, its
   default recipe with validation-selected weights; ITQ, PCAH, LSH, SH, SpH) in every ranking
   (hamming; asymmetric; rerank: a Hamming shortlist of 1% of the database rescored by the
   decoder / projection score, and by exact distances), through `sgh-train`'s pipeline and
   `sgh-eval run=DIR`'s re-scoring. Reference row: faiss IndexPQ at the same bytes, trained on
   the training set (ranking by its ADC distance). Recall10@100: exact Euclidean 10-NN, tie-aware
   for the Hamming ranking, ties by id otherwise; mAP@all: label relevance, same conventions.
   Also: Recall10@100 against the shortlist size, and queries/s of the two-stage search against
   PQ's (one thread) on each dataset's database (the moonshot: PQ's recall at >= 2x its q/s).
"""

# ruff: noqa: E741  (``D, I`` is faiss's name for search results)
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")  # faiss: one thread, as ours

import faiss  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from sgh.artifacts.codes_file import load_codes  # noqa: E402
from sgh.cli.evaluate import evaluate_codes  # noqa: E402
from sgh.cli.schemas import CONFIG_PATH, register_configs  # noqa: E402
from sgh.codes import pack_bits  # noqa: E402
from sgh.config import EvalCommandConfig, EvalConfig, dataset_config_from  # noqa: E402
from sgh.data import load_split  # noqa: E402
from sgh.metrics.ordered import ordered_metrics  # noqa: E402
from sgh.pipeline import run  # noqa: E402
from sgh.search.asymmetric import AsymmetricScore, decoder_score  # noqa: E402
from sgh.search.asymmetric_index import AsymmetricIndex  # noqa: E402
from sgh.search.hamming_index import HammingIndex  # noqa: E402
from sgh.search.two_stage import TwoStageSearch  # noqa: E402

register_configs()
faiss.omp_set_num_threads(1)

METHODS = ("sgh", "itq", "pcah", "lsh", "sh", "sph")
WITH_SCORE = ("sgh", "itq", "pcah", "lsh")
SHORTLIST_CURVE = (100, 300, 1000, 3000, 10000)


def _median_seconds(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def speed(repeats: int) -> dict:
    rng = np.random.default_rng(0)
    n, nq, bits, k = 1_000_000, 1000, 32, 100
    database_bits = rng.integers(0, 2, (n, bits), dtype=np.uint8)
    codes = pack_bits(database_bits)
    query_codes = pack_bits(rng.integers(0, 2, (nq, bits), dtype=np.uint8))
    dim = 32
    queries = rng.normal(size=(nq, dim)).astype(np.float32)
    asymmetric = AsymmetricIndex(decoder_score(rng.normal(size=(bits, dim)), np.zeros(dim),
                                               "euclidean"))
    asymmetric.add(codes)
    hamming = HammingIndex(bits)
    hamming.add(codes)
    vectors = rng.normal(size=(n, dim)).astype(np.float32)
    pq = faiss.IndexPQ(dim, 4, 8)
    pq.train(vectors[:65536])
    pq.add(vectors)
    asymmetric.search(queries[:8], k, workers=1)  # compile
    hamming.search(query_codes[:8], k)
    pq.search(queries[:8], k)
    seconds = {}
    for _ in range(repeats):  # interleaved, so that machine noise hits all three alike
        for name, call in (("asymmetric", lambda: asymmetric.search(queries, k, workers=1)),
                           ("hamming", lambda: hamming.search(query_codes, k)),
                           ("faiss_pq", lambda: pq.search(queries, k))):
            seconds.setdefault(name, []).append(_median_seconds(call, 1))
    result = {"n_database": n, "n_queries": nq, "bits": bits, "k": k, "threads": 1,
              "repeats": repeats}
    for name, values in seconds.items():
        median = statistics.median(values)
        result[f"{name}_seconds"] = median
        result[f"{name}_pairs_per_second"] = n * nq / median
    result["asymmetric_over_pq"] = result["asymmetric_pairs_per_second"] / \
        result["faiss_pq_pairs_per_second"]
    result["hamming_over_pq"] = result["hamming_pairs_per_second"] / \
        result["faiss_pq_pairs_per_second"]
    return result


def _compose(overrides: list[str]):
    with initialize_config_dir(config_dir=CONFIG_PATH, version_base="1.3"):
        return OmegaConf.to_object(compose("train", overrides=overrides))


def _rescored(run_dir: str, eval_config: EvalConfig) -> dict:
    return evaluate_codes(EvalCommandConfig(run=run_dir, out=os.devnull, eval=eval_config))


def _headline(metrics: dict) -> dict:
    return {"recall10@100": metrics.get("recall10@100"), "map": metrics.get("map"),
            "ranking": metrics["ranking"]}


def pq_reference(split, bits: int, config: EvalConfig, groundtruth) -> dict:
    """faiss IndexPQ at bits/8 bytes per item, trained on the training set, ranking by ADC."""
    train = np.ascontiguousarray(split.train, np.float32)
    database = np.ascontiguousarray(split.database, np.float32)
    queries = np.ascontiguousarray(split.query, np.float32)
    pq = faiss.IndexPQ(train.shape[1], bits // 8, 8)
    pq.train(train)
    pq.add(database)

    class Ranking:
        description = f"faiss IndexPQ(M={bits // 8}, nbits=8): ADC distance, ties as faiss"

        def order_blocks(self, depth):
            step = max(1, (1 << 22) // depth)
            for q0 in range(0, len(queries), step):
                q1 = min(q0 + step, len(queries))
                yield q0, q1, pq.search(queries[q0:q1], depth)[1]

    metrics = ordered_metrics(Ranking(), len(queries), len(database), split.query_labels,
                              split.database_labels, (), config.map_k_denominator, groundtruth,
                              10, [100])
    started = time.perf_counter()
    pq.search(queries, 100)
    metrics["queries_per_second"] = len(queries) / (time.perf_counter() - started)
    return metrics


def two_stage_speed(run_dir: str, shortlist: int) -> dict:
    """Queries/s of `TwoStageSearch` (Hamming top S, decoder rescoring, top 100)."""
    codes = load_codes(os.path.join(run_dir, "codes.npz"))
    score = AsymmetricScore.load(os.path.join(run_dir, "asymmetric.npz"))
    previous = OmegaConf.to_container(OmegaConf.load(os.path.join(run_dir, "config.yaml")))
    split = load_split(dataset_config_from(previous["dataset"]))
    search = TwoStageSearch(codes.database, codes.bits, score=score)
    search.search(codes.query[:10], split.query[:10], 100, shortlist=shortlist)
    started = time.perf_counter()
    _, I = search.search(codes.query, split.query, 100, shortlist=shortlist)
    return {"shortlist": shortlist,
            "queries_per_second": len(I) / (time.perf_counter() - started)}


def quality(dataset: str, bits: int, root: str) -> dict:
    table, runs = {}, {}
    for method in METHODS:
        run_dir = os.path.join(root, f"{dataset}_{method}_{bits}")
        model = [] if method == "sgh" else [f"model={method}"]
        started = time.perf_counter()
        metrics = run(_compose([f"dataset={dataset}", *model, f"model.bits={bits}"]), run_dir)
        runs[method] = run_dir
        n_database = metrics["n_database"]
        shortlist = max(1, n_database // 100)
        rows = {"hamming": _headline(metrics)}
        rows["hamming"]["seconds"] = time.perf_counter() - started
        rows["rerank_exact_1pct"] = _headline(_rescored(run_dir, EvalConfig(
            ranking="rerank", shortlist=shortlist, rescore="exact")))
        if method in WITH_SCORE:
            rows["asymmetric"] = _headline(_rescored(run_dir, EvalConfig(ranking="asymmetric")))
            rows["rerank_decoder_1pct"] = _headline(_rescored(run_dir, EvalConfig(
                ranking="rerank", shortlist=shortlist)))
            rows["rerank_over_asymmetric"] = (rows["rerank_decoder_1pct"]["recall10@100"]
                                              / rows["asymmetric"]["recall10@100"])
        table[method] = rows
        print(f"[bench] {dataset} {method}: " + ", ".join(
            f"{name} {row['recall10@100']:.4f}/{row['map']:.4f}"
            for name, row in rows.items() if isinstance(row, dict)), flush=True)
    # The reference at equal bytes, and the SGH curve against the shortlist size.
    codes = load_codes(os.path.join(runs["sgh"], "codes.npz"))
    previous = OmegaConf.to_container(OmegaConf.load(os.path.join(runs["sgh"], "config.yaml")))
    split = load_split(dataset_config_from(previous["dataset"]))
    table["faiss_pq"] = pq_reference(split, bits, EvalConfig(), codes.groundtruth)
    curve = []
    for size in SHORTLIST_CURVE:
        if size <= len(codes.database):
            recall = _rescored(runs["sgh"], EvalConfig(ranking="rerank", shortlist=size,
                                                       recall_n=[100]))["recall10@100"]
            curve.append({**two_stage_speed(runs["sgh"], size), "recall10@100": recall})
    return {"methods": table, "sgh_shortlist_curve": curve,
            "targets": {
                "sgh_asymmetric_minus_itq_asymmetric":
                    table["sgh"]["asymmetric"]["recall10@100"]
                    - table["itq"]["asymmetric"]["recall10@100"],
                "sgh_rerank_1pct_over_asymmetric": table["sgh"]["rerank_over_asymmetric"]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--datasets", nargs="+", default=["mnist", "cifar10_gist"])
    parser.add_argument("--bits", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-quality", action="store_true")
    args = parser.parse_args()
    result = {"conventions": __doc__}
    if not args.skip_speed:
        result["speed"] = speed(args.repeats)
        print(json.dumps(result["speed"], indent=1), flush=True)
    if not args.skip_quality:
        with tempfile.TemporaryDirectory() as root:
            result["quality"] = {dataset: quality(dataset, args.bits, root)
                                 for dataset in args.datasets}
    with open(args.json, "w") as file:
        json.dump(result, file, indent=1)
    print(json.dumps({key: value for key, value in result.items() if key != "conventions"},
                     indent=1))


if __name__ == "__main__":
    main()
