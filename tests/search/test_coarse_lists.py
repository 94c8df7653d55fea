"""The coarse quantizer: each vector's nearest lists, exactly, the same alone and in any batch on
any threads."""

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from sgh.search.coarse_lists import BLOCK_PRODUCTS, CoarseQuantizer


def exact_nearest(x, centroids, count):
    """The float64 distances' order, ties to the smaller list."""
    distances = ((x.astype(np.float64)[:, None, :] - centroids[None]) ** 2).sum(axis=2)
    return np.argsort(distances, axis=1, kind="stable")[:, :count]


# Several blocks of rows each; at 50 and 128 dimensions no two lists among these rows are tied
# within float32's rounding, so the order is float64's to the list.
@pytest.mark.parametrize("dim, nlist, rows", [(50, 100, 2 * (BLOCK_PRODUCTS // 100) + 5),
                                              (128, 5000, 2 * (BLOCK_PRODUCTS // 5000) + 5)])
def test_the_nearest_lists_are_the_exact_nearest_centroids(dim, nlist, rows):
    rng = np.random.default_rng(dim)
    centroids = (rng.standard_normal((nlist, dim)) + 3.0).astype(np.float32)
    x = rng.standard_normal((rows, dim)).astype(np.float32)
    quantizer = CoarseQuantizer(centroids)
    np.testing.assert_array_equal(quantizer.nearest(x, 7), exact_nearest(x, centroids, 7))
    np.testing.assert_array_equal(quantizer.nearest(x, 1)[:, 0],
                                  exact_nearest(x, centroids, 1)[:, 0])
    assert quantizer.nearest(x[:3], nlist + 10).shape == (3, nlist)  # at most every list


def test_long_vectors_nearest_lists_differ_from_float64s_only_within_float32_rounding():
    # 784 dimensions (MNIST's) far from the origin: float32 sums, as faiss's flat search sums
    # them, swap a few lists whose float64 distances are tied within their rounding.
    rng = np.random.default_rng(784)
    centroids = (rng.standard_normal((300, 784)) + 3.0).astype(np.float32)
    x = rng.standard_normal((2 * (BLOCK_PRODUCTS // 300) + 5, 784)).astype(np.float32)
    lists = CoarseQuantizer(centroids).nearest(x, 7)
    exact = exact_nearest(x, centroids, 7)
    distances = ((x.astype(np.float64)[:, None, :] - centroids[None]) ** 2).sum(axis=2)
    chosen = np.take_along_axis(distances, lists, axis=1)
    np.testing.assert_allclose(chosen, np.take_along_axis(distances, exact, axis=1), rtol=1e-5)
    assert np.mean(lists == exact) > 0.99


@pytest.mark.parametrize("dim", [128, 784])
def test_a_vectors_lists_are_the_same_alone_in_any_batch_and_on_any_threads(dim):
    # Equal distances up to float32 rounding: the ranking's last bits decide between them.
    rng = np.random.default_rng(1)
    centroids = rng.standard_normal((300, dim)).astype(np.float32)
    x = np.repeat(rng.standard_normal((1, dim)), 200, axis=0).astype(np.float32)
    x += rng.standard_normal(x.shape).astype(np.float32) * 1e-3
    quantizer = CoarseQuantizer(centroids)
    with threadpool_limits(1):
        lists = quantizer.nearest(x, 20)
        for batch in (slice(5, 6), slice(0, 2), slice(10, 73), slice(199, 200)):
            np.testing.assert_array_equal(quantizer.nearest(x[batch], 20), lists[batch])
    with threadpool_limits(2):
        np.testing.assert_array_equal(quantizer.nearest(x, 20, workers=2), lists)


def test_equal_distances_go_to_the_smaller_list():
    centroids = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]], np.float32)
    quantizer = CoarseQuantizer(centroids)
    np.testing.assert_array_equal(quantizer.nearest(np.zeros((2, 2), np.float32), 4),
                                  [[0, 1, 2, 3]] * 2)


@pytest.mark.parametrize("dim", [8, 200])
def test_a_vector_whose_distances_overflow_is_named(dim):
    centroids = np.ones((10, dim), np.float32)
    x = np.zeros((4, dim), np.float32)
    x[2] = 3e38
    with pytest.raises(ValueError, match="row 2 of the features: its distances to the lists' "
                                         "centroids overflow float32"):
        CoarseQuantizer(centroids).nearest(x, 3)
