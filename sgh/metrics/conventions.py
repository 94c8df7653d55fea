"""The conventions behind every metric, as choices to validate and as text for results files.

Papers silently disagree about ties, cut-offs, denominators and empty queries, so every number
this package reports travels with the policies that produced it (:func:`conventions`), and
per-query values are averaged by one function (:func:`average_over_queries`) so that every
metric of a call scores the same queries.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from sgh.errors import check_choice

TIES = ("expected", "stable")
DENOMINATORS = ("retrieved", "min_rk", "r")  # of mAP@k (eval.map_k_denominator)
NO_RELEVANT_POLICIES = ("skip", "zero", "error")
# "retrieved" is what the deep-hashing code behind published mAP@K tables computes (DeepHash's
# CalcTopMap), so the default makes our numbers comparable; "min_rk", which does not reward a
# single relevant item at rank 1, is the better choice to compare methods among themselves.
DEFAULT_DENOMINATOR = "retrieved"

_TIES_TEXT = {
    "expected": "tie-aware: expected value when items at equal Hamming distance are in uniformly "
    "random order (McSherry & Najork 2008), computed exactly from per-distance counts",
    "stable": "ties at equal Hamming distance broken by database index (stable sort)",
}
_NO_RELEVANT_TEXT = {
    "skip": "queries with no relevant database item are excluded from every mean and counted in "
    "n_no_relevant; a mean is nan when no query is scored",
    "zero": "queries with no relevant database item score 0 in every metric (AP = 0, P = R = 0) "
    "and are counted in n_no_relevant",
    "error": "a query with no relevant database item raises ValueError",
}
_DENOMINATOR_TEXT = {
    "retrieved": "AP@K divides by the number of relevant items retrieved in the top K (0 if none "
    "is); the most common choice in deep-hashing code",
    "min_rk": "AP@K divides by min(R, K)",
    "r": "AP@K divides by R, the number of relevant database items",
}
_POLICIES = {"ties": TIES, "denominator": DENOMINATORS, "no_relevant": NO_RELEVANT_POLICIES}


def check_policies(**policies: object) -> None:
    """:func:`check_choice` of each policy given by keyword, in order: the first bad one raises."""
    for name, value in policies.items():
        check_choice(name, value, _POLICIES[name])


def check_cutoffs(values: int | Iterable[int], name: str = "k_values") -> list[int]:
    """Positive integer cut-offs as python ints, in the order given."""
    array = np.atleast_1d(np.asarray(values))
    if array.ndim != 1 or array.size == 0 or not np.issubdtype(array.dtype, np.integer) \
            or array.min() < 1:
        raise ValueError(f"{name} must be positive integers, got {values!r}")
    return [int(value) for value in array]


def conventions(ties: str = "expected", no_relevant: str = "skip",
                denominator: str = DEFAULT_DENOMINATOR) -> dict[str, str]:
    """The conventions behind the numbers of :mod:`sgh.metrics`, as text for results files."""
    check_policies(ties=ties, no_relevant=no_relevant, denominator=denominator)
    return {
        "distance": "Hamming distance = popcount(query XOR item); database ranked by increasing "
        "distance",
        "relevance": "1-D labels: relevant = same label; 2-D 0/1 label matrices: relevant = at "
        "least one shared label; Recall K@N: relevant = among the first K ground-truth ids",
        "ties": _TIES_TEXT[ties],
        "map": "mAP@all: AP = (1/R) * sum over relevant items of precision at their rank, over the "
        "whole database; R = number of relevant database items; mAP = mean AP over scored "
        "queries",
        "map_at_k": "mAP@K: AP@K = (1/D) * sum over relevant items ranked <= K of precision at "
        "their rank; " + _DENOMINATOR_TEXT[denominator] + "; K >= database size means the whole "
        "ranking, where every denominator equals R",
        "precision_at_k": "P@K = relevant items in the top K / min(K, database size); R@K = "
        "relevant items in the top K / R; with tie-aware ties the items at the cut-off distance "
        "count (K - #closer) / #at_cut-off each",
        "hash_lookup": "hash lookup within Hamming radius r (inclusive, distance <= r): precision "
        "= relevant retrieved / retrieved, 0 for a query that retrieves nothing (counted in "
        "n_retrieved_nothing); recall = relevant retrieved / R; F1 = harmonic mean of the mean "
        "precision and the mean recall (not a mean of per-query F1); ties do not matter",
        "pr_curve": "precision and recall of hash lookup at every radius 0..bits, same conventions",
        "no_relevant": _NO_RELEVANT_TEXT[no_relevant],
        "recall_at_n": "Recall K@N: fraction of the first K ground-truth ids of a query found "
        "among the first N items of the Hamming ranking, averaged over queries; N >= database size "
        "retrieves everything; with tie-aware ties, items at the cut-off distance count "
        "(N - #closer) / #at_cut-off each",
    }


CONVENTIONS = conventions()


# The one table of how reported numbers are named and what they mean: `metrics.json` and
# `eval.json` carry RESULT_CONVENTIONS; the printed table and `sgh-compare` use LABELS, SUMMARIES.
LABELS = {
    "map": "mAP@all, label relevance, {ties}",
    "map_stable": "mAP@all, label relevance, ties by index",
    "map_at_k": "mAP@{k} (/ {denominator}), P@{k}, {ties}",
    "lookup": "lookup within radius {radius} (inclusive): precision, recall",
    "recall": "Recall{k}@{n}, {similarity} {k}-NN, {ties}",
}
# How a similarity names the ground truth's neighbours (dataset.similarity).
SIMILARITY_TITLES = {"euclidean": "Euclidean", "angular": "angular (cosine)",
                     "inner_product": "inner-product (MIPS)"}
SUMMARIES = {
    "map": "mAP@all: label relevance (same label), tie-aware (McSherry & Najork 2008)",
    "recall": ("Recall{k}@{n}: share of each query's {k} exact Euclidean nearest neighbours "
               "among the first {n} of the Hamming ranking, tie-aware at the cut-off"),
    "pr_curve": ("hash lookup within Hamming radius r = 0..bits (inclusive), label relevance; "
                 "mean over queries with a relevant item; a query retrieving nothing has "
                 "precision 0"),
}
RESULT_CONVENTIONS = {
    "map_convention": ("mAP@all over the whole ranking ('ranking'); relevant = same label "
                       "(multi-label: a shared label); Hamming ranking (distance = popcount of "
                       "XOR): 'map' = tie-aware expected AP (items at equal distance in "
                       "uniformly random order, McSherry & Najork 2008), 'map_stable' = ties "
                       "broken by database index; other rankings: ties by id; queries with no "
                       "relevant item are skipped and counted in 'map_queries_without_relevant'"),
    "map_at_k_convention": CONVENTIONS["map_at_k"] + " (denominator named in "
                           "'map_k_denominator'; '_stable' keys: ties by database index)",
    "precision_at_k_convention": CONVENTIONS["precision_at_k"],
    "lookup_convention": CONVENTIONS["hash_lookup"],
    "recall_convention": ("Recall K@N: fraction of each query's K exact nearest database "
                          "items under 'similarity' (squared L2 in the input feature space by "
                          "default, ties by index) found among the first N of the ranking, "
                          "averaged over queries; Hamming ranking: 'recallK@N' = tie-aware at "
                          "the cut-off (expected value under a random order of the cut-off "
                          "distance level), 'recallK@N_stable' = ties broken by database index; "
                          "other rankings: ties by id"),
    "ranking_convention": ("'ranking' says how the database was ordered for every metric: "
                           "hamming (by Hamming distance; metrics tie-aware, '_stable' twins "
                           "with ties by index, hash lookup), or SGHIndex's search in the mode "
                           "of that name: scan (by the method's score of the query's features "
                           "against each code, 'eval.score': encoder, decoder or joint "
                           "likelihood, ties by id; no lookup), two_stage (the encoder score's "
                           "top 'eval.shortlist' reordered by the rescoring score, then the rest "
                           "in the encoder score's order, ties by id) or bytes (SGHIndex(mode="
                           "'bytes'): the database coded by the byte decoder as 'eval.encoding' "
                           "says, ranked by the squared distance to each code's reconstruction, "
                           "ties by id); 'byte_decoder_*' keys: that search of the same queries "
                           "beside another ranking"),
    "similarity_convention": ("'similarity': euclidean (squared L2), angular (vectors "
                              "unit-normalised, then squared L2) or inner_product (largest "
                              "<q, x>); the ground truth of Recall K@N follows it"),
    "codes_convention": ("deterministic codes h = 1[sigmoid(logits) >= 0.5], packed with "
                         "np.packbits(axis=1): first code bit = most significant bit of byte 0"),
}


def average_over_queries(per_query: dict[str, np.ndarray], relevant_counts: np.ndarray,
                         no_relevant: str) -> dict:
    """Mean of each per-query metric under the no-relevant-item policy, plus the query counts.

    ``per_query``: name -> ``(n_queries, ...)`` floats, nan only where R = 0 (``relevant_counts``)
    leaves the metric undefined (AP, recall). Returns name -> mean (an array for per-query arrays
    with more axes; nan when no query is scored), ``n_queries``, ``n_scored``,
    ``n_no_relevant``, ``no_relevant_policy``.
    """
    check_policies(no_relevant=no_relevant)
    missing = relevant_counts == 0
    if no_relevant == "error" and missing.any():
        raise ValueError(f"{int(missing.sum())} of {missing.size} queries have no relevant "
                         f"database item (first: query {int(np.flatnonzero(missing)[0])}); use "
                         "no_relevant='skip' or 'zero'")
    scored = ~missing if no_relevant == "skip" else np.ones_like(missing)
    result: dict = {}
    for name, values in per_query.items():
        # Undefined values (AP, recall: nan when R = 0) score 0 under "zero"; defined ones
        # (precision, indicators) keep their value.
        missing_rows = missing.reshape(-1, *[1] * (values.ndim - 1))
        values = np.where(missing_rows & np.isnan(values), 0.0, values)[scored]
        mean = values.mean(axis=0) if values.shape[0] else np.full(values.shape[1:], np.nan)
        result[name] = float(mean) if np.ndim(mean) == 0 else mean
    result.update(n_queries=int(missing.size), n_scored=int(scored.sum()),
                  n_no_relevant=int(missing.sum()), no_relevant_policy=no_relevant)
    return result


def average_precision_of_sums(precision_sums: np.ndarray, total_relevant: np.ndarray,
                              retrieved: np.ndarray | None, k: int | None, n_database: int,
                              denominator: str) -> np.ndarray:
    """AP@K (AP@all for ``k=None``) = (sum of precision at relevant ranks <= K) / D, with D by
    ``denominator`` (R over the whole ranking); 0 when D = 0, nan where R = 0."""
    if k is None or k >= n_database or denominator == "r":
        divisor = total_relevant
    elif denominator == "retrieved":
        divisor = retrieved
    else:
        divisor = np.minimum(total_relevant, k)
    ap = np.divide(precision_sums, divisor, out=np.zeros(divisor.shape), where=divisor > 0)
    return np.where(total_relevant > 0, ap, np.nan)
