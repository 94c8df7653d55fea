"""Search beyond Hamming ranking against product quantization at equal bytes: quality and speed.

    SGH_DATA_DIR=../shared/data python scripts/bench_search.py --json bench_search.json
        [--datasets mnist cifar10_gist siftsmall] [--bits 32 64] [--skip-quality]
        [--skip-speed] [--sgh default search] [--runs DIR] [--faiss-only]

The anchors, faiss's product quantizers at the codes' bytes per item (M = bits / 8
sub-quantizers of 8 bits: 4 bytes at 32 bits, 8 at 64): `IndexPQ`, and OPQ, the same PQ after a
learned rotation (`index_factory(d, "OPQ{M},PQ{M}")`), the stronger of the two on correlated
features. Both ranked by their ADC distance, one thread (`faiss.omp_set_num_threads(1)`).

1. Scan speed, one thread each, side by side in one process (medians of --repeats runs):
   1,000 queries x 1,000,000 random 32-bit codes, top 100: our asymmetric scan
   (`AsymmetricIndex.search`: per-query lookup tables over the 4 code bytes, one float per
   item), the Hamming scan (faiss `IndexBinaryFlat`, which `SGHIndex(mode="hamming")` runs),
   and faiss `IndexPQ(d=32, M=4, nbits=8)` and OPQ4,PQ4 over 1,000,000 random 32-dimensional
   vectors (the same 4 bytes per item, their ADC scans; OPQ adds the rotation of each query).
   `asymmetric_over_pq` / `asymmetric_over_opq` = our pairs/s over faiss's.
2. Quality and queries/s on each dataset at each code length, the test queries of its protocol
   (MNIST protocol A, CIFAR-10 GIST protocol B, SIFT10K protocol C), every score chosen on the
   validation split only:
   - SGH, each configuration of --sgh (`default`: `sgh-train`'s defaults; `search`:
     `experiment=search`), with each per-bit score (encoder, decoder, joint, and `auto`, the
     validated choice) scanning the whole database (recall: `eval.ranking=scan`; queries/s:
     that score's `SGHIndex(mode="scan")` search, k = 100, what the ranking's first 100 are
     where there are no labels; with labels the ranking reads every item), and the
     two-stage search a user serves, `SGHIndex(scores, mode="two_stage")` over the database
     codes (`add_codes`) with `index.shortlist = S`, S = 1% of the database (at least 500):
     the encoder score's top S found by SGHIndex's fast scan (its refine_factor x S best
     rescored exactly by the encoder score), reordered by the validated rescoring score
     (through the mlp decoder for deep SGH). Its recall is `eval.ranking=two_stage
     eval.shortlist=S`, whose first 100 are exactly that index's `search(k=100)`, the call
     its queries/s times;
   - ITQ, PCAH, LSH with their asymmetric (projection) form;
   - faiss `IndexPQ` and OPQ at the same bytes, each trained on the training set only.
   Recall10@100: the share of each query's 10 exact Euclidean nearest neighbours among its
   first 100, ties by id (faiss: as faiss orders them). Queries/s: one thread, the top 100 of
   every test query; every search of a dataset and code length timed in --repeats interleaved
   rounds after one warm-up, the median round of each.
   `sgh_best_over_pq_recall`: the best SGH row's recall over PQ's (codes only: no original
   vectors), `sgh_best_over_pq_qps` the same row's queries/s over PQ's, per dataset and bits;
   `sgh_best_over_opq_recall`, `sgh_best_over_opq_qps` the same against OPQ.
   --faiss-only: the two anchors alone on each dataset and code length (no training, minutes),
   the same conventions, their queries/s timed side by side with each other only.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import statistics
import tempfile
import time

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")  # faiss and BLAS: one thread, as ours
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import faiss  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from sgh.artifacts.codes_file import load_codes  # noqa: E402
from sgh.artifacts.ground_truth_cache import cached_exact_neighbours  # noqa: E402
from sgh.baselines.fitting import baseline_class  # noqa: E402
from sgh.cli.evaluate import evaluate_codes  # noqa: E402
from sgh.cli.schemas import CONFIG_PATH, register_configs  # noqa: E402
from sgh.codes import pack_bits  # noqa: E402
from sgh.config import EvalCommandConfig, EvalConfig, dataset_config_from  # noqa: E402
from sgh.data import load_split  # noqa: E402
from sgh.data.ground_truth import split_ground_truth  # noqa: E402
from sgh.metrics.ordered import ordered_metrics  # noqa: E402
from sgh.pipeline import run  # noqa: E402
from sgh.scores.asymmetric import decoder_score  # noqa: E402
from sgh.scores.asymmetric_index import AsymmetricIndex  # noqa: E402
from sgh.scores.score_set import ScoreSet  # noqa: E402
from sgh.search.sgh_index import SGHIndex  # noqa: E402
from sgh.search.two_stage import default_shortlist  # noqa: E402

register_configs()
faiss.omp_set_num_threads(1)

BASELINES = ("itq", "pcah", "lsh")
SGH_CONFIGURATIONS = {"default": [], "search": ["experiment=search"]}
TOP = 100


def speed(repeats: int) -> dict:
    rng = np.random.default_rng(0)
    n, nq, bits, k = 1_000_000, 1000, 32, 100
    codes = pack_bits(rng.integers(0, 2, (n, bits), dtype=np.uint8))
    query_codes = pack_bits(rng.integers(0, 2, (nq, bits), dtype=np.uint8))
    dim = 32
    queries = rng.normal(size=(nq, dim)).astype(np.float32)
    asymmetric = AsymmetricIndex(decoder_score(rng.normal(size=(bits, dim)), np.zeros(dim),
                                               "euclidean"))
    asymmetric.add(codes)
    hamming = faiss.IndexBinaryFlat(bits)
    hamming.add(codes)
    vectors = rng.normal(size=(n, dim)).astype(np.float32)
    pq = faiss.IndexPQ(dim, 4, 8)
    opq = faiss.index_factory(dim, "OPQ4,PQ4")
    for index in (pq, opq):
        index.train(vectors[:65536])
        index.add(vectors)
    asymmetric.search(queries[:8], k, workers=1)  # compile
    hamming.search(query_codes[:8], k)
    pq.search(queries[:8], k)
    opq.search(queries[:8], k)
    seconds = {}
    for _ in range(repeats):  # interleaved, so that machine noise hits all four alike
        for name, call in (("asymmetric", lambda: asymmetric.search(queries, k, workers=1)),
                           ("hamming", lambda: hamming.search(query_codes, k)),
                           ("faiss_pq", lambda: pq.search(queries, k)),
                           ("faiss_opq", lambda: opq.search(queries, k))):
            started = time.perf_counter()
            call()
            seconds.setdefault(name, []).append(time.perf_counter() - started)
    result = {"n_database": n, "n_queries": nq, "bits": bits, "k": k, "threads": 1,
              "repeats": repeats}
    for name, values in seconds.items():
        median = statistics.median(values)
        result[f"{name}_seconds"] = median
        result[f"{name}_pairs_per_second"] = n * nq / median
    for anchor in ("pq", "opq"):
        result[f"asymmetric_over_{anchor}"] = result["asymmetric_pairs_per_second"] / \
            result[f"faiss_{anchor}_pairs_per_second"]
    return result


def _compose(overrides: list[str]):
    with initialize_config_dir(config_dir=CONFIG_PATH, version_base="1.3"):
        return OmegaConf.to_object(compose("train", overrides=overrides))


def _recall(run_dir: str, eval_config: EvalConfig) -> tuple[float, str]:
    metrics = evaluate_codes(EvalCommandConfig(run=run_dir, eval=eval_config))  # <run>/eval.json
    return metrics["recall10@100"], metrics["ranking"]


def _split_of(run_dir: str):
    previous = OmegaConf.to_container(OmegaConf.load(os.path.join(run_dir, "config.yaml")))
    return load_split(dataset_config_from(previous["dataset"]))


def _rows_of_run(run_dir: str, split, with_two_stage: bool) -> tuple[dict, dict]:
    """Every per-bit score's scan (and, for SGH, the two-stage search) of one run: the rows,
    and the search call that each row's queries/s times."""
    codes = load_codes(os.path.join(run_dir, "codes.npz"))
    scores = ScoreSet.load(os.path.join(run_dir, "asymmetric.npz"))
    rows, searches = {}, {}
    for kind in ["auto", *scores.scores]:
        recall, ranking = _recall(run_dir, EvalConfig(ranking="scan", score=kind,
                                                      recall_n=[TOP]))
        # What a user serves (the evaluation's scan ranking is this index's search).
        index = SGHIndex(dataclasses.replace(scores, chosen=scores.kind_for(kind, "scan")))
        index.add_codes(codes.database)  # ids: the database rows
        name = f"scan, {kind}"
        rows[name] = {"recall10@100": recall, "ranking": ranking}
        searches[name] = lambda index=index: index.search(split.query, TOP)
    if with_two_stage:
        # The search's own default size: 1% of the database, never under 5 N (SIFT10K: 1%
        # would be the top 100 itself).
        shortlist = default_shortlist(TOP, len(codes.database))
        recall, ranking = _recall(run_dir, EvalConfig(
            ranking="two_stage", shortlist=shortlist, recall_n=[TOP]))
        kind = scores.kind_for("auto", "two_stage")
        # What a user serves (the evaluation's two_stage ranking is this index's search): one
        # thread, as faiss is set above and `_time_side_by_side` sets BLAS.
        served = SGHIndex(scores, mode="two_stage")
        served.shortlist = shortlist
        served.add_codes(codes.database)  # ids: the database rows
        name = f"two-stage, encoder top {shortlist} rescored by {kind}"
        rows[name] = {"recall10@100": recall, "ranking": ranking}
        searches[name] = lambda: served.search(split.query, TOP)
    return rows, searches


