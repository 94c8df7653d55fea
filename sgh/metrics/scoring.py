"""Scoring codes: every retrieval number of both protocols, and code health, as one flat dict.

Computation on arrays only: `sgh.pipeline` calls `score` on freshly encoded codes, `sgh-eval` on
any `codes.npz`. What the numbers mean is `sgh.metrics.conventions.RESULT_CONVENTIONS`, written
next to them in every results file; how they are shown is `sgh.reports`.
"""

from __future__ import annotations

import time

import numpy as np

from sgh.codes import code_health
from sgh.errors import UserInputError
from sgh.metrics.labels import evaluate_labels
from sgh.metrics.neighbour_recall import recall_at_n
from sgh.metrics.ordered import ordered_metrics
from sgh.metrics.shortlist_curve import shortlist_curve

HAMMING_RANKING = "hamming: the database by Hamming distance to the query's code"


def score(database_codes: np.ndarray, query_codes: np.ndarray, bits: int, config,
          database_labels: np.ndarray | None = None, query_labels: np.ndarray | None = None,
          groundtruth: np.ndarray | None = None, ranking=None) -> dict:
    """Every retrieval number for one set of codes, as a flat dict, as `config`
    (`sgh.config.EvalConfig`) asks: label metrics where labels are given, Recall K@N where ground
    truth is. ``ranking``: None ranks by Hamming distance (tie-aware, with ``_stable`` twins and
    hash lookup); else a ranking of `sgh.search.rankings`, scored with ties by id.
    """
    started = time.perf_counter()
    k = config.recall_k
    metrics: dict = {"ranking": HAMMING_RANKING if ranking is None else ranking.description,
                     "n_queries": len(query_codes), "n_database": len(database_codes)}
    if groundtruth is not None and groundtruth.shape[1] < k:
        raise UserInputError(f"eval.recall_k={k} needs {k} ground-truth neighbours per "
                             f"query; the ground truth has {groundtruth.shape[1]}")
    if ranking is not None:
        metrics.update(ordered_metrics(
            ranking, len(query_codes), len(database_codes), query_labels, database_labels,
            config.map_k, config.map_k_denominator, groundtruth, k, config.recall_n))
        if database_labels is not None:
            metrics["map_k_denominator"] = config.map_k_denominator
        # A two-stage search's ranking carries its index, whose shortlists the curve varies.
        index = getattr(ranking, "index", None)
        if groundtruth is not None and getattr(index, "mode", None) == "two_stage":
            n = 100 if 100 in config.recall_n else max(config.recall_n)
            metrics["shortlist_curve"] = shortlist_curve(index, ranking.queries, groundtruth, k, n)
    elif database_labels is not None:
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
    if groundtruth is not None and ranking is None:
        for ties, suffix in (("expected", ""), ("stable", "_stable")):
            recalls = recall_at_n(query_codes, database_codes, bits, groundtruth,
                                  config.recall_n, k=k, ties=ties)
            for n, value in recalls.items():
                metrics[f"recall{k}@{n}{suffix}"] = value
    health = code_health(database_codes, bits)
    metrics.update(distinct_database_codes=health["distinct_codes"], dead_bits=health["dead_bits"],
                   mean_abs_bit_correlation=health["mean_abs_bit_correlation"],
                   bit_balance_min=float(np.min(health["bit_balance"])),
                   bit_balance_max=float(np.max(health["bit_balance"])))
    metrics["eval_seconds"] = time.perf_counter() - started
    return metrics


def score_search(ranking, prefix: str, config, n_database: int,
                 database_labels: np.ndarray | None = None, query_labels: np.ndarray | None = None,
                 groundtruth: np.ndarray | None = None) -> dict:
    """`score`'s label and neighbour metrics of another ranking of the same queries (ties by
    id), under keys ``prefix + key``, beside ``prefix + "ranking"``: its description."""
    n_queries = len(ranking.queries)
    metrics = ordered_metrics(ranking, n_queries, n_database, query_labels, database_labels,
                              config.map_k, config.map_k_denominator, groundtruth,
                              config.recall_k, config.recall_n)
    return {prefix + "ranking": ranking.description,
            **{prefix + key: value for key, value in metrics.items()}}
