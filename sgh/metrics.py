"""Hamming-ranking retrieval metrics: mAP@all and Recall K@N, with explicit tie policies.

Pure numpy functions on packed codes (see :mod:`sgh.codes`). The database is ranked by increasing
Hamming distance to each query. With ``bits``-bit codes there are only ``bits + 1`` distinct
distances, so most items tie, and how ties are ordered changes the numbers a lot (on a synthetic
16-bit case mAP@all moved from 0.223 to 0.379). Every metric therefore takes ``ties``:

* ``"expected"`` (default): the expected value of the metric when items at equal distance are in
  uniformly random order (McSherry & Najork, ECIR 2008), computed exactly from per-distance counts
  without sorting;
* ``"stable"``: ties broken by database index (a stable sort by distance), which is what most
  published code does implicitly.

Work is done in blocks of queries against the whole database (see
:func:`sgh.codes.iter_distance_blocks`): memory is O(queries_per_block * n_database), at most
~30 bytes per (query, item) pair (XOR word, distance, histogram keys or a stable sort order and
gathered labels), i.e. under ~8 MB for the default 2**18 pairs per block. :data:`CONVENTIONS` and
:func:`conventions` give the conventions as text, to be written next to every reported number.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from sgh.codes import iter_distance_blocks, validate_codes

TIES = ("expected", "stable")
NO_RELEVANT_POLICIES = ("skip", "zero", "error")

_TIES_TEXT = {
    "expected": "tie-aware: expected value when items at equal Hamming distance are in uniformly "
    "random order (McSherry & Najork 2008), computed exactly from per-distance counts",
    "stable": "ties at equal Hamming distance broken by database index (stable sort)",
}
_NO_RELEVANT_TEXT = {
    "skip": "queries with no relevant database item are excluded from the mean and counted in "
    "n_no_relevant; map is nan when no query is scored",
    "zero": "queries with no relevant database item count as AP = 0 and are counted in "
    "n_no_relevant",
    "error": "a query with no relevant database item raises ValueError",
}


def _check_choice(name: str, value: object, accepted: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in accepted:
        raise ValueError(f"{name} must be one of {accepted}, got {value!r}")


def conventions(ties: str = "expected", no_relevant: str = "skip") -> dict[str, str]:
    """The conventions behind the numbers of this module, as text for results files."""
    _check_choice("ties", ties, TIES)
    _check_choice("no_relevant", no_relevant, NO_RELEVANT_POLICIES)
    return {
        "distance": "Hamming distance = popcount(query XOR item); database ranked by increasing "
        "distance",
        "ties": _TIES_TEXT[ties],
        "map": "mAP@all: AP = (1/R) * sum over relevant items of precision at their rank, over the "
        "whole database; R = number of database items with the query's label (relevance = same "
        "label); mAP = mean AP over scored queries",
        "no_relevant": _NO_RELEVANT_TEXT[no_relevant],
        "recall_at_n": "Recall K@N: fraction of the first K ground-truth ids of a query found "
        "among the first N items of the Hamming ranking, averaged over queries; N >= database size "
        "retrieves everything; with tie-aware ties, items at the cut-off distance count "
        "(N - #closer) / #at_cut-off each",
    }


CONVENTIONS = conventions()


def _validated_codes(query_codes, database_codes, bits) -> tuple[np.ndarray, np.ndarray]:
    query_codes = validate_codes(query_codes, bits, "query codes")
    database_codes = validate_codes(database_codes, bits, "database codes")
    if database_codes.shape[0] == 0:
        raise ValueError("the database is empty (0 codes); nothing can be retrieved")
    return query_codes, database_codes


def _encode_labels(query_labels, database_labels, n_queries, n_database):
    """Map labels (any comparable dtype) to integer ids 0..C-1 shared by queries and database."""
    encoded = []
    for name, labels, n in (
        ("query", query_labels, n_queries),
        ("database", database_labels, n_database),
    ):
        labels = np.asarray(labels)
        if labels.shape != (n,):
            raise ValueError(
                f"{name}_labels must be a 1-D array with one label per {name} code ({n}), "
                f"got shape {labels.shape}"
            )
        encoded.append(labels)
    _, inverse = np.unique(np.concatenate(encoded), return_inverse=True)
    inverse = inverse.reshape(-1).astype(np.intp)
    return inverse[:n_queries], inverse[n_queries:]


def _distance_histograms(distances: np.ndarray, levels: int) -> np.ndarray:
    """Per-row counts of each distance 0..levels-1: ``(rows, levels)`` int64 from one bincount."""
    rows = distances.shape[0]
    keys = distances.astype(np.intp)
    keys += (np.arange(rows, dtype=np.intp) * levels)[:, None]
    return np.bincount(keys.ravel(), minlength=rows * levels).reshape(rows, levels)


def _expected_ap(counts: np.ndarray, relevant: np.ndarray, harmonic: np.ndarray) -> np.ndarray:
    """Tie-aware AP from ``(queries, levels)`` counts of all and of relevant items per distance.

    Before a level there are N items, R of them relevant; the level has n items, r relevant, in
    uniformly random order. The item at position i of the level is relevant with probability
    r/n, and then expects R + 1 + (i-1)(r-1)/(n-1) relevant items at or above it, so the level
    contributes (r/n) * sum_{i=1..n} (a + b(i-1)) / (N+i) with a = R+1, b = (r-1)/(n-1) (0 if
    n = 1). Writing a + b(i-1) = b(N+i) + (a - b(N+1)), the sum is
    n*b + (a - b(N+1)) * (H(N+n) - H(N)), H the harmonic numbers: O(1) per level.
    """
    n = counts.astype(np.float64)
    r = relevant.astype(np.float64)
    items_before = np.cumsum(counts, axis=1) - counts
    relevant_before = np.cumsum(r, axis=1) - r
    harmonic_gap = harmonic[items_before + counts] - harmonic[items_before]
    slope = np.divide(r - 1.0, n - 1.0, out=np.zeros_like(r), where=n > 1)
    share = np.divide(r, n, out=np.zeros_like(r), where=n > 0)
    level_sums = r * slope + share * (relevant_before + 1.0 - slope * (items_before + 1.0)) * (
        harmonic_gap
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        return level_sums.sum(axis=1) / r.sum(axis=1)


def _stable_ap(distances: np.ndarray, database_labels: np.ndarray, query_labels: np.ndarray):
    """Exact AP of each row with ties broken by database index (stable sort; radix for uint8)."""
    order = np.argsort(distances, axis=1, kind="stable")
    is_relevant = database_labels[order] == query_labels[:, None]
    rows, positions = np.nonzero(is_relevant)  # row-major: positions increase within each row
    n_relevant = np.bincount(rows, minlength=distances.shape[0])
    first_of_row = np.cumsum(n_relevant) - n_relevant
    relevant_rank = np.arange(1, rows.size + 1) - first_of_row[rows]
    precision_sums = np.bincount(
        rows, weights=relevant_rank / (positions + 1.0), minlength=distances.shape[0]
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        return precision_sums / n_relevant


def average_precisions(
    query_codes: np.ndarray,
    database_codes: np.ndarray,
    bits: int,
    query_labels: np.ndarray,
    database_labels: np.ndarray,
    ties: str = "expected",
) -> np.ndarray:
    """AP over the whole Hamming ranking (AP@all) of every query.

    ``AP = (1/R) * sum_{k: item at rank k relevant} P@k`` where R is the number of database items
    with the query's label and P@k the fraction of relevant items among the first k.

    Args:
        query_codes: ``(n_queries, ceil(bits/8))`` uint8 packed codes.
        database_codes: ``(n_database, ceil(bits/8))`` uint8 packed codes.
        bits: code length.
        query_labels, database_labels: 1-D label arrays (any comparable dtype); relevant = equal.
        ties: ``"expected"`` (tie-aware, exact expectation, O(n_database + bits) per query) or
            ``"stable"`` (ties broken by database index; one stable sort per query).

    Returns:
        ``(n_queries,)`` float64; nan for queries with no relevant database item.
    """
    _check_choice("ties", ties, TIES)
    query_codes, database_codes = _validated_codes(query_codes, database_codes, bits)
    n_database = database_codes.shape[0]
    query_ids, database_ids = _encode_labels(
        query_labels, database_labels, query_codes.shape[0], n_database
    )
    ap = np.empty(query_codes.shape[0])
    if ties == "stable":
        for block, distances in iter_distance_blocks(query_codes, database_codes):
            ap[block] = _stable_ap(distances, database_ids, query_ids[block])
        return ap

    # Order does not matter for the expectation, so group the database by label: the relevant
    # items of a query are then one contiguous slice of each distance row.
    by_label = np.argsort(database_ids, kind="stable")
    sorted_ids = database_ids[by_label]
    label_range = np.arange(max(query_ids.max(initial=0), sorted_ids.max()) + 1)
    slice_starts = np.searchsorted(sorted_ids, label_range, side="left")
    slice_stops = np.searchsorted(sorted_ids, label_range, side="right")
    harmonic = np.concatenate(([0.0], np.cumsum(1.0 / np.arange(1, n_database + 1))))
    levels = bits + 1
    for block, distances in iter_distance_blocks(query_codes, database_codes[by_label]):
        counts = _distance_histograms(distances, levels)
        relevant = np.zeros_like(counts)
        for row, label in enumerate(query_ids[block]):
            relevant_distances = distances[row, slice_starts[label] : slice_stops[label]]
            relevant[row] = np.bincount(relevant_distances, minlength=levels)
        ap[block] = _expected_ap(counts, relevant, harmonic)
    return ap


def mean_average_precision(
    query_codes: np.ndarray,
    database_codes: np.ndarray,
    bits: int,
    query_labels: np.ndarray,
    database_labels: np.ndarray,
    ties: str = "expected",
    no_relevant: str = "skip",
) -> dict:
    """mAP@all of a Hamming ranking; relevance = same label. See :func:`average_precisions`.

    Args:
        ties: ``"expected"`` or ``"stable"`` (see the module docstring).
        no_relevant: policy for queries with no relevant database item (R = 0):
            ``"skip"`` (default) excludes them from the mean; ``"zero"`` counts them as AP = 0;
            ``"error"`` raises ValueError. They are counted in ``n_no_relevant`` in every case.

    Returns:
        dict with ``map`` (float; nan if no query is scored), ``n_queries``, ``n_scored`` (queries
        in the mean), ``n_no_relevant`` (ints), and ``ties`` / ``no_relevant_policy`` (the
        policies used, so the dict can be written to a results file as is).
    """
    _check_choice("no_relevant", no_relevant, NO_RELEVANT_POLICIES)
    ap = average_precisions(query_codes, database_codes, bits, query_labels, database_labels, ties)
    missing = np.isnan(ap)
    if no_relevant == "error" and missing.any():
        raise ValueError(
            f"{int(missing.sum())} of {ap.size} queries have no relevant database item "
            f"(first: query {int(np.flatnonzero(missing)[0])}); use no_relevant='skip' or 'zero'"
        )
    scored = np.where(missing, 0.0, ap) if no_relevant == "zero" else ap[~missing]
    return {
        "map": float(scored.mean()) if scored.size else float("nan"),
        "n_queries": int(ap.size),
        "n_scored": int(scored.size),
        "n_no_relevant": int(missing.sum()),
        "ties": ties,
        "no_relevant_policy": no_relevant,
    }


def _check_cutoffs(n_values: int | Iterable[int]) -> np.ndarray:
    values = np.atleast_1d(np.asarray(n_values))
    if (
        values.ndim != 1
        or values.size == 0
        or not np.issubdtype(values.dtype, np.integer)
        or values.min() < 1
    ):
        raise ValueError(f"n_values must be positive integers, got {n_values!r}")
    return values.astype(np.int64)


def recall_at_n(
    query_codes: np.ndarray,
    database_codes: np.ndarray,
    bits: int,
    groundtruth: np.ndarray,
    n_values: int | Iterable[int],
    k: int = 10,
    ties: str = "expected",
) -> dict[int, float]:
    """Recall K@N (the SGH paper's metric): how many true neighbours the Hamming ranking finds.

    For each query, the fraction of its first ``k`` ground-truth ids found among the first N
    items of the Hamming ranking; averaged over queries (every query counts, denominator K).
    With ``ties="expected"``, let the cut-off distance be the first distance whose cumulative
    count reaches N: ground-truth items strictly closer count 1, items at the cut-off count
    ``(N - #closer) / #at_cut-off`` (their probability of being in the first N under a uniformly
    random order within the level), farther items 0. With ``ties="stable"`` the ranking breaks
    ties by database index. N >= n_database retrieves everything (recall 1).

    Args:
        groundtruth: ``(n_queries, >= k)`` integer database ids of the true neighbours, nearest
            first (e.g. :func:`sgh.neighbours.euclidean_neighbours`).
        n_values: one or more cut-offs N >= 1.
        k: number of ground-truth neighbours per query (K).

    Returns:
        ``{N: recall}`` with python int keys in the order given; nan if there are no queries.
    """
    _check_choice("ties", ties, TIES)
    query_codes, database_codes = _validated_codes(query_codes, database_codes, bits)
    n_queries, n_database = query_codes.shape[0], database_codes.shape[0]
    cutoffs = _check_cutoffs(n_values)
    groundtruth = np.asarray(groundtruth)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if (
        groundtruth.ndim != 2
        or groundtruth.shape[0] != n_queries
        or groundtruth.shape[1] < k
        or not np.issubdtype(groundtruth.dtype, np.integer)
    ):
        raise ValueError(
            f"groundtruth must be an integer array of shape ({n_queries}, >= k={k}), got dtype "
            f"{groundtruth.dtype} and shape {groundtruth.shape}"
        )
    groundtruth = groundtruth[:, :k].astype(np.intp)
    if groundtruth.size and (groundtruth.min() < 0 or groundtruth.max() >= n_database):
        raise ValueError(
            f"groundtruth ids must be database indices in [0, {n_database}), found "
            f"{groundtruth.min()}..{groundtruth.max()}"
        )

    found_sum = np.zeros(cutoffs.size)
    effective = np.minimum(cutoffs, n_database)
    for block, distances in iter_distance_blocks(query_codes, database_codes):
        truth = groundtruth[block]
        if ties == "stable":
            order = np.argsort(distances, axis=1, kind="stable")
            ranks = np.empty_like(order)
            np.put_along_axis(ranks, order, np.arange(n_database)[None, :], axis=1)
            truth_ranks = np.take_along_axis(ranks, truth, axis=1)
            found = truth_ranks[:, :, None] < cutoffs[None, None, :]
        else:
            counts = _distance_histograms(distances, bits + 1)
            at_or_closer = np.cumsum(counts, axis=1)
            # First distance level whose cumulative count reaches N: (queries, cut-offs).
            cut = (at_or_closer[:, :, None] < effective[None, None, :]).sum(axis=1)
            at_cut = np.take_along_axis(counts, cut, axis=1)
            closer = np.take_along_axis(at_or_closer, cut, axis=1) - at_cut
            share_at_cut = (effective[None, :] - closer) / at_cut
            truth_distances = np.take_along_axis(distances, truth, axis=1).astype(np.intp)
            found = (truth_distances[:, :, None] < cut[:, None, :]) + (
                truth_distances[:, :, None] == cut[:, None, :]
            ) * share_at_cut[:, None, :]
        found_sum += found.sum(axis=(0, 1))
    recall = found_sum / (n_queries * k) if n_queries else np.full(cutoffs.size, np.nan)
    return {int(cutoff): float(value) for cutoff, value in zip(cutoffs, recall, strict=True)}
