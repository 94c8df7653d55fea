"""The inverted lists' compiled scan (`scan_lists_top_k`): each item's score summed in the order
its docstring gives, in float32, whatever the code's byte count (four bytes take a path of their
own), and the k best by (score, row) of the probed lists only."""

import numpy as np
import pytest

from sgh.scores.lookup_kernels import scan_lists_top_k


def _ordered_scores(tables, list_tables, constants, codes, terms, list_of_row, q, p):
    """numpy's float32 sums in the documented order: ``(terms + t[0, c0] + t[1, c1] + ...) +
    constant``, ``t`` the query's tables less its list's, one addition after the other."""
    shifted = tables[q] - list_tables[list_of_row]  # (rows, bytes, 256)
    scores = terms.copy()
    for j in range(codes.shape[1]):
        scores = scores + shifted[np.arange(len(codes)), j, codes[:, j]]
    return scores + constants[q, p]


@pytest.mark.parametrize("code_bytes", [2, 4, 5])
@pytest.mark.parametrize("k", [5, 40])  # kept by a heap, by a reservoir
def test_list_scores_are_summed_in_the_documented_order_for_any_byte_count(code_bytes, k):
    rng = np.random.default_rng(code_bytes)
    nlist, nq, rows = 6, 7, 300
    list_of_row = np.sort(rng.integers(0, nlist, rows))
    starts = np.searchsorted(list_of_row, np.arange(nlist + 1)).astype(np.int64)
    codes = rng.integers(0, 256, (rows, code_bytes)).astype(np.uint8)
    terms = rng.standard_normal(rows).astype(np.float32)
    tables = rng.standard_normal((nq, code_bytes, 256)).astype(np.float32)
    list_tables = rng.standard_normal((nlist, code_bytes, 256)).astype(np.float32)
    constants = rng.standard_normal((nq, 3)).astype(np.float32) * 10
    probes = np.array([rng.permutation(nlist)[:3] for _ in range(nq)], np.int64)
    probes[0, 2] = -1  # a slot with no list
    D = np.empty((nq, k), np.float32)
    I = np.empty((nq, k), np.int64)
    scan_lists_top_k(tables, list_tables, constants, codes, terms, starts, probes, D, I)
    for q in range(nq):
        scores, rows_of = [], []
        for p, chosen in enumerate(probes[q]):
            if chosen < 0:
                continue
            inside = np.flatnonzero(list_of_row == chosen)
            every = _ordered_scores(tables, list_tables, constants, codes, terms, list_of_row,
                                    q, p)
            scores.append(every[inside])
            rows_of.append(inside)
        scores, rows_of = np.concatenate(scores), np.concatenate(rows_of)
        order = np.lexsort((rows_of, scores))[:k]
        np.testing.assert_array_equal(I[q, : len(order)], rows_of[order])
        np.testing.assert_array_equal(D[q, : len(order)], scores[order])
