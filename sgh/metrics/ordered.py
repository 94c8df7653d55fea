"""Both protocols' metrics for rankings given as ids in rank order (asymmetric and rescored).

A real-valued score leaves no ties worth modelling, so these rankings break the rare equal scores
by database id and every metric is the plain one of that order: the definitions are those of the
Hamming engine's ``ties="stable"`` (:mod:`sgh.metrics.ranking`), which gives the same numbers on
a Hamming ranking with ties by id. Label metrics skip (and count) queries with no relevant item.

Rankings arrive in blocks of queries (``order_blocks(depth)`` of :mod:`sgh.search.rankings`),
``depth`` ids per query: the whole database when labels are scored (mAP@all), else the largest N.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from sgh.metrics.conventions import (
    DEFAULT_DENOMINATOR,
    average_over_queries,
    average_precision_of_sums,
    check_policies,
)
from sgh.metrics.relevance import label_relevance, neighbour_relevance


def ordered_metrics(ranking, n_queries: int, n_database: int,
                    query_labels: np.ndarray | None = None,
                    database_labels: np.ndarray | None = None,
                    map_k: Iterable[int] = (), denominator: str = DEFAULT_DENOMINATOR,
                    groundtruth: np.ndarray | None = None, recall_k: int = 10,
                    recall_n: Iterable[int] = ()) -> dict:
    """Label metrics (where labels are given) and Recall K@N (where ground truth is given).

    Returns a flat dict: ``map``, ``map@K``, ``precision@K``, ``recall@K``,
    ``map_queries_without_relevant`` (labels); ``recall{K}@{N}`` (ground truth).
    """
    check_policies(denominator=denominator)
    if n_database == 0:
        raise ValueError("the database is empty (0 items); nothing can be ranked")
    map_k, recall_n = [int(k) for k in map_k], [int(n) for n in recall_n]
    labelled = database_labels is not None
    relevance = label_relevance(query_labels, database_labels) if labelled else None
    neighbours = (neighbour_relevance(groundtruth, recall_k, n_queries, n_database)
                  if groundtruth is not None else None)
    depth = n_database if labelled else min(n_database, max(recall_n, default=1))
    per_query: dict[str, list[np.ndarray]] = {}
    found: dict[int, list[np.ndarray]] = {n: [] for n in recall_n}
    for q0, q1, orders in ranking.order_blocks(depth):
        if labelled:
            classes = relevance.class_relevance(slice(q0, q1))
            relevant = np.take_along_axis(classes, relevance.database_classes[orders], axis=1)
            for key, values in _label_block(relevant, map_k, denominator).items():
                per_query.setdefault(key, []).append(values)
        if neighbours is not None:
            hits = neighbour_hits(orders, neighbours, q0, q1)
            for n in recall_n:
                found[n].append(hits[:, : min(n, hits.shape[1])].sum(axis=1))
    result: dict = {}
    if labelled:
        values = {key: np.concatenate(parts) for key, parts in per_query.items()}
        total = values.pop("_relevant").astype(np.int64)
        averaged = average_over_queries(values, total, "skip")
        result.update({key: averaged[key] for key in values})
        result["map_queries_without_relevant"] = averaged["n_no_relevant"]
    for n in recall_n:
        hits = np.concatenate(found[n]) if found[n] else np.zeros(0)
        result[f"recall{recall_k}@{n}"] = (
            float(hits.sum() / (hits.size * recall_k)) if hits.size else float("nan"))
    return result


def _label_block(relevant: np.ndarray, map_k: list[int], denominator: str) -> dict:
    """Per-query label metrics of a block of full rankings (``relevant``: ``(b, n)`` bool)."""
    n = relevant.shape[1]
    cumulative = np.cumsum(relevant, axis=1)
    total = cumulative[:, -1]
    # Sums of precision at each relevant item's rank.
    sums = np.cumsum(np.where(relevant, cumulative / np.arange(1, n + 1), 0.0), axis=1)
    out = {"_relevant": total,
           "map": average_precision_of_sums(sums[:, -1], total, None, None, n, denominator)}
    for k in map_k:
        at = min(k, n) - 1
        retrieved = cumulative[:, at]
        out[f"map@{k}"] = average_precision_of_sums(sums[:, at], total, retrieved, k, n,
                                                    denominator)
        out[f"precision@{k}"] = retrieved / min(k, n)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"recall@{k}"] = retrieved / total
    return out


def neighbour_hits(orders: np.ndarray, neighbours, q0: int, q1: int) -> np.ndarray:
    """``(b, depth)`` bool: whether the item at each rank (``orders``, ids; -1 for none) is one of
    the query's distinct first-K ground-truth ids (``neighbours``, rows ``q0..q1 - 1``)."""
    ids, distinct = neighbours.ids[q0:q1], neighbours.distinct[q0:q1]
    # ids rows are sorted: a binary search per ranked item finds whether it is among them.
    hits = np.zeros(orders.shape, dtype=bool)
    for row in range(len(orders)):
        wanted = ids[row][distinct[row]]
        position = np.searchsorted(wanted, orders[row])
        position = np.minimum(position, len(wanted) - 1)
        hits[row] = wanted[position] == orders[row]
    return hits
