"""Scoring codes on a retrieval split: both protocols, code health, and their conventions.

Computation on arrays: `sgh.train` calls it on freshly encoded codes, `sgh-eval` on any
`codes.npz`. The one file it touches is the ground-truth cache (`ground_truth`, see
`sgh.ground_truth_cache`).
"""

from __future__ import annotations

import os
import time

import numpy as np

from sgh.codes import code_health
from sgh.config import EvalConfig
from sgh.data import RetrievalSplit
from sgh.errors import UserInputError
from sgh.ground_truth_cache import cached_euclidean_neighbours
from sgh.metrics import conventions, evaluate_labels, recall_at_n

_TEXT = conventions()
CONVENTIONS = {
    "map_convention": ("mAP@all over the whole Hamming ranking (distance = popcount of XOR); "
                       "relevant = same label (multi-label: a shared label); 'map' = tie-aware "
                       "expected AP (items at equal distance in uniformly random order, "
                       "McSherry & Najork 2008); 'map_stable' = ties broken by database index; "
                       "queries with no relevant item are skipped and counted in "
                       "'map_queries_without_relevant'"),
    "map_at_k_convention": _TEXT["map_at_k"] + " (denominator named in 'map_k_denominator'; "
                           "'_stable' keys: ties by database index)",
    "precision_at_k_convention": _TEXT["precision_at_k"],
    "lookup_convention": _TEXT["hash_lookup"],
    "recall_convention": ("Recall K@N: fraction of each query's K exact Euclidean nearest "
                          "database items (squared L2 in the input feature space, ties by index) "
                          "found among the first N of the Hamming ranking, averaged over "
                          "queries; 'recallK@N' = tie-aware at the cut-off (expected value under "
                          "a random order of the cut-off distance level); 'recallK@N_stable' = "
                          "ties broken by database index"),
    "codes_convention": ("deterministic codes h = 1[sigmoid(logits) >= 0.5], packed with "
                         "np.packbits(axis=1): first code bit = most significant bit of byte 0"),
}


def ground_truth(
    split: RetrievalSplit, k: int, dataset_path: str | os.PathLike | None = None
) -> tuple[np.ndarray, str]:
    """The split's Euclidean neighbours and where they come from (a line for metrics.json).

    The dataset's own if it has k of them per query; else computed exactly and cached next to
    ``dataset_path`` (the dataset's file; None: not cached), see :mod:`sgh.ground_truth_cache`.
    """
    if split.groundtruth is not None and split.groundtruth.shape[1] >= k:
        return split.groundtruth, "from the dataset file"
    return cached_euclidean_neighbours(split.query, split.database, k, dataset_path)


def score(database_codes: np.ndarray, query_codes: np.ndarray, bits: int, config: EvalConfig,
          database_labels: np.ndarray | None = None, query_labels: np.ndarray | None = None,
          groundtruth: np.ndarray | None = None) -> dict:
    """Every retrieval number for one set of codes, as a flat dict.

    Label metrics where labels are given; Recall K@N where ground truth is given.
    """
    started = time.perf_counter()
    k = config.recall_k
    metrics: dict = {"n_queries": len(query_codes), "n_database": len(database_codes)}
    if database_labels is not None:
        for ties, suffix in (("expected", ""), ("stable", "_stable")):
            result = evaluate_labels(query_codes, database_codes, bits, query_labels,
                                     database_labels, map_k=config.map_k,
                                     radius=config.radius if ties == "expected" else None,
                                     ties=ties, denominator=config.map_k_denominator)
            for key, value in result.items():
                if key.startswith(("map", "precision@", "recall@")):
                    metrics[key + suffix] = value
                elif key.startswith("lookup_"):
                    metrics[key] = value
        metrics["map_k_denominator"] = config.map_k_denominator
        metrics["map_queries_without_relevant"] = result["n_no_relevant"]
    if groundtruth is not None:
        if groundtruth.shape[1] < k:
            raise UserInputError(f"eval.recall_k={k} needs {k} ground-truth neighbours per "
                                 f"query; the ground truth has {groundtruth.shape[1]}")
        for ties, suffix in (("expected", ""), ("stable", "_stable")):
            recalls = recall_at_n(query_codes, database_codes, bits, groundtruth,
                                  config.recall_n, k=k, ties=ties)
            for n, value in recalls.items():
                metrics[f"recall{k}@{n}{suffix}"] = value
    health = code_health(database_codes, bits)
    metrics["distinct_database_codes"] = health["distinct_codes"]
    metrics["dead_bits"] = health["dead_bits"]
    metrics["mean_abs_bit_correlation"] = health["mean_abs_bit_correlation"]
    metrics["bit_balance_min"] = float(np.min(health["bit_balance"]))
    metrics["bit_balance_max"] = float(np.max(health["bit_balance"]))
    metrics["eval_seconds"] = time.perf_counter() - started
    return metrics