def _time_side_by_side(searches: dict, n_queries: int, repeats: int) -> dict[str, float]:
    """Queries/s of each search, one thread, timed in interleaved rounds so that the
    machine's noise falls on all of them alike; the median round of each."""
    with threadpool_limits(1):
        for search in searches.values():
            search()  # warm-up: compilation, caches
        seconds: dict[str, list[float]] = {name: [] for name in searches}
        for _ in range(repeats):
            for name, search in searches.items():
                started = time.perf_counter()
                search()
                seconds[name].append(time.perf_counter() - started)
    return {name: n_queries / statistics.median(values) for name, values in seconds.items()}


def faiss_anchors(split, bits: int, groundtruth: np.ndarray) -> dict[str, tuple[dict, object]]:
    """faiss IndexPQ and OPQ at bits/8 bytes per item (M = bits/8 sub-quantizers of 8 bits),
    each trained on the training set only and ranking by its ADC distance: {table name: (its
    row, its search call)}."""
    train = np.ascontiguousarray(split.train, np.float32)
    database = np.ascontiguousarray(split.database, np.float32)
    queries = np.ascontiguousarray(split.query, np.float32)
    dim, sub_quantizers = train.shape[1], bits // 8
    indexes = {
        "faiss_pq": (faiss.IndexPQ(dim, sub_quantizers, 8),
                     f"faiss IndexPQ(M={sub_quantizers}, nbits=8): ADC distance"),
        "faiss_opq": (faiss.index_factory(dim, f"OPQ{sub_quantizers},PQ{sub_quantizers}"),
                      f"faiss OPQ{sub_quantizers},PQ{sub_quantizers} (rotation learned, then "
                      "PQ of 8-bit sub-quantizers): ADC distance"),
    }
    anchors = {}
    for name, (index, ranking) in indexes.items():
        index.train(train)
        index.add(database)

        class Ranking:
            def order_blocks(self, depth, index=index):
                yield 0, len(queries), index.search(queries, depth)[1]

        metrics = ordered_metrics(Ranking(), len(queries), len(database),
                                  groundtruth=groundtruth, recall_k=10, recall_n=[TOP])
        anchors[name] = ({"recall10@100": metrics["recall10@100"], "ranking": ranking},
                         lambda index=index: index.search(queries, TOP))
    return anchors


