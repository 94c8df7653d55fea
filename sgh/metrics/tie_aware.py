"""Tie-aware ranking metrics in closed form from per-distance histograms (no sort).

Notation for one query: the distance levels 0..bits in order; a level holds n items, r of them
relevant; N items (R_b relevant) lie at smaller distances; R is the total number of relevant
items; inside every level the order is uniformly random, independently across levels
(McSherry & Najork, ECIR 2008). H(i) = 1 + 1/2 + ... + 1/i are the harmonic numbers.

*A whole level* (positions N+1..N+n): the item at position N+i is relevant with probability r/n,
and then expects R_b + 1 + (i-1)(r-1)/(n-1) relevant items at or above it, so the level adds
(r/n) * sum_{i=1..n} (a + b(i-1)) / (N+i) to the sum of precisions at relevant ranks, with
a = R_b + 1, b = (r-1)/(n-1) (0 if n = 1). Writing a + b(i-1) = b(N+i) + (a - b(N+1)) gives
r*b + (r/n) * (a - b(N+1)) * (H(N+n) - H(N)): O(1) per level.

*The cut-off level of a top-K list* (the first level whose cumulative count reaches K) is taken
in part: its first m = K - N positions. The number X of relevant items among them is
hypergeometric (n items, r relevant, m drawn); given X = x the x relevant positions are a
uniformly random subset of the m, so the same argument gives the cut level's precision sum

    G(x) = x(x-1)/(m-1) + (x/m) * (a - (x-1)(N+1)/(m-1)) * (H(N+m) - H(N))

(the fractions over m-1 are 0 when m = 1), which is quadratic in x, so E[G(X)] needs only E[X] =
m r/n and E[X(X-1)] = m(m-1) r(r-1) / (n(n-1)). Levels before the cut level are whole,
independent of X: their sum F is as above.

* AP@K with a fixed denominator D (R, or min(R, K)): (F + E[G(X)]) / D, O(1) per level.
* AP@K with D = relevant retrieved = R_b + X (R_b, N, n, r, m those of the cut level): the ratio
  needs the distribution of X: E[(F + G(X)) / (R_b + X)] = sum_x P(X = x) (F + G(x)) / (R_b + x)
  (0 when R_b + x = 0), O(min(r, m)) <= O(K) per query, with P(X = x) from the ratio recurrence
  P(x)/P(x-1) = (r-x+1)(m-x+1) / (x (n-r-m+x)) in log space (relative error ~ K * 1e-16).
* Relevant items in the top K: R_b + m r/n.

K is clipped to n_database; K = n_database (or None) is the whole ranking, where all three
denominators equal R and AP@K is mAP@all's AP.
"""

from __future__ import annotations

import numpy as np

from sgh.metrics.conventions import DEFAULT_DENOMINATOR, average_precision_of_sums, check_policies

# Cells (queries x values of X) of one hypergeometric chunk: bounds memory for large K.
_HYPERGEOMETRIC_CELLS = 1 << 20


def harmonic_numbers(n: int) -> np.ndarray:
    """``(n + 1,)`` float64 with ``H[i] = 1 + 1/2 + ... + 1/i`` and ``H[0] = 0``."""
    return np.concatenate(([0.0], np.cumsum(1.0 / np.arange(1, n + 1))))


def _whole_level_sums(counts, relevant, harmonic):
    """``(queries, levels)``: each level's expected sum of precisions at its relevant ranks."""
    n, r = counts.astype(np.float64), relevant.astype(np.float64)
    items_before = np.cumsum(counts, axis=1) - counts
    relevant_before = np.cumsum(r, axis=1) - r
    harmonic_gap = harmonic[items_before + counts] - harmonic[items_before]
    slope = np.divide(r - 1.0, n - 1.0, out=np.zeros_like(r), where=n > 1)
    share = np.divide(r, n, out=np.zeros_like(r), where=n > 0)
    return r * slope + share * (relevant_before + 1.0 - slope * (items_before + 1.0)) * harmonic_gap


def _cut_level(counts, relevant, k):
    """The level where the top ``k`` ends, per query: index, n, r, N, R_b (before it) and m."""
    rows = np.arange(counts.shape[0])
    at_or_before = np.cumsum(counts, axis=1)
    cut = (at_or_before < k).sum(axis=1)
    n, r = counts[rows, cut], relevant[rows, cut]
    items_before = at_or_before[rows, cut] - n
    relevant_before = np.cumsum(relevant, axis=1)[rows, cut] - r
    return cut, n, r, items_before, relevant_before, k - items_before


def expected_relevant_retrieved(counts: np.ndarray, relevant: np.ndarray, k: int) -> np.ndarray:
    """``(queries,)`` expected number of relevant items among the first ``k`` (clipped to N_db),
    from the ``(queries, bits + 1)`` per-distance counts of all / relevant items."""
    k = min(int(k), int(counts[0].sum())) if counts.shape[0] else int(k)
    _, n, r, _, relevant_before, m = _cut_level(counts, relevant, k)
    return relevant_before + np.divide(m * r, n, out=np.zeros(n.shape), where=n > 0)


def _cut_level_sum(x, m, items_before, relevant_before, harmonic_gap):
    """G(x) of the module docstring, elementwise on broadcast float arrays."""
    shape = np.broadcast_shapes(x.shape, m.shape)
    pair_term = np.divide(x * (x - 1.0), m - 1.0, out=np.zeros(shape), where=m > 1)
    slope = np.divide(x - 1.0, m - 1.0, out=np.zeros(shape), where=m > 1)
    return pair_term + x / m * (relevant_before + 1.0 - slope * (items_before + 1.0)) * harmonic_gap


