"""Sums in a fixed order: each row's result the same to the bit alone, in any batch and on any
number of threads, so that a query's tables and distances, and so its results, do not depend on
the call it came in.

BLAS's matrix products pick their kernels and their blocking by a product's shape, so a row's
sums change with the rows beside it (on OpenBLAS's Haswell kernels, numpy's own on AMD's AVX-512
processors, from 16 rows a call). The compiled kernels therefore write their order out:
- `product` adds the matrix's rows into each result row one after another, ``((x_0 m_0 + x_1
  m_1) + x_2 m_2) + ...``, four rows of the matrix per pass over the result row and four result
  rows per read of the matrix: as fast as a matrix product in batches (twice a matrix-vector
  product per row), and since each element's sum is the same sequence of float32 multiplies
  and adds in the block of four and alone, the same bits either way;
- `dots` and `squared_distances_to_rows` add dimension d into partial sum d % `LANES`, and the
  partial sums meet in one fixed tree.

No kernel is compiled with fast-math, so the compiler may vectorise these loops but neither
reorder nor fuse their operations.
"""

from __future__ import annotations

import numpy as np

from sgh.compiled import compiled

LANES = 32  # partial sums of the compiled kernels: four vector registers of float32
_FROM_ZERO = np.zeros(0, np.float32)  # `product`'s start when none is given: no row to allocate


def product(rows: np.ndarray, matrix: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """``start + rows @ matrix`` in float32 (``start``: one row, zeros by default; each sum
    begins from it), each row's result the same alone or in any batch (module doc)."""
    out = np.empty((len(rows), matrix.shape[1]), np.float32)
    _products(np.ascontiguousarray(rows, np.float32), np.ascontiguousarray(matrix, np.float32),
              _FROM_ZERO if start is None else np.asarray(start, np.float32), out)
    return out


@compiled
def _products(rows, matrix, start, out):
    """``out = start + rows @ matrix`` (an empty ``start``: zeros): four result rows at a time,
    then the rest one by one, each element summed over the matrix's rows in order, four terms to
    a pass (module doc)."""
    terms = rows.shape[1]
    body = terms - terms % 4
    blocked = rows.shape[0] - rows.shape[0] % 4
    for r in range(rows.shape[0]):
        if start.shape[0]:
            out[r] = start
        else:
            out[r] = 0.0
    for r in range(0, blocked, 4):
        o0, o1, o2, o3 = out[r], out[r + 1], out[r + 2], out[r + 3]
        x0, x1, x2, x3 = rows[r], rows[r + 1], rows[r + 2], rows[r + 3]
        for t in range(0, body, 4):
            m0, m1, m2, m3 = matrix[t], matrix[t + 1], matrix[t + 2], matrix[t + 3]
            a0, a1, a2, a3 = x0[t], x0[t + 1], x0[t + 2], x0[t + 3]
            b0, b1, b2, b3 = x1[t], x1[t + 1], x1[t + 2], x1[t + 3]
            c0, c1, c2, c3 = x2[t], x2[t + 1], x2[t + 2], x2[t + 3]
            d0, d1, d2, d3 = x3[t], x3[t + 1], x3[t + 2], x3[t + 3]
            for j in range(matrix.shape[1]):
                v0, v1, v2, v3 = m0[j], m1[j], m2[j], m3[j]
                o0[j] = (((o0[j] + a0 * v0) + a1 * v1) + a2 * v2) + a3 * v3
                o1[j] = (((o1[j] + b0 * v0) + b1 * v1) + b2 * v2) + b3 * v3
                o2[j] = (((o2[j] + c0 * v0) + c1 * v1) + c2 * v2) + c3 * v3
                o3[j] = (((o3[j] + d0 * v0) + d1 * v1) + d2 * v2) + d3 * v3
        for t in range(body, terms):
            m = matrix[t]
            a, b, c, d = x0[t], x1[t], x2[t], x3[t]
            for j in range(matrix.shape[1]):
                o0[j] += a * m[j]
                o1[j] += b * m[j]
                o2[j] += c * m[j]
                o3[j] += d * m[j]
    for r in range(blocked, rows.shape[0]):
        o, x = out[r], rows[r]
        for t in range(0, body, 4):
            m0, m1, m2, m3 = matrix[t], matrix[t + 1], matrix[t + 2], matrix[t + 3]
            a0, a1, a2, a3 = x[t], x[t + 1], x[t + 2], x[t + 3]
            for j in range(matrix.shape[1]):
                o[j] = (((o[j] + a0 * m0[j]) + a1 * m1[j]) + a2 * m2[j]) + a3 * m3[j]
        for t in range(body, terms):
            m = matrix[t]
            a = x[t]
            for j in range(matrix.shape[1]):
                o[j] += a * m[j]


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