def collapse_warning(metrics: dict, bits: int) -> str | None:
    """A one-line warning when the codes have collapsed, so it never passes unnoticed."""
    distinct, dead = metrics["distinct_database_codes"], metrics["dead_bits"]
    n_database = metrics["n_database"]
    if dead > 0 or distinct < min(n_database, 2**bits) / 100:
        return (f"warning: code collapse: {distinct} distinct codes for {n_database} database "
                f"items, {dead} of {bits} bits never change; the codes carry little information "
                "(check the feature scale, model.init, trainer.learning_rate)")
    return None


def results_table(metrics: dict, title: str, config: EvalConfig) -> str:
    """The printed results: every number with its convention."""
    k = config.recall_k
    rows = [(title, "")]
    if "map" in metrics:
        rows.append(("mAP@all, label relevance, tie-aware", f"{metrics['map']:.4f}"))
        rows.append(("mAP@all, label relevance, ties by index", f"{metrics['map_stable']:.4f}"))
        for cut in config.map_k:
            rows.append((f"mAP@{cut} (/ {metrics['map_k_denominator']}), P@{cut}, tie-aware",
                         f"{metrics[f'map@{cut}']:.4f}, {metrics[f'precision@{cut}']:.4f}"))
        r = config.radius
        rows.append((f"lookup within radius {r} (inclusive): precision, recall",
                     f"{metrics[f'lookup_precision@r{r}']:.4f}, "
                     f"{metrics[f'lookup_recall@r{r}']:.4f}"))
    for n in config.recall_n:
        if f"recall{k}@{n}" in metrics:
            rows.append((f"Recall{k}@{n}, Euclidean {k}-NN, tie-aware",
                         f"{metrics[f'recall{k}@{n}']:.4f}"))
    rows.append(("distinct database codes / database items",
                 f"{metrics['distinct_database_codes']} / {metrics['n_database']}"))
    rows.append(("dead bits (constant over the database)", f"{metrics['dead_bits']}"))
    if "ms_per_step" in metrics:
        rows.append(("training time; median time per step",
                     f"{metrics['train_seconds']:.1f} s; {metrics['ms_per_step']:.2f} ms"))
    elif "train_seconds" in metrics:
        rows.append(("training (fitting) time", f"{metrics['train_seconds']:.1f} s"))
    if "validation_metric" in metrics:
        metric = metrics["validation_metric"]
        rows.append((f"codes from step (best validation {metric})",
                     f"{metrics['best_step']} ({metrics[f'best_validation_{metric}']:.4f})"))
    width = max(len(label) for label, _ in rows)
    lines = [f"  {label:<{width}}  {value}".rstrip() for label, value in rows]
    rule = "  " + "-" * (width + 12)
    footer = f"  queries: {metrics['n_queries']}"
    if "protocol" in metrics:
        footer += f" ({metrics['protocol']})"
    return "\n".join([rule, lines[0], rule, *lines[1:], rule, footer])
