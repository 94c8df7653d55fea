"""Sums in a fixed order: each row's result the same to the bit alone, in any batch and on any
number of threads, so that a query's tables and distances, and so its results, do not depend on
the call it came in.

BLAS's matrix products pick their kernels and their blocking by a product's shape, so a row's
sums change with the rows beside it (on OpenBLAS's Haswell kernels, numpy's own on AMD's AVX-512
processors, from 16 rows a call). `product` therefore takes each row as its own matrix-vector
product: one BLAS call whose only inputs are the row and the matrix, so it sums alike whatever
else the call holds, at about 0.45x a matrix product's speed in batches and the same for one
row. The compiled kernels write their order out: dimension d adds into partial sum d % `LANES`,
and the partial sums meet in one fixed tree, so the compiler may vectorise the loop but not
change the order.
"""

from __future__ import annotations

import numpy as np

# numba's np.dot calls scipy's BLAS, a library of its own beside numpy's: loaded with this module,
# so that a thread limit set afterwards (threadpoolctl, as faiss's users set one) reaches it too.
import scipy.linalg.cython_blas  # noqa: F401

from sgh.compiled import compiled

LANES = 32  # partial sums of the compiled kernels: four vector registers of float32


def product(rows: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """``rows @ matrix`` in float32, row by row (module doc)."""
    out = np.empty((len(rows), matrix.shape[1]), np.float32)
    _row_products(np.ascontiguousarray(rows, np.float32), matrix, out)
    return out


@compiled
def _row_products(rows, matrix, out):
    for i in range(rows.shape[0]):
        np.dot(rows[i], matrix, out[i])


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