def _split_and_ground_truth(dataset: str):
    """The dataset's split and its 10 exact neighbours per test query, as a run of it gets them
    (the file's own, or computed once and cached beside the dataset), without a run."""
    config = _compose([f"dataset={dataset}"])
    split = load_split(config.dataset)
    groundtruth, _ = split_ground_truth(split, 10, functools.partial(
        cached_exact_neighbours, dataset_path=getattr(config.dataset, "path", None)))
    return split, groundtruth


def quality(dataset: str, bits: int, configurations: list[str], root: str,
            repeats: int) -> dict:
    """Every row of one dataset and code length (module doc, 2); no `configurations`: the
    faiss anchors alone."""
    table, searches = {}, {}
    if not configurations:
        split, groundtruth = _split_and_ground_truth(dataset)
    for name in configurations:
        run_dir = os.path.join(root, f"{dataset}_sgh_{name}_{bits}")
        started = time.perf_counter()
        metrics = run(_compose([f"dataset={dataset}", f"model.bits={bits}",
                                *SGH_CONFIGURATIONS[name]]), run_dir)
        split = _split_of(run_dir)
        rows, calls = _rows_of_run(run_dir, split, with_two_stage=True)
        # The run's own table is in its eval.ranking (experiment=search: scan).
        hamming = evaluate_codes(EvalCommandConfig(run=run_dir, eval=EvalConfig(
            ranking="hamming", recall_n=[TOP])))
        rows["hamming"] = {"recall10@100": hamming["recall10@100"], "ranking": "hamming, "
                           "tie-aware"}
        table[f"sgh {name}"] = {"rows": rows, "train_seconds": metrics.get("train_seconds"),
                                "run_seconds": time.perf_counter() - started,
                                "validation": metrics.get("validation_recall10@100_by_score"),
                                "score_selection": metrics.get("score_selection")}
        searches.update({(f"sgh {name}", row): call for row, call in calls.items()})
    for method in BASELINES if configurations else ():
        run_dir = os.path.join(root, f"{dataset}_{method}_{bits}")
        if baseline_class(method).bits_at_most_features and bits > split.train.shape[1]:
            continue
        run(_compose([f"dataset={dataset}", f"model={method}", f"model.bits={bits}"]), run_dir)
        rows, calls = _rows_of_run(run_dir, split, with_two_stage=False)
        table[method] = {"rows": {"scan, projection": rows["scan, auto"]}}
        searches[(method, "scan, projection")] = calls["scan, auto"]
    if configurations:  # the ground truth every run above was scored against
        groundtruth = load_codes(os.path.join(run_dir, "codes.npz")).groundtruth
    for anchor, (row, search) in faiss_anchors(split, bits, groundtruth).items():
        table[anchor] = {"rows": {"ADC": row}}
        searches[(anchor, "ADC")] = search
    for (method, row), rate in _time_side_by_side(searches, len(split.query), repeats).items():
        table[method]["rows"][row]["queries_per_second"] = rate
    for method, entry in table.items():
        _print(dataset, bits, method, entry["rows"])
    if not configurations:
        return {"methods": table}
    sgh_rows = [(f"{name}: {row_name}", row) for name, entry in table.items()
                if name.startswith("sgh") for row_name, row in entry["rows"].items()
                if "queries_per_second" in row]
    best_name, best = max(sgh_rows, key=lambda item: item[1]["recall10@100"])
    baseline_best = max((row["recall10@100"] for method in BASELINES if method in table
                         for row in table[method]["rows"].values()), default=float("nan"))
    targets = {
        "sgh_best": best_name,
        "sgh_best_recall10@100": best["recall10@100"],
        "best_baseline_asymmetric_recall10@100": baseline_best,
        "sgh_best_minus_best_baseline": best["recall10@100"] - baseline_best}
    for anchor in ("pq", "opq"):
        row = table[f"faiss_{anchor}"]["rows"]["ADC"]
        targets[f"sgh_best_over_{anchor}_recall"] = best["recall10@100"] / row["recall10@100"]
        targets[f"sgh_best_over_{anchor}_qps"] = (best["queries_per_second"]
                                                  / row["queries_per_second"])
    return {"methods": table, "targets": targets}


