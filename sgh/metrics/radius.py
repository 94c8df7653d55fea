"""Hash lookup within a Hamming radius, and the precision-recall curve over all radii.

Hash lookup retrieves every database item within Hamming distance r of the query (inclusive:
distance <= r; some libraries' range search is strict, ``< r``). Whole distance levels are in or
out, so the tie policy does not matter. Per query, from the per-distance histograms:

* precision = relevant retrieved / retrieved; 0 for a query that retrieves nothing (counted,
  among the scored queries, in ``n_retrieved_nothing``);
* recall = relevant retrieved / R;
* F1 = 2 P R / (P + R) of the *mean* precision and the *mean* recall (the usual table entry; a
  mean of per-query F1 would differ), 0 when both are 0.

Queries with no relevant item (R = 0) follow ``no_relevant`` like every metric. The PR curve is
the same at every radius 0..bits, from one cumulative sum.
"""

from __future__ import annotations

import numpy as np

from sgh.errors import check_int
from sgh.metrics.conventions import average_over_queries, check_policies
from sgh.metrics.histograms import DistanceHistograms, label_histograms


def check_radius(radius: int, bits: int) -> int:
    """The validated radius's column of the curve: beyond ``bits`` retrieves everything too."""
    return min(check_int("radius", radius, 0), bits)


def per_query_lookup(counts: np.ndarray, relevant: np.ndarray) -> dict[str, np.ndarray]:
    """``precision``, ``recall`` (nan where R = 0) and ``retrieved_nothing``, ``(n_queries,
    bits + 1)`` with column r = radius r, from the per-distance counts of all / relevant items."""
    retrieved = np.cumsum(counts, axis=1)
    relevant_retrieved = np.cumsum(relevant, axis=1).astype(np.float64)
    total_relevant = relevant_retrieved[:, -1:]
    with np.errstate(invalid="ignore", divide="ignore"):
        recall = relevant_retrieved / total_relevant
    precision = np.divide(relevant_retrieved, retrieved, out=np.zeros(retrieved.shape),
                          where=retrieved > 0)
    return {"precision": precision, "recall": recall, "retrieved_nothing": retrieved == 0}


def f1_of_means(precision: float, recall: float) -> float:
    """Harmonic mean of a mean precision and a mean recall: 0 if both are 0, nan if one is."""
    if np.isnan(precision) or np.isnan(recall):
        return float("nan")
    total = precision + recall
    return float(2 * precision * recall / total) if total > 0 else 0.0


def hash_lookup(query_codes: np.ndarray, database_codes: np.ndarray, bits: int,
                query_labels: np.ndarray, database_labels: np.ndarray, radius: int = 2,
                no_relevant: str = "skip", workers: int | None = None) -> dict:
    """Precision, recall, F1 (of the means) and ``n_retrieved_nothing`` of hash lookup within
    Hamming radius ``radius`` >= 0 (inclusive), with the query counts; see the module docstring.
    """
    check_policies(no_relevant=no_relevant)
    at = check_radius(radius, bits)
    # One point of the curve: pr_curve and evaluate_labels agree with it to the last bit.
    result = pr_curve(query_codes, database_codes, bits, query_labels, database_labels,
                      no_relevant, workers)
    del result["radius"]
    precision, recall = result.pop("precision")[at], result.pop("recall")[at]
    return {"radius": int(radius), "precision": precision, "recall": recall,
            "f1": f1_of_means(precision, recall),
            "n_retrieved_nothing": result.pop("n_retrieved_nothing")[at], **result}


# The same leading parameters as every label metric (`mean_average_precision`, `evaluate_labels`),
# on purpose: each is a public signature; what they compute is shared.
def pr_curve(query_codes: np.ndarray, database_codes: np.ndarray, bits: int,
             query_labels: np.ndarray, database_labels: np.ndarray, no_relevant: str = "skip",
             workers: int | None = None) -> dict:
    """Precision and recall of hash lookup at every radius 0..bits: lists ``radius``,
    ``precision``, ``recall``, ``n_retrieved_nothing``, with the query counts."""
    check_policies(no_relevant=no_relevant)
    histograms = label_histograms(query_codes, database_codes, bits, query_labels, database_labels,
                                  workers=workers)
    return pr_curve_of_histograms(histograms, no_relevant)


def pr_curve_of_histograms(histograms: DistanceHistograms, no_relevant: str = "skip") -> dict:
    """:func:`pr_curve` from a scan already made (``label_histograms``); same result."""
    per_query = per_query_lookup(histograms.counts, histograms.relevant)
    result = average_over_queries(per_query, histograms.relevant.sum(axis=1), no_relevant)
    # The mean of a 0/1 indicator times the number of scored queries: the count, exact after rint.
    nothing = np.nan_to_num(np.rint(result.pop("retrieved_nothing") * result["n_scored"]))
    curve = {"radius": list(range(histograms.counts.shape[1])),
             "precision": result.pop("precision").tolist(), "recall": result.pop("recall").tolist(),
             "n_retrieved_nothing": [int(value) for value in nothing]}
    return {**curve, **result}
