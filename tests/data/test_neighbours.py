import numpy as np
import pytest

import sgh.data.neighbours
from sgh.data.neighbours import euclidean_neighbours, exact_neighbours


def brute_force(query, database, k):
    """Full float64 distance matrix, stable sort: ties by database index."""
    diff = query[:, None, :].astype(np.float64) - database[None, :, :].astype(np.float64)
    return np.argsort(np.einsum("qnd,qnd->qn", diff, diff), axis=1, kind="stable")[:, :k]


@pytest.mark.parametrize("block_size", [None, 1, 7])
def test_matches_brute_force_on_random_float32(block_size):
    rng = np.random.default_rng(0)
    database = rng.random((500, 24), dtype=np.float32)
    query = rng.random((30, 24), dtype=np.float32)
    result = euclidean_neighbours(query, database, 10, block_size=block_size)
    assert result.dtype == np.int64 and result.shape == (30, 10)
    np.testing.assert_array_equal(result, brute_force(query, database, 10))


def test_ties_are_broken_by_database_index():
    rng = np.random.default_rng(1)
    # Small integer features: many exactly equal distances, plus exact duplicate rows and queries
    # that coincide with database rows (distance 0 to several items).
    database = rng.integers(0, 3, (300, 4)).astype(np.float32)
    database[150:200] = database[:50]
    query = np.concatenate([database[:10], rng.integers(0, 3, (10, 4))]).astype(np.float32)
    result = euclidean_neighbours(query, database, 25, block_size=6)
    np.testing.assert_array_equal(result, brute_force(query, database, 25))
    # Query 0 equals database rows 0 and 150, and any earlier identical rows come first.
    assert {0, 150} <= set(result[0][: np.sum(np.all(database == query[0], axis=1))])


def test_small_chunks_and_many_candidates(monkeypatch):
    # Tiny chunks exercise the database-chunk and candidate-chunk loops; identical rows make
    # every item a candidate.
    monkeypatch.setattr(sgh.data.neighbours, "_CHUNK_BYTES", 64)
    database = np.zeros((40, 3), dtype=np.uint8)
    database[::3] = 1
    query = np.array([[0, 0, 0], [1, 1, 1], [2, 2, 2]], dtype=np.uint8)
    result = euclidean_neighbours(query, database, 40, block_size=2)
    np.testing.assert_array_equal(result, brute_force(query, database, 40))


def test_exact_despite_cancellation_in_the_expansion():
    # A large common offset makes |q|^2 - 2 q.x + |x|^2 cancel catastrophically (|x|^2 ~ 1e11
    # against distances ~ 2e-5); the direct recomputation must still order items exactly.
    rng = np.random.default_rng(2)
    offset = 1e5
    database = offset + rng.normal(scale=1e-3, size=(400, 10))
    query = offset + rng.normal(scale=1e-3, size=(15, 10))
    np.testing.assert_array_equal(
        euclidean_neighbours(query, database, 10), brute_force(query, database, 10)
    )


@pytest.mark.parametrize("offset", [0.0, 30.0, 3000.0])
def test_float32_inputs_are_ranked_exactly_despite_float32_approximations(offset):
    # float32 features are approximated in float32 (u = 2^-24, a wider margin): with a common
    # offset the expansion cancels badly in float32, yet the ranking must equal float64's.
    rng = np.random.default_rng(3)
    database = (offset + rng.normal(scale=0.05, size=(600, 16))).astype(np.float32)
    database[300:] = database[:300] + np.float32(1e-3)  # near-ties
    query = (offset + rng.normal(scale=0.05, size=(25, 16))).astype(np.float32)
    chunked = sgh.data.neighbours.chunked_euclidean_neighbours
    for ids in (euclidean_neighbours(query, database, 12),
                chunked(query, database, 12, chunk_rows=77)):
        np.testing.assert_array_equal(ids, brute_force(query, database, 12))


def test_k_equal_to_database_size_returns_a_full_ranking():
    database = np.array([[3.0], [1.0], [2.0], [1.0]])
    # Distances from 0: 9, 1, 4, 1 -> order 1, 3 (tie, by index), 2, 0.
    np.testing.assert_array_equal(
        euclidean_neighbours(np.zeros((1, 1)), database, 4), [[1, 3, 2, 0]]
    )


def test_bad_arguments_are_named():
    database = np.zeros((5, 3))
    with pytest.raises(ValueError, match="between 1 and the database size 5, got 6"):
        euclidean_neighbours(np.zeros((1, 3)), database, 6)
    with pytest.raises(ValueError, match="got 0"):
        euclidean_neighbours(np.zeros((1, 3)), database, 0)
    with pytest.raises(ValueError, match="query has dimension 2 but database has dimension 3"):
        euclidean_neighbours(np.zeros((1, 2)), database, 1)
    with pytest.raises(ValueError, match="NaN"):
        euclidean_neighbours(np.full((1, 3), np.nan), database, 1)
    with pytest.raises(ValueError, match="block_size must be a positive integer, got 0"):
        euclidean_neighbours(np.zeros((1, 3)), database, 1, block_size=0)


