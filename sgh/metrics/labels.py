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
from sgh.metrics.radius import check_radius, f1_of_means, per_query_lookup, summarise_lookup
from sgh.metrics.ranking import per_query_average_precision, per_query_relevant_retrieved
from sgh.metrics.tie_aware import harmonic_numbers


def _cutoff_list(values: int | Iterable[int] | None, name: str) -> list[int]:
    """Validated cut-offs; None or empty: none."""
    values = [] if values is None else list(np.atleast_1d(values))
    return check_cutoffs(values, name) if values else []


def evaluate_labels(
    query_codes: np.ndarray,
    database_codes: np.ndarray,
    bits: int,
    query_labels: np.ndarray,
    database_labels: np.ndarray,
    map_k: Iterable[int] | None = (100, 1000),
    precision_k: Iterable[int] | None = None,
    radius: int | Iterable[int] | None = 2,
    map_all: bool = True,
    pr_curve: bool = False,
    ties: str = "expected",
    denominator: str = DEFAULT_DENOMINATOR,
    no_relevant: str = "skip",
    workers: int | None = None,
) -> dict:
    """mAP@all, mAP@K, P@K, R@K, hash lookup and the PR curve, all from one scan.

    The definitions and conventions are those of :func:`sgh.metrics.mean_average_precision`,
    :func:`sgh.metrics.precision_at_k`, :func:`sgh.metrics.recall_at_k`,
    :func:`sgh.metrics.hash_lookup` and :func:`sgh.metrics.pr_curve`, which each give the same
    numbers as this function. Every mean is over the same scored queries (``no_relevant``).

    Args:
        query_codes, database_codes, bits, query_labels, database_labels: as in
            :func:`sgh.metrics.mean_average_precision` (1-D or 2-D 0/1 labels).
        map_k: cut-offs of mAP@K (None or empty: none).
        precision_k: cut-offs of P@K and R@K; None: the same as ``map_k``.
        radius: one or more hash-lookup radii (inclusive; radii above ``bits`` retrieve the
            whole database); None: no lookup metrics.
        map_all: whether to compute mAP@all (with ``ties="stable"`` it costs a full sort).
        pr_curve: whether to add the precision-recall curve over radii 0..bits.
        ties, denominator, no_relevant, workers: see :func:`sgh.metrics.mean_average_precision`.

    Returns:
        A flat dict: ``map`` (if ``map_all``), ``map@K``, ``precision@K``, ``recall@K`` (one per
        cut-off), ``lookup_precision@rR``, ``lookup_recall@rR``, ``lookup_f1@rR``,
        ``lookup_retrieved_nothing@rR`` (one per radius R), ``pr_curve`` (if requested: dict
        of lists ``radius``, ``precision``, ``recall``, ``n_retrieved_nothing``), and
        ``n_queries``, ``n_scored``, ``n_no_relevant``, ``ties``, ``denominator``,
        ``no_relevant_policy``.
    """
    check_policies(ties=ties, denominator=denominator, no_relevant=no_relevant)
    map_k = _cutoff_list(map_k, "map_k")
    precision_k = map_k if precision_k is None else _cutoff_list(precision_k, "precision_k")
    radii = [] if radius is None else list(np.atleast_1d(radius))
    for value in radii:
        check_radius(value, bits)
    radii = [int(value) for value in radii]
    n_database = len(database_codes)
    stable_cutoffs = []
    if ties == "stable":
        stable_cutoffs = sorted({*map_k, *precision_k, *([n_database] if map_all else [])})
    histograms = label_histograms(
        query_codes, database_codes, bits, query_labels, database_labels, stable_cutoffs, workers
    )
    total_relevant = histograms.relevant.sum(axis=1)
    harmonic = harmonic_numbers(n_database)

    per_query = {}
    if map_all:
        per_query["map"] = per_query_average_precision(histograms, None, ties, harmonic=harmonic)
    for k in map_k:
        per_query[f"map@{k}"] = per_query_average_precision(
            histograms, k, ties, denominator, harmonic
        )
    for k in precision_k:
        retrieved = per_query_relevant_retrieved(histograms, k, ties)
        per_query[f"precision@{k}"] = retrieved / min(k, n_database)
        with np.errstate(invalid="ignore", divide="ignore"):
            per_query[f"recall@{k}"] = retrieved / total_relevant
    result = average_over_queries(per_query, total_relevant, no_relevant)

    if radii or pr_curve:
        lookup = summarise_lookup(
            per_query_lookup(histograms.counts, histograms.relevant), total_relevant, no_relevant
        )
        for value in radii:
            at = check_radius(value, bits)  # radii beyond ``bits`` retrieve everything
            precision, recall = float(lookup["precision"][at]), float(lookup["recall"][at])
            result[f"lookup_precision@r{value}"] = precision
            result[f"lookup_recall@r{value}"] = recall
            result[f"lookup_f1@r{value}"] = f1_of_means(precision, recall)
            result[f"lookup_retrieved_nothing@r{value}"] = int(lookup["n_retrieved_nothing"][at])
        if pr_curve:
            result["pr_curve"] = {
                "radius": list(range(bits + 1)),
                "precision": [float(value) for value in lookup["precision"]],
                "recall": [float(value) for value in lookup["recall"]],
                "n_retrieved_nothing": [int(value) for value in lookup["n_retrieved_nothing"]],
            }
    counts = {key: result.pop(key) for key in ("n_queries", "n_scored", "n_no_relevant")}
    policy = result.pop("no_relevant_policy")
    return {
        **result,
        **counts,
        "ties": ties,
        "denominator": denominator,
        "no_relevant_policy": policy,
    }
