"""Sums in a fixed order: each row's result the same to the bit alone, in any batch and on any
number of threads, so that a query's tables and distances, and so its results, do not depend on
the call it came in.

BLAS picks its kernels and its blocking by a product's shape and threads, and its
matrix-vector kernel sums in another order than its matrix kernels. `product` keeps to what
OpenBLAS's kernels (numpy's own) sum term after term in one pass for any number of rows from
two and any threads: sums of at most `PRODUCT_TERMS` terms, widths a multiple of
`PRODUCT_WIDTH` (at other widths its edge kernels sum otherwise), a lone row as two rows; the
partial products are added in a fixed order. The compiled kernels write their order out:
dimension d adds into partial sum d % `LANES`, and the partial sums meet in one fixed tree, so
the compiler may vectorise the loop but not change the order.
"""

from __future__ import annotations

import numpy as np

from sgh.compiled import compiled

PRODUCT_TERMS, PRODUCT_WIDTH = 128, 64
LANES = 32  # partial sums of the compiled kernels: four vector registers of float32


def product(rows: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """``rows @ matrix`` in float32, ``matrix``'s width a multiple of `PRODUCT_WIDTH` (module
    doc): sums of at most `PRODUCT_TERMS` terms by BLAS, added in a fixed order."""
    n = len(rows)
    if n == 1:
        rows = np.concatenate([rows, rows])
    step = PRODUCT_TERMS
    out = rows[:, :step] @ matrix[:step]
    for start in range(step, rows.shape[1], step):
        out += rows[:, start : start + step] @ matrix[start : start + step]
    return out[:n]


def padded_width(matrix: np.ndarray) -> np.ndarray:
    """``matrix`` with zero columns up to a multiple of `PRODUCT_WIDTH` (zero rows of the
    product's result: the same sums)."""
    width = -(-matrix.shape[1] // PRODUCT_WIDTH) * PRODUCT_WIDTH
    padded = np.zeros((len(matrix), width), np.float32)
    padded[:, : matrix.shape[1]] = matrix
    return padded


@compiled
def dots(rows, vector, out):
    """``out[i] = <rows[i], vector>`` (float64 ``vector``), summed in float64 (module doc)."""
    dim = rows.shape[1]
    body = dim - dim % LANES
    partial = np.empty(LANES, np.float64)
    for i in range(rows.shape[0]):
        row = rows[i]
        partial[:] = 0.0
        for d in range(0, body, LANES):
            for lane in range(LANES):
                partial[lane] += row[d + lane] * vector[d + lane]
        tail = 0.0
        for d in range(body, dim):
            tail += row[d] * vector[d]
        out[i] = _tree(partial) + tail


@compiled
def squared_distances_to_rows(queries, rows, chosen, out):
    """``out[q, p] = ||queries[q] - rows[chosen[q, p]]||^2`` in float32 (``chosen`` -1: row 0),
    read in place (module doc)."""
    dim = queries.shape[1]
    body = dim - dim % LANES
    partial = np.empty(LANES, np.float32)
    for q in range(queries.shape[0]):
        query = queries[q]
        for p in range(chosen.shape[1]):
            row = rows[max(chosen[q, p], 0)]
            partial[:] = 0.0
            for d in range(0, body, LANES):
                for lane in range(LANES):
                    difference = query[d + lane] - row[d + lane]
                    partial[lane] += difference * difference
            s = _tree(partial)
            for d in range(body, dim):
                difference = query[d] - row[d]
                s += difference * difference
            out[q, p] = s


@compiled
def _tree(partial):
    """The `LANES` partial sums (overwritten) in one fixed tree: halves added, then halves."""
    width = LANES
    while width > 1:
        width //= 2
        for lane in range(width):
            partial[lane] += partial[lane + width]
    return partial[0]

