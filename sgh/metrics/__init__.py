"""Retrieval metrics of Hamming rankings: pure functions on packed codes, explicit conventions.

Its modules, one line each: docs/development.md. :data:`CONVENTIONS` and :func:`conventions`
give the conventions as text, to be written next to every reported number.
"""

from sgh.metrics.conventions import (
    CONVENTIONS,
    DEFAULT_DENOMINATOR,
    DENOMINATORS,
    NO_RELEVANT_POLICIES,
    TIES,
    average_over_queries,
    conventions,
)
from sgh.metrics.histograms import (
    DEFAULT_WORKERS,
    DistanceHistograms,
    distance_histograms,
    label_histograms,
)
from sgh.metrics.labels import evaluate_labels
from sgh.metrics.neighbour_recall import recall_at_n
from sgh.metrics.radius import hash_lookup, per_query_lookup, pr_curve
from sgh.metrics.ranking import (
    mean_average_precision,
    per_query_average_precision,
    per_query_relevant_retrieved,
)
from sgh.metrics.tie_aware import (
    expected_average_precision,
    expected_relevant_retrieved,
    harmonic_numbers,
)

__all__ = [
    "CONVENTIONS", "DEFAULT_DENOMINATOR", "DEFAULT_WORKERS", "DENOMINATORS",
    "NO_RELEVANT_POLICIES", "TIES", "DistanceHistograms", "average_over_queries", "conventions",
    "distance_histograms", "evaluate_labels", "expected_average_precision",
    "expected_relevant_retrieved", "harmonic_numbers", "hash_lookup", "label_histograms",
    "mean_average_precision", "per_query_average_precision", "per_query_lookup",
    "per_query_relevant_retrieved", "pr_curve", "recall_at_n",
]