def _print(dataset: str, bits: int, method: str, rows: dict) -> None:
    for name, row in rows.items():
        rate = row.get("queries_per_second")
        print(f"[bench] {dataset} {bits} bits, {method}, {name}: Recall10@100 "
              f"{row['recall10@100']:.4f}" + (f", {rate:,.0f} queries/s" if rate else ""),
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--datasets", nargs="+", default=["mnist", "cifar10_gist", "siftsmall"])
    parser.add_argument("--bits", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--sgh", nargs="+", default=list(SGH_CONFIGURATIONS),
                        choices=list(SGH_CONFIGURATIONS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--runs", help="keep the runs here (the same command later reuses "
                                       "them: a finished run is not trained again)")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--faiss-only", action="store_true",
                        help="quality: the faiss anchors (IndexPQ, OPQ) alone, no training")
    args = parser.parse_args()
    configurations = [] if args.faiss_only else args.sgh
    result = {"conventions": __doc__}
    if not args.skip_speed:
        result["speed"] = speed(args.repeats)
        print(json.dumps(result["speed"], indent=1), flush=True)
    if not args.skip_quality:
        result["quality"] = {}
        with (contextlib.nullcontext(args.runs) if args.runs
              else tempfile.TemporaryDirectory()) as root:
            for dataset in args.datasets:
                for bits in args.bits:
                    result["quality"][f"{dataset}_{bits}"] = quality(
                        dataset, bits, configurations, root, args.repeats)
                    with open(args.json, "w") as file:  # what has run so far, kept
                        json.dump(result, file, indent=1)
    with open(args.json, "w") as file:
        json.dump(result, file, indent=1)
    summary = {"speed": result.get("speed"), "targets": {
        name: entry["targets"] for name, entry in result.get("quality", {}).items()
        if "targets" in entry}}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
