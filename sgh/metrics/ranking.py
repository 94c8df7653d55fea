"""Hamming-ranking metrics with label relevance: per-query AP@all, AP@K and relevant items in
the top K from one scan's histograms, and :func:`mean_average_precision`.

The database is ranked by increasing Hamming distance to each query. With ``bits``-bit codes
there are only ``bits + 1`` distinct distances, so most items tie, and how ties are ordered
changes the numbers a lot. Every metric therefore takes ``ties``:

* ``"expected"`` (default): the expected value when items at equal distance are in uniformly
  random order (McSherry & Najork, ECIR 2008), exact, without a sort (`sgh.metrics.tie_aware`);
* ``"stable"``: ties broken by database index, which is what most published code does.

Relevance is :mod:`sgh.metrics.relevance`'s; queries with no relevant item (R = 0) follow
``no_relevant``. :func:`mean_average_precision` is one scan
(:func:`sgh.metrics.histograms.label_histograms`) for mAP alone; :func:`sgh.metrics.evaluate_labels`
gives every label metric, P@K and R@K among them, from one scan.
"""

from __future__ import annotations

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


def mean_average_precision(query_codes: np.ndarray, database_codes: np.ndarray, bits: int,
                           query_labels: np.ndarray, database_labels: np.ndarray,
                           ties: str = "expected", no_relevant: str = "skip", k: int | None = None,
                           denominator: str = DEFAULT_DENOMINATOR,
                           workers: int | None = None) -> dict:
    """mAP@all (``k=None``) or mAP@K of a Hamming ranking, from packed uint8 codes.

    ``AP@K = (1/D) * sum_{k' <= K: item at rank k' relevant} P@k'``, P@k' the fraction of
    relevant items among the first k'. D is R (the number of relevant database items) over the
    whole ranking (K >= n_database too), else ``denominator``: ``"retrieved"`` (relevant items in
    the top K; AP@K = 0 when there is none), ``"min_rk"`` (min(R, K)) or ``"r"`` (R); why the
    default: :data:`sgh.metrics.conventions.DEFAULT_DENOMINATOR`. ``workers``: threads; results
    do not depend on it. ``no_relevant``: queries with R = 0 are skipped, score AP = 0
    (``"zero"``) or raise ValueError (``"error"``), and are counted in ``n_no_relevant`` in every
    case. Returns ``map`` (nan if no query is scored), the query counts, and the conventions
    used, so the dict can be written to a results file as is: ``ties``, ``no_relevant_policy``,
    ``k`` (int, or ``"all"``) and ``denominator`` (``"r"`` for the whole ranking, where all
    coincide). :func:`sgh.metrics.evaluate_labels` gives the same number (``map``,
    ``map@K``) beside the other metrics of one scan.
    """
    check_policies(no_relevant=no_relevant, ties=ties, denominator=denominator)
    if k is not None:
        k = check_cutoffs(k, "k")[0]
    stable = [len(database_codes) if k is None else k] if ties == "stable" else []
    histograms = label_histograms(query_codes, database_codes, bits, query_labels, database_labels,
                                  stable, workers)
    ap = per_query_average_precision(histograms, k, ties, denominator)
    result = average_over_queries({"map": ap}, histograms.relevant.sum(axis=1), no_relevant)
    result.update(ties=ties, k="all" if k is None else k)
    result["denominator"] = "r" if k is None else denominator
    return result
