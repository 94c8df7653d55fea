"""Hamming-ranking metrics with label relevance: mAP@all, mAP@K, precision@K and recall@K.

The database is ranked by increasing Hamming distance to each query. With ``bits``-bit codes
there are only ``bits + 1`` distinct distances, so most items tie, and how ties are ordered
changes the numbers a lot. Every metric therefore takes ``ties``:

* ``"expected"`` (default): the expected value when items at equal distance are in uniformly
  random order (McSherry & Najork, ECIR 2008), exact, without a sort (`sgh.metrics.tie_aware`);
* ``"stable"``: ties broken by database index, which is what most published code does.

Relevance is :mod:`sgh.metrics.relevance`'s; queries with no relevant item (R = 0) follow
``no_relevant``. Each metric is one scan (:func:`sgh.metrics.histograms.label_histograms`); for
several metrics from one scan, use :func:`sgh.metrics.evaluate_labels`.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from sgh.metrics.conventions import (
    DEFAULT_DENOMINATOR,
    average_over_queries,
    average_precision_of_sums,
    check_cutoffs,
    check_policies,
)
from sgh.metrics.histograms import DistanceHistograms, label_histograms
from sgh.metrics.tie_aware import expected_average_precision, expected_relevant_retrieved


def _stable_column(histograms: DistanceHistograms, k: int | None) -> int:
    k_effective = histograms.n_database if k is None else min(k, histograms.n_database)
    matches = np.flatnonzero(histograms.stable_cutoffs == k_effective)
    if not matches.size:
        raise ValueError(f"the scan has no stable statistics for K={k}; pass it as a cut-off")
    return int(matches[0])


def per_query_average_precision(histograms: DistanceHistograms, k: int | None, ties: str,
                                denominator: str = DEFAULT_DENOMINATOR,
                                harmonic: np.ndarray | None = None) -> np.ndarray:
    """``(n_queries,)`` AP@K (AP@all for ``k=None``) of each query; nan where R = 0."""
    check_policies(denominator=denominator)
    if ties == "expected":
        return expected_average_precision(histograms.counts, histograms.relevant, k, denominator,
                                          harmonic)
    column = _stable_column(histograms, k)
    return average_precision_of_sums(
        histograms.stable_precision_sums[:, column], histograms.relevant.sum(axis=1),
        histograms.stable_relevant_retrieved[:, column], k, histograms.n_database, denominator)


def per_query_relevant_retrieved(histograms: DistanceHistograms, k: int, ties: str) -> np.ndarray:
    """``(n_queries,)`` float: (expected, for tie-aware) relevant items among the first K."""
    if ties == "expected":
        return expected_relevant_retrieved(histograms.counts, histograms.relevant, k)
    return histograms.stable_relevant_retrieved[:, _stable_column(histograms, k)].astype(float)


# Deliberate repetition: every label metric (here, `sgh.metrics.radius`, `evaluate_labels`) is a
# public signature with the same leading parameters; what they compute is shared.
def average_precisions(query_codes: np.ndarray, database_codes: np.ndarray, bits: int,
                       query_labels: np.ndarray, database_labels: np.ndarray,
                       ties: str = "expected", k: int | None = None,
                       denominator: str = DEFAULT_DENOMINATOR,
                       workers: int | None = None) -> np.ndarray:
    """AP@all (``k=None``) or AP@K of every query of a Hamming ranking, from packed uint8 codes.

    ``AP@K = (1/D) * sum_{k' <= K: item at rank k' relevant} P@k'``, P@k' the fraction of
    relevant items among the first k'. D is R (the number of relevant database items) over the
    whole ranking (K >= n_database too), else ``denominator``: ``"retrieved"`` (relevant items in
    the top K; AP@K = 0 when there is none), ``"min_rk"`` (min(R, K)) or ``"r"`` (R); why the
    default: :data:`sgh.metrics.conventions.DEFAULT_DENOMINATOR`. ``workers``: threads; results
    do not depend on it. Returns ``(n_queries,)`` float64, nan where R = 0.
    """
    labelled = (query_codes, database_codes, bits, query_labels, database_labels)
    histograms = _ap_histograms(labelled, ties, k, denominator, workers)
    return per_query_average_precision(histograms, k, ties, denominator)


def _ap_histograms(labelled: tuple, ties, k, denominator, workers) -> DistanceHistograms:
    """The scan for AP: histograms, plus stable statistics at K (or the whole ranking)."""
    check_policies(ties=ties, denominator=denominator)
    if k is not None:
        k = check_cutoffs(k, "k")[0]
    stable = [len(labelled[1]) if k is None else k] if ties == "stable" else []
    return label_histograms(*labelled, stable, workers)


def mean_average_precision(query_codes: np.ndarray, database_codes: np.ndarray, bits: int,
                           query_labels: np.ndarray, database_labels: np.ndarray,
                           ties: str = "expected", no_relevant: str = "skip", k: int | None = None,
                           denominator: str = DEFAULT_DENOMINATOR,
                           workers: int | None = None) -> dict:
    """mAP@all (``k=None``) or mAP@K of a Hamming ranking; see :func:`average_precisions`.

    ``no_relevant``: queries with R = 0 are skipped, score AP = 0 (``"zero"``) or raise
    ValueError (``"error"``), and are counted in ``n_no_relevant`` in every case. Returns ``map``
    (nan if no query is scored), the query counts, and the conventions used, so the dict can be
    written to a results file as is: ``ties``, ``no_relevant_policy``, ``k`` (int, or ``"all"``)
    and ``denominator`` (``"r"`` for the whole ranking, where all coincide).
    """
    check_policies(no_relevant=no_relevant)
    labelled = (query_codes, database_codes, bits, query_labels, database_labels)
    histograms = _ap_histograms(labelled, ties, k, denominator, workers)
    ap = per_query_average_precision(histograms, k, ties, denominator)
    result = average_over_queries({"map": ap}, histograms.relevant.sum(axis=1), no_relevant)
    result.update(ties=ties, k="all" if k is None else int(k))
    result["denominator"] = "r" if k is None else denominator
    return result


def _top_k_metric(name: str, labelled: tuple, k_values, ties, no_relevant, workers) -> dict:
    """P@K or R@K for each cut-off, from one scan."""
    check_policies(ties=ties, no_relevant=no_relevant)
    cutoffs = check_cutoffs(k_values)
    histograms = label_histograms(*labelled, cutoffs if ties == "stable" else (), workers)
    total_relevant = histograms.relevant.sum(axis=1)
    per_query = {}
    for k in cutoffs:
        retrieved = per_query_relevant_retrieved(histograms, k, ties)
        divisor = min(k, histograms.n_database) if name == "precision" else total_relevant
        with np.errstate(invalid="ignore", divide="ignore"):  # R = 0: recall nan
            per_query[k] = retrieved / divisor
    result = average_over_queries(per_query, total_relevant, no_relevant)
    return {name: {k: result.pop(k) for k in cutoffs}, **result, "ties": ties}


def precision_at_k(query_codes: np.ndarray, database_codes: np.ndarray, bits: int,
                   query_labels: np.ndarray, database_labels: np.ndarray,
                   k_values: int | Iterable[int], ties: str = "expected", no_relevant: str = "skip",
                   workers: int | None = None) -> dict:
    """Precision@K: relevant items among the first K of the ranking / min(K, n_database).

    Tie-aware, the items of the cut-off distance level each count (K - #closer) / #at_level.
    Queries with R = 0 have P@K = 0 but follow ``no_relevant`` like every metric, so that all
    metrics of one evaluation average over the same queries. Returns ``precision`` ({K: float},
    in the order given), the query counts, ``no_relevant_policy`` and ``ties``.
    """
    labelled = (query_codes, database_codes, bits, query_labels, database_labels)
    return _top_k_metric("precision", labelled, k_values, ties, no_relevant, workers)


def recall_at_k(query_codes: np.ndarray, database_codes: np.ndarray, bits: int,
                query_labels: np.ndarray, database_labels: np.ndarray,
                k_values: int | Iterable[int], ties: str = "expected", no_relevant: str = "skip",
                workers: int | None = None) -> dict:
    """Recall@K: relevant items among the first K of the ranking / R (label relevance).

    As :func:`precision_at_k`, with ``recall``; Recall K@N of ground truth is
    :func:`sgh.metrics.recall_at_n`.
    """
    labelled = (query_codes, database_codes, bits, query_labels, database_labels)
    return _top_k_metric("recall", labelled, k_values, ties, no_relevant, workers)