# --- exact_neighbours: every similarity, in memory and streamed ---------------------------------

def brute_force_inner_product(query, database, k):
    """Full float64 product matrix, stable sort of minus the products: ties by database index."""
    scores = np.einsum("qd,nd->qn", query.astype(np.float64), database.astype(np.float64))
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


@pytest.mark.parametrize("chunk_rows", [None, 1, 37])
def test_inner_product_matches_brute_force_on_random_float32(chunk_rows):
    rng = np.random.default_rng(4)
    database = rng.normal(size=(500, 24)).astype(np.float32)
    query = rng.normal(size=(30, 24)).astype(np.float32)
    ids = exact_neighbours(query, database, 10, "inner_product", chunk_rows)
    assert ids.dtype == np.int64 and ids.shape == (30, 10)
    np.testing.assert_array_equal(ids, brute_force_inner_product(query, database, 10))


def test_inner_product_ties_are_broken_by_database_index():
    # Small integers: many exactly equal products, duplicate rows, and zero rows (product 0).
    rng = np.random.default_rng(5)
    database = rng.integers(-2, 3, (300, 4)).astype(np.float32)
    database[150:200] = database[:50]
    database[250:260] = 0
    query = np.concatenate([database[:5], rng.integers(-2, 3, (10, 4)), np.zeros((1, 4))])
    query = query.astype(np.float32)
    for chunk_rows in (None, 7):
        np.testing.assert_array_equal(
            exact_neighbours(query, database, 40, "inner_product", chunk_rows),
            brute_force_inner_product(query, database, 40))
    # The zero query ties with everything: the first 40 ids.
    np.testing.assert_array_equal(exact_neighbours(query, database, 40, "inner_product")[-1],
                                  np.arange(40))


def test_inner_product_is_exact_where_float32_products_are_not():
    # A large common offset: q.x ~ 16 * 4096^2 = 2^28, where float32 steps by 16, while the
    # items differ by 1: the float32 products alone misorder them (checked), the margin and the
    # float64 ranking (exact here: integers below 2^53) do not.
    rng = np.random.default_rng(6)
    database = (4096 + rng.integers(0, 8, (400, 16))).astype(np.float32)
    database[200:] = database[:200]
    database[200:, 0] += 1  # near ties: one unit more on one coordinate
    query = (4096 + rng.integers(0, 8, (20, 16))).astype(np.float32)
    oracle = brute_force_inner_product(query, database, 15)
    float32_only = np.argsort(-(query @ database.T), axis=1, kind="stable")[:, :15]
    assert not np.array_equal(float32_only, oracle)
    for chunk_rows in (None, 50):
        np.testing.assert_array_equal(
            exact_neighbours(query, database, 15, "inner_product", chunk_rows), oracle)


def test_values_near_float32_overflow_use_float64_products():
    rng = np.random.default_rng(7)
    database = (rng.integers(1, 9, (60, 4)) * 1e19).astype(np.float32)  # products ~ 1e40
    query = (rng.integers(1, 9, (5, 4)) * 1e19).astype(np.float32)
    np.testing.assert_array_equal(exact_neighbours(query, database, 6, "inner_product"),
                                  brute_force_inner_product(query, database, 6))
    np.testing.assert_array_equal(exact_neighbours(query, database, 6),
                                  brute_force(query, database, 6))


def test_a_streamed_database_gives_the_in_memory_ids(tmp_path):
    from sgh.data.streamed_features import StreamedFeatures
    from sgh.data.vector_files import open_vectors

    rng = np.random.default_rng(8)
    database = rng.integers(-3, 4, (700, 8)).astype(np.float32)  # many ties across chunks
    query = rng.integers(-3, 4, (25, 8)).astype(np.float32)
    np.save(tmp_path / "db.npy", database)
    streamed = StreamedFeatures(open_vectors(tmp_path / "db.npy"))
    for similarity, oracle in (("inner_product", brute_force_inner_product),
                               ("euclidean", brute_force), ("angular", brute_force)):
        want = oracle(query, database, 12)
        for chunk_rows in (None, 64):
            np.testing.assert_array_equal(
                exact_neighbours(query, streamed, 12, similarity, chunk_rows), want)


def test_exact_neighbours_arguments_are_named():
    database = np.zeros((5, 3))
    with pytest.raises(ValueError, match="similarity must be one of euclidean, angular, "
                                         "inner_product, got 'auto'"):
        exact_neighbours(np.zeros((1, 3)), database, 1, "auto")
    with pytest.raises(ValueError, match="between 1 and the database size 5, got 6"):
        exact_neighbours(np.zeros((1, 3)), database, 6, "inner_product")
