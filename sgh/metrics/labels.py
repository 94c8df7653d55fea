"""Every label-relevance metric from one scan of the (query, database item) pairs."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from sgh.metrics.conventions import (
    DEFAULT_DENOMINATOR,
    average_over_queries,
    check_cutoffs,
    check_policies,
)
from sgh.metrics.histograms import label_histograms
from sgh.metrics.radius import check_radius, f1_of_means, pr_curve_of_histograms
from sgh.metrics.ranking import per_query_average_precision, per_query_relevant_retrieved
from sgh.metrics.tie_aware import harmonic_numbers


def _cutoff_list(values: int | Iterable[int] | None, name: str) -> list[int]:
    values = [] if values is None else list(np.atleast_1d(values))
    return check_cutoffs(values, name) if values else []


def evaluate_labels(query_codes: np.ndarray, database_codes: np.ndarray, bits: int,
                    query_labels: np.ndarray, database_labels: np.ndarray,
                    map_k: Iterable[int] | None = (100, 1000),
                    precision_k: Iterable[int] | None = None,
                    radius: int | Iterable[int] | None = 2, map_all: bool = True,
                    pr_curve: bool = False, ties: str = "expected",
                    denominator: str = DEFAULT_DENOMINATOR, no_relevant: str = "skip",
                    workers: int | None = None) -> dict:
    """mAP@all, mAP@K, P@K, R@K, hash lookup and the PR curve, all from one scan.

    ``map`` and ``map@K`` are those of :func:`sgh.metrics.mean_average_precision`, the lookup
    numbers those of ``hash_lookup`` and ``pr_curve``, every mean over the same scored queries.
    ``map_k``: cut-offs of mAP@K (None or empty: none); ``precision_k``: of P@K and R@K (None: as
    ``map_k``); ``radius``: one or more lookup radii (None: none). Returns a flat dict: ``map``,
    ``map@K``, ``precision@K``, ``recall@K``, ``lookup_{precision,recall,f1,retrieved_nothing}@rR``,
    ``pr_curve`` (if asked: ``pr_curve``'s lists), the query counts and the policies.
    """
    check_policies(ties=ties, denominator=denominator, no_relevant=no_relevant)
    map_k = _cutoff_list(map_k, "map_k")
    precision_k = map_k if precision_k is None else _cutoff_list(precision_k, "precision_k")
    # (column of the curve, radius), all validated before the scan.
    radii = [(check_radius(value, bits), int(value))
             for value in ([] if radius is None else np.atleast_1d(radius))]
    n_database = len(database_codes)
    stable_cutoffs = []
    if ties == "stable":
        stable_cutoffs = sorted({*map_k, *precision_k, *([n_database] if map_all else [])})
    histograms = label_histograms(query_codes, database_codes, bits, query_labels, database_labels,
                                  stable_cutoffs, workers)
    total_relevant = histograms.relevant.sum(axis=1)
    harmonic = harmonic_numbers(n_database)

    per_query = {}
    if map_all:
        per_query["map"] = per_query_average_precision(histograms, None, ties, harmonic=harmonic)
    for k in map_k:
        per_query[f"map@{k}"] = per_query_average_precision(histograms, k, ties, denominator,
                                                            harmonic)
    for k in precision_k:
        retrieved = per_query_relevant_retrieved(histograms, k, ties)
        per_query[f"precision@{k}"] = retrieved / min(k, n_database)
        with np.errstate(invalid="ignore", divide="ignore"):
            per_query[f"recall@{k}"] = retrieved / total_relevant
    result = average_over_queries(per_query, total_relevant, no_relevant)

    if radii or pr_curve:
        curve = pr_curve_of_histograms(histograms, no_relevant)
        for at, value in radii:
            precision, recall = curve["precision"][at], curve["recall"][at]
            result[f"lookup_precision@r{value}"] = precision
            result[f"lookup_recall@r{value}"] = recall
            result[f"lookup_f1@r{value}"] = f1_of_means(precision, recall)
            result[f"lookup_retrieved_nothing@r{value}"] = curve["n_retrieved_nothing"][at]
        if pr_curve:
            keys = ("radius", "precision", "recall", "n_retrieved_nothing")
            result["pr_curve"] = {key: curve[key] for key in keys}
    counts = {key: result.pop(key) for key in ("n_queries", "n_scored", "n_no_relevant")}
    policy = result.pop("no_relevant_policy")
    return {**result, **counts, "ties": ties, "denominator": denominator,
            "no_relevant_policy": policy}
