"""Hamming-ranking metrics with label relevance: mAP@all, mAP@K, precision@K and recall@K.

The database is ranked by increasing Hamming distance to each query. With ``bits``-bit codes
there are only ``bits + 1`` distinct distances, so most items tie, and how ties are ordered
changes the numbers a lot (on a synthetic 16-bit case mAP@all moved from 0.223 to 0.379).
Every metric therefore takes ``ties``:

* ``"expected"`` (default): the expected value when items at equal distance are in uniformly
  random order (McSherry & Najork, ECIR 2008), exact, from per-distance counts without sorting
  (:mod:`sgh.metrics.tie_aware`);
* ``"stable"``: ties broken by database index, which is what most published code does.

Relevance: 1-D labels (same label) or 2-D 0/1 label matrices (at least one shared label), see
:mod:`sgh.metrics.relevance`. Queries with no relevant database item (R = 0) follow ``no_relevant``
(:func:`sgh.metrics.conventions.average_over_queries`). All metrics come from one scan of the
(query, item) pairs, :func:`sgh.metrics.histograms.label_histograms`; memory and threads are
described there. To get several metrics from one scan, use :func:`sgh.metrics.evaluate_labels`.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from sgh.metrics.conventions import (
    DEFAULT_DENOMINATOR,
    average_over_queries,
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


def per_query_average_precision(
    histograms: DistanceHistograms,
    k: int | None,
    ties: str,
    denominator: str = DEFAULT_DENOMINATOR,
    harmonic: np.ndarray | None = None,
) -> np.ndarray:
    """``(n_queries,)`` AP@K (AP@all for ``k=None``) of each query; nan where R = 0."""
    check_policies(denominator=denominator)
    if ties == "expected":
        return expected_average_precision(
            histograms.counts, histograms.relevant, k, denominator, harmonic
        )
    column = _stable_column(histograms, k)
    precision_sums = histograms.stable_precision_sums[:, column]
    total_relevant = histograms.relevant.sum(axis=1)
    if k is None or k >= histograms.n_database:
        divisor = total_relevant
    elif denominator == "retrieved":
        divisor = histograms.stable_relevant_retrieved[:, column]
    elif denominator == "min_rk":
        divisor = np.minimum(total_relevant, k)
    else:
        divisor = total_relevant
    # Nothing relevant retrieved: AP@K = 0 (precision_sums is 0 too); R = 0: nan.
    ap = np.divide(precision_sums, divisor, out=np.zeros(divisor.shape), where=divisor > 0)
    return np.where(total_relevant > 0, ap, np.nan)


def per_query_relevant_retrieved(histograms: DistanceHistograms, k: int, ties: str) -> np.ndarray:
    """``(n_queries,)`` float: (expected, for tie-aware) relevant items among the first K."""
    if ties == "expected":
        return expected_relevant_retrieved(histograms.counts, histograms.relevant, k)
    return histograms.stable_relevant_retrieved[:, _stable_column(histograms, k)].astype(float)


# Deliberate repetition: every label metric (here, `sgh.metrics.radius`, `evaluate_labels`) spells
# out the same leading parameters (codes, bits, labels) and policies: each is a public signature,
# so they stay written out; what they compute is shared (`label_histograms`, the per-query
# functions above).
def average_precisions(
    query_codes: np.ndarray,
    database_codes: np.ndarray,
    bits: int,
    query_labels: np.ndarray,
    database_labels: np.ndarray,
    ties: str = "expected",
    k: int | None = None,
    denominator: str = DEFAULT_DENOMINATOR,
    workers: int | None = None,
) -> np.ndarray:
    """AP@all (``k=None``) or AP@K of every query of a Hamming ranking.

    ``AP@K = (1/D) * sum_{k' <= K: item at rank k' relevant} P@k'``, P@k' the fraction of
    relevant items among the first k'. Over the whole ranking D = R (the number of relevant
    database items). With a cut-off, D is ``denominator``: ``"retrieved"`` (default) = relevant
    items in the top K, AP@K = 0 when there is none — the convention of the deep-hashing code
    behind most published mAP@K tables (e.g. DeepHash's CalcTopMap), hence the default so our
    numbers compare with theirs; ``"min_rk"`` = min(R, K), which, unlike "retrieved", does not
    reward retrieving a single relevant item at rank 1; ``"r"`` = R. K >= n_database is the
    whole ranking.

    Args:
        query_codes: ``(n_queries, ceil(bits/8))`` uint8 packed codes.
        database_codes: ``(n_database, ceil(bits/8))`` uint8 packed codes.
        bits: code length.
        query_labels, database_labels: 1-D labels or 2-D 0/1 label matrices
            (:mod:`sgh.metrics.relevance`).
        ties: ``"expected"`` (tie-aware, exact expectation, O(n_database + bits) per query, plus
            O(K) for "retrieved" at a cut-off) or ``"stable"`` (ties by database index; ranks the
            items up to the cut-off distance, a full stable sort for AP@all).
        k: cut-off K >= 1, or None for the whole ranking.
        denominator: see above; ignored for the whole ranking.
        workers: threads (default: up to 8, one per core); results do not depend on it.

    Returns:
        ``(n_queries,)`` float64; nan for queries with no relevant database item.
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


def mean_average_precision(
    query_codes: np.ndarray,
    database_codes: np.ndarray,
    bits: int,
    query_labels: np.ndarray,
    database_labels: np.ndarray,
    ties: str = "expected",
    no_relevant: str = "skip",
    k: int | None = None,
    denominator: str = DEFAULT_DENOMINATOR,
    workers: int | None = None,
) -> dict:
    """mAP@all (``k=None``) or mAP@K of a Hamming ranking; see :func:`average_precisions`.

    Args:
        no_relevant: policy for queries with no relevant database item (R = 0): ``"skip"``
            (default) excludes them from the mean; ``"zero"`` counts them as AP = 0; ``"error"``
            raises ValueError. They are counted in ``n_no_relevant`` in every case.

    Returns:
        dict with ``map`` (float; nan if no query is scored), ``n_queries``, ``n_scored``
        (queries in the mean), ``n_no_relevant`` (ints), and the conventions used, so the dict
        can be written to a results file as is: ``ties``, ``no_relevant_policy``, ``k`` (int, or
        ``"all"``) and ``denominator`` (``"r"`` for the whole ranking, where all coincide).
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
        if name == "precision":
            per_query[k] = retrieved / min(k, histograms.n_database)
        else:
            with np.errstate(invalid="ignore", divide="ignore"):
                per_query[k] = retrieved / total_relevant
    result = average_over_queries(per_query, total_relevant, no_relevant)
    return {name: {k: result.pop(k) for k in cutoffs}, **result, "ties": ties}


# The same leading parameters as every label metric, on purpose (see `average_precisions`).
def precision_at_k(
    query_codes: np.ndarray,
    database_codes: np.ndarray,
    bits: int,
    query_labels: np.ndarray,
    database_labels: np.ndarray,
    k_values: int | Iterable[int],
    ties: str = "expected",
    no_relevant: str = "skip",
    workers: int | None = None,
) -> dict:
    """Precision@K: relevant items among the first K of the ranking / min(K, n_database).

    Tie-aware: the items of the cut-off distance level each count (K - #closer) / #at_level,
    i.e. expected relevant retrieved = R_b + m r / n, with R_b the relevant items closer than the
    cut-off level, which holds n items, r relevant, m = K - #closer of them in the top K
    (:mod:`sgh.metrics.tie_aware`); ``"stable"`` takes the first K by (distance, index).
    Queries with R = 0 have P@K = 0 but follow ``no_relevant`` like every metric, so that all
    metrics of one evaluation average over the same queries.

    Returns:
        dict with ``precision`` ({K: float}, python int keys in the order given), ``n_queries``,
        ``n_scored``, ``n_no_relevant``, ``no_relevant_policy``, ``ties``.
    """
    labelled = (query_codes, database_codes, bits, query_labels, database_labels)
    return _top_k_metric("precision", labelled, k_values, ties, no_relevant, workers)


# The same leading parameters as every label metric, on purpose (see `average_precisions`).
def recall_at_k(
    query_codes: np.ndarray,
    database_codes: np.ndarray,
    bits: int,
    query_labels: np.ndarray,
    database_labels: np.ndarray,
    k_values: int | Iterable[int],
    ties: str = "expected",
    no_relevant: str = "skip",
    workers: int | None = None,
) -> dict:
    """Recall@K: relevant items among the first K of the ranking / R (label relevance).

    Same tie policies as :func:`precision_at_k`; for recall of Euclidean ground truth (Recall
    K@N) see :func:`sgh.metrics.recall_at_n`.

    Returns:
        dict with ``recall`` ({K: float}), ``n_queries``, ``n_scored``, ``n_no_relevant``,
        ``no_relevant_policy``, ``ties``.
    """
    labelled = (query_codes, database_codes, bits, query_labels, database_labels)
    return _top_k_metric("recall", labelled, k_values, ties, no_relevant, workers)