def _hypergeometric_mean(value_of_x, n, r, m):
    """``sum_x P(X = x) * value_of_x(x, rows)`` per query, X ~ hypergeometric(n, r, m), ``x`` a
    ``(rows, width)`` float array. Queries go in chunks of ~:data:`_HYPERGEOMETRIC_CELLS` cells,
    sorted by the width of their support so that little is padding.
    """
    low, high = np.maximum(0, m - (n - r)), np.minimum(r, m)
    span = high - low
    result = np.empty(n.shape)
    order = np.argsort(span, kind="stable")
    start = 0
    while start < order.size:
        stop = start + 1
        while (stop < order.size
               and (stop + 1 - start) * (span[order[stop]] + 1) <= _HYPERGEOMETRIC_CELLS):
            stop += 1
        rows = order[start:stop]
        offsets = np.arange(int(span[rows].max()) + 1)[None, :]
        valid = offsets <= span[rows, None]
        x = (low[rows, None] + offsets).astype(np.float64)
        nn, rr, mm = (values[rows, None].astype(np.float64) for values in (n, r, m))
        # log P(x) - log P(x-1) = log((r-x+1)(m-x+1)) - log(x (n-r-m+x)), all factors >= 1 on
        # the support; padding cells get factors 1 and are masked afterwards.
        up = np.where(valid, (rr - x + 1.0) * (mm - x + 1.0), 1.0)
        down = np.where(valid, x * (nn - rr - mm + x), 1.0)
        log_ratio = np.log(up) - np.log(down)
        log_ratio[:, 0] = 0.0  # relative to P(low)
        log_p = np.where(valid, np.cumsum(log_ratio, axis=1), -np.inf)
        weights = np.exp(log_p - log_p.max(axis=1, keepdims=True))
        values = np.where(valid, value_of_x(x, rows), 0.0)
        result[rows] = (weights * values).sum(axis=1) / weights.sum(axis=1)
        start = stop
    return result


def expected_average_precision(counts: np.ndarray, relevant: np.ndarray, k: int | None = None,
                               denominator: str = DEFAULT_DENOMINATOR,
                               harmonic: np.ndarray | None = None) -> np.ndarray:
    """``(queries,)`` tie-aware AP@K (AP@all for ``k=None``); nan where R = 0.

    From the ``(queries, bits + 1)`` per-distance counts of all / relevant items (see the module
    docstring); ``harmonic``: :func:`harmonic_numbers` of at least n_database (None: computed).
    """
    check_policies(denominator=denominator)
    n_database = int(counts[0].sum()) if counts.shape[0] else 0
    harmonic = harmonic_numbers(n_database) if harmonic is None else harmonic
    total_relevant = relevant.sum(axis=1)
    level_sums = _whole_level_sums(counts, relevant, harmonic)
    with np.errstate(invalid="ignore", divide="ignore"):
        if k is None or k >= n_database:
            return average_precision_of_sums(level_sums.sum(axis=1), total_relevant, None, None,
                                             n_database, denominator)
        cut, *level = _cut_level(counts, relevant, int(k))
        before_cut = np.arange(counts.shape[1])[None, :] < cut[:, None]
        whole = np.where(before_cut, level_sums, 0.0).sum(axis=1)
        harmonic_gap = harmonic[level[2] + level[4]] - harmonic[level[2]]
        # Floats from here: products like m * r * (r - 1) overflow int64 for huge databases.
        n, r, items_before, relevant_before, m = (np.asarray(v, np.float64) for v in level)
        if denominator != "retrieved":
            mean_x = np.divide(m * r, n, out=np.zeros(n.shape), where=n > 0)
            # E[X(X-1)] / (m-1) = m r (r-1) / (n (n-1)); 0 if m = 1
            mean_pairs = np.divide(m * r * (r - 1.0), n * (n - 1.0), out=np.zeros(n.shape),
                                   where=m > 1)
            cut_sum = mean_pairs + harmonic_gap / m * (
                (relevant_before + 1.0) * mean_x - (items_before + 1.0) * mean_pairs)
            return average_precision_of_sums(whole + cut_sum, total_relevant, None, int(k),
                                             n_database, denominator)

        def ratio(x, rows):
            value = whole[rows, None] + _cut_level_sum(
                x, m[rows, None], items_before[rows, None], relevant_before[rows, None],
                harmonic_gap[rows, None])
            retrieved = relevant_before[rows, None] + x
            return np.divide(value, retrieved, out=np.zeros(value.shape), where=retrieved > 0)

        # X is certain when the level is whole or all-or-nothing relevant: no sum needed.
        certain = (m == n) | (r == 0) | (r == n)
        ap = np.empty(n.shape)
        certain_rows = np.flatnonzero(certain)
        certain_x = np.where(m == n, r, np.where(r == 0, 0.0, m))[certain_rows, None]
        ap[certain_rows] = ratio(certain_x, certain_rows)[:, 0]
        random_rows = np.flatnonzero(~certain)
        ap[random_rows] = _hypergeometric_mean(lambda x, rows: ratio(x, random_rows[rows]),
                                               n[random_rows], r[random_rows], m[random_rows])
        return np.where(total_relevant > 0, ap, np.nan)
