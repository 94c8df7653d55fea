"""Recall K@N: how many of a query's true (Euclidean) neighbours the Hamming ranking finds."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from sgh.codes import validate_codes
from sgh.metrics.conventions import check_cutoffs, check_policies
from sgh.metrics.histograms import distance_histograms
from sgh.metrics.ranking import per_query_relevant_retrieved
from sgh.metrics.relevance import neighbour_relevance


def recall_at_n(query_codes: np.ndarray, database_codes: np.ndarray, bits: int,
                groundtruth: np.ndarray, n_values: int | Iterable[int], k: int = 10,
                ties: str = "expected", workers: int | None = None) -> dict[int, float]:
    """Recall K@N (the SGH paper's metric): how many true neighbours the Hamming ranking finds.

    For each query, the fraction of its first ``k`` ground-truth ids (``groundtruth``: ``(n_queries,
    >= k)`` database ids, nearest first; each distinct id once) found among the first N items of
    the Hamming ranking; averaged over queries (every query counts, denominator K). With
    ``ties="expected"``, let the cut-off distance be the first distance whose cumulative count
    reaches N: ground-truth items strictly closer count 1, items at the cut-off count ``(N -
    #closer) / #at_cut-off`` (their probability of being in the first N under a uniformly random
    order within the level), farther items 0. With ``ties="stable"`` the ranking breaks ties by
    database index. N >= n_database retrieves everything (recall 1).

    Returns ``{N: recall}`` for the cut-offs ``n_values``, in the order given; nan without queries.
    """
    check_policies(ties=ties)
    query_codes = validate_codes(query_codes, bits, "query codes")
    database_codes = validate_codes(database_codes, bits, "database codes")
    if database_codes.shape[0] == 0:
        raise ValueError("the database is empty (0 codes); nothing can be retrieved")
    cutoffs = check_cutoffs(n_values, "n_values")
    relevance = neighbour_relevance(groundtruth, k, len(query_codes), len(database_codes))
    histograms = distance_histograms(query_codes, database_codes, bits, relevance,
                                     cutoffs if ties == "stable" else (), workers)
    recalls = {}
    for cutoff in cutoffs:
        found = per_query_relevant_retrieved(histograms, cutoff, ties)
        recalls[cutoff] = float(found.sum() / (found.size * k)) if found.size else float("nan")
    return recalls


def results_recall_convention(k: int = 10) -> str:
    """`recall_of_results`' convention in words, for what prints or stores its figures."""
    return (f"Recall{k}@N: the share of each query's first {k} ground-truth ids among its "
            "first N results, ids as returned (ties as the index orders them, padding -1 finds "
            "nothing)")


def recall_of_results(ids: np.ndarray, groundtruth: np.ndarray, k: int = 10) -> float:
    """Recall K@N of a search's results ``ids`` ``(n_queries, N)``, as returned (its own ties;
    padding ``-1`` finds nothing): the share of each query's first ``k`` ground-truth ids among
    them, over all queries."""
    truth = groundtruth[:, :k]
    return float((ids[:, :, None] == truth[:, None, :]).any(axis=1).sum() / truth.size)
