"""Sums in a fixed order: a row's result the same to the bit alone, in any batch and on any
BLAS threads, and close to the float64 sum."""

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from sgh.scores.fixed_order import dots, product, squared_distances_to_rows


@pytest.mark.parametrize("terms, width", [(1, 64), (100, 1024), (129, 128), (784, 40),
                                          (300, 260)])
def test_a_rows_product_is_the_same_alone_in_any_batch_and_on_any_threads(terms, width):
    # Batches below and above the 16 rows where BLAS's matrix products change their sums.
    rng = np.random.default_rng(terms)
    rows = rng.standard_normal((150, terms)).astype(np.float32)
    matrix = rng.standard_normal((terms, width)).astype(np.float32)
    with threadpool_limits(1):
        out = product(rows, matrix)
        np.testing.assert_allclose(out, rows.astype(np.float64) @ matrix, rtol=1e-4,
                                   atol=1e-5 * np.sqrt(terms))
        for batch in (slice(7, 8), slice(0, 2), slice(3, 40), slice(149, 150)):
            np.testing.assert_array_equal(product(rows[batch], matrix), out[batch])
        shifted = np.zeros(terms + 1, np.float32)[1:]  # a copy 4 bytes off the row's alignment
        shifted[:] = rows[17]
        np.testing.assert_array_equal(product(shifted[None], matrix), out[17:18])
    with threadpool_limits(2):
        np.testing.assert_array_equal(product(rows, matrix), out)


@pytest.mark.parametrize("terms, rows_in_call", [(64, 1), (64, 9), (130, 150), (7, 4)])
def test_a_product_from_a_start_row_is_the_same_alone_and_in_any_batch(terms, rows_in_call):
    # The byte decoder's tables begin each sum from the tables' squared norms: close to the
    # float64 sum, and the same bits for a row in a block of four and alone.
    rng = np.random.default_rng(terms + rows_in_call)
    rows = rng.standard_normal((rows_in_call, terms)).astype(np.float32)
    matrix = rng.standard_normal((terms, 300)).astype(np.float32)
    start = rng.standard_normal(300).astype(np.float32) * 10
    out = product(rows, matrix, start)
    np.testing.assert_allclose(out, start + rows.astype(np.float64) @ matrix, rtol=1e-4,
                               atol=1e-4 * np.sqrt(terms))
    for r in range(rows_in_call):
        np.testing.assert_array_equal(product(rows[r : r + 1], matrix, start), out[r : r + 1])


@pytest.mark.parametrize("dim", [3, 32, 50, 784])
def test_dots_are_float64_sums_the_same_alone_and_in_any_batch(dim):
    rng = np.random.default_rng(dim)
    rows = rng.standard_normal((40, dim)).astype(np.float32)
    vector = rng.standard_normal(dim)
    out = np.empty(len(rows))
    dots(rows, vector, out)
    np.testing.assert_allclose(out, rows.astype(np.float64) @ vector, rtol=1e-12, atol=1e-12)
    alone = np.empty(1)
    for i in (0, 17, 39):
        dots(rows[i : i + 1], vector, alone)
        assert alone[0] == out[i]


@pytest.mark.parametrize("dim", [5, 8, 50, 64, 784])
def test_a_lists_constant_is_its_squared_distance_the_same_in_any_batch(dim):
    # The probed lists' ||q - c||^2, summed in one written order: close to float64's, and the
    # same bits for a query whichever queries and lists share its call; -1 reads list 0.
    rng = np.random.default_rng(dim)
    queries = rng.standard_normal((30, dim)).astype(np.float32)
    centroids = rng.standard_normal((20, dim)).astype(np.float32)
    probes = rng.integers(-1, 20, (30, 6))
    out = np.empty(probes.shape, np.float32)
    squared_distances_to_rows(queries, centroids, probes, out)
    exact = ((queries[:, None].astype(np.float64)
              - centroids[np.maximum(probes, 0)].astype(np.float64)) ** 2).sum(-1)
    np.testing.assert_allclose(out, exact, rtol=1e-5)
    alone = np.empty((1, 1), np.float32)
    for q, p in [(0, 0), (17, 3), (29, 5)]:
        squared_distances_to_rows(queries[q : q + 1], centroids, probes[q : q + 1, p : p + 1],
                                  alone)
        assert alone[0, 0] == out[q, p]
