import re

import numpy as np
import pytest

import sgh.data.neighbours
from sgh.data.neighbours import euclidean_neighbours, exact_neighbours


def neighbours(query, database, k, similarity="euclidean", chunk_rows=None, block_size=None,
               **options):
    """`exact_neighbours` over chunks of `chunk_rows` database rows and product blocks of
    `block_size` queries (the module's sizes, patched for the call)."""
    with pytest.MonkeyPatch.context() as patch:
        if chunk_rows is not None:  # rows = _DATABASE_CHUNK_BYTES // (8 * dim)
            patch.setattr(sgh.data.neighbours, "_DATABASE_CHUNK_BYTES",
                          8 * np.shape(query)[1] * chunk_rows)
        if block_size is not None:
            patch.setattr(sgh.data.neighbours, "_QUERY_BLOCK", block_size)
        return exact_neighbours(query, database, k, similarity, **options)


def brute_force(query, database, k):
    """Full float64 distance matrix, stable sort: ties by database index."""
    diff = query[:, None, :].astype(np.float64) - database[None, :, :].astype(np.float64)
    return np.argsort(np.einsum("qnd,qnd->qn", diff, diff), axis=1, kind="stable")[:, :k]


@pytest.mark.parametrize("block_size", [None, 1, 7])
def test_matches_brute_force_on_random_float32(block_size):
    rng = np.random.default_rng(0)
    database = rng.random((500, 24), dtype=np.float32)
    query = rng.random((30, 24), dtype=np.float32)
    result = neighbours(query, database, 10, block_size=block_size)
    assert result.dtype == np.int64 and result.shape == (30, 10)
    np.testing.assert_array_equal(result, brute_force(query, database, 10))


def test_ties_are_broken_by_database_index():
    rng = np.random.default_rng(1)
    # Small integer features: many exactly equal distances, plus exact duplicate rows and queries
    # that coincide with database rows (distance 0 to several items).
    database = rng.integers(0, 3, (300, 4)).astype(np.float32)
    database[150:200] = database[:50]
    query = np.concatenate([database[:10], rng.integers(0, 3, (10, 4))]).astype(np.float32)
    result = neighbours(query, database, 25, block_size=6)
    np.testing.assert_array_equal(result, brute_force(query, database, 25))
    # Query 0 equals database rows 0 and 150, and any earlier identical rows come first.
    assert {0, 150} <= set(result[0][: np.sum(np.all(database == query[0], axis=1))])


def test_small_pieces_and_many_candidates(monkeypatch):
    # Tiny pieces exercise the loop over candidate rows; identical rows make every item a
    # candidate.
    monkeypatch.setattr(sgh.data.neighbours, "_CANDIDATE_PIECE_BYTES", 64)
    database = np.zeros((40, 3), dtype=np.uint8)
    database[::3] = 1
    query = np.array([[0, 0, 0], [1, 1, 1], [2, 2, 2]], dtype=np.uint8)
    result = neighbours(query, database, 40, block_size=2)
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
    for ids in (euclidean_neighbours(query, database, 12),
                neighbours(query, database, 12, chunk_rows=77)):
        np.testing.assert_array_equal(ids, brute_force(query, database, 12))


def test_k_equal_to_database_size_returns_a_full_ranking():
    database = np.array([[3.0], [1.0], [2.0], [1.0]])
    # Distances from 0: 9, 1, 4, 1 -> order 1, 3 (tie, by index), 2, 0.
    np.testing.assert_array_equal(
        euclidean_neighbours(np.zeros((1, 1)), database, 4), [[1, 3, 2, 0]]
    )


TOO_MANY_NEIGHBOURS = "k=6 is impossible; accepted: an integer between 1 and 5 (the database size)"


def test_bad_arguments_are_named():
    database = np.zeros((5, 3))
    with pytest.raises(ValueError, match=re.escape(TOO_MANY_NEIGHBOURS)):
        euclidean_neighbours(np.zeros((1, 3)), database, 6)
    with pytest.raises(ValueError, match="k=0 is impossible"):
        euclidean_neighbours(np.zeros((1, 3)), database, 0)
    with pytest.raises(ValueError, match="query has dimension 2 but database has dimension 3"):
        euclidean_neighbours(np.zeros((1, 2)), database, 1)
    with pytest.raises(ValueError, match="NaN"):
        euclidean_neighbours(np.full((1, 3), np.nan), database, 1)


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
    ids = neighbours(query, database, 10, "inner_product", chunk_rows)
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
            neighbours(query, database, 40, "inner_product", chunk_rows),
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
            neighbours(query, database, 15, "inner_product", chunk_rows), oracle)


def test_values_near_float32_overflow_use_float64_products():
    rng = np.random.default_rng(7)
    database = (rng.integers(1, 9, (60, 4)) * 1e19).astype(np.float32)  # products ~ 1e40
    query = (rng.integers(1, 9, (5, 4)) * 1e19).astype(np.float32)
    np.testing.assert_array_equal(exact_neighbours(query, database, 6, "inner_product"),
                                  brute_force_inner_product(query, database, 6))
    np.testing.assert_array_equal(exact_neighbours(query, database, 6),
                                  brute_force(query, database, 6))


@pytest.mark.parametrize("offset", [0, 1000])
def test_a_streamed_database_gives_the_in_memory_ids(tmp_path, offset):
    from sgh.data.streamed_features import StreamedFeatures
    from sgh.data.vector_files import open_vectors

    # Many ties across chunks; with the offset, each chunk is centred on its own mean.
    rng = np.random.default_rng(8)
    database = (offset + rng.integers(-3, 4, (700, 8))).astype(np.float32)
    query = (offset + rng.integers(-3, 4, (25, 8))).astype(np.float32)
    np.save(tmp_path / "db.npy", database)
    streamed = StreamedFeatures(open_vectors(tmp_path / "db.npy"))
    for similarity, oracle in (("inner_product", brute_force_inner_product),
                               ("euclidean", brute_force), ("angular", brute_force)):
        want = oracle(query, database, 12)
        for chunk_rows in (None, 64):
            np.testing.assert_array_equal(
                neighbours(query, streamed, 12, similarity, chunk_rows), want)


def test_exact_neighbours_arguments_are_named():
    database = np.zeros((5, 3))
    with pytest.raises(ValueError, match="similarity='auto' is not known; accepted: euclidean, "
                                         "angular, inner_product"):
        exact_neighbours(np.zeros((1, 3)), database, 1, "auto")
    with pytest.raises(ValueError, match=re.escape(TOO_MANY_NEIGHBOURS)):
        exact_neighbours(np.zeros((1, 3)), database, 6, "inner_product")


# --- the centred float32 candidates: exact whatever the offset, dtype, chunking --------------

@pytest.mark.parametrize("offset", [0.0, 1e6])
def test_a_large_common_offset_with_tiny_differences_is_ranked_exactly(offset):
    # float32 values 1e6 + j / 16 (float32 steps by 1/16 there): distances are multiples of
    # 1/256 against |x|^2 ~ 6e12, and many tie exactly.
    rng = np.random.default_rng(9)
    database = (np.float32(offset) + rng.integers(0, 8, (700, 6)) / 16).astype(np.float32)
    database[350:] = database[:350]
    query = (np.float32(offset) + rng.integers(0, 8, (30, 6)) / 16).astype(np.float32)
    for chunk_rows in (None, 64):
        np.testing.assert_array_equal(neighbours(query, database, 20, "euclidean", chunk_rows),
                                      brute_force(query, database, 20))
    # float64 features (float64 products): 1e6 plus noise of 1e-4, and pairs of rows 1e-9
    # apart, far below float32's resolution at 1e6.
    database64 = offset + rng.normal(scale=1e-4, size=(500, 8))
    database64[250:] = database64[:250] + 1e-9
    query64 = offset + rng.normal(scale=1e-4, size=(12, 8))
    np.testing.assert_array_equal(neighbours(query64, database64, 15, "euclidean", 97),
                                  brute_force(query64, database64, 15))


def test_integer_inputs_are_ranked_exactly():
    # uint8 features (SIFT's .bvecs values) given as they are: float32 holds them, so the
    # products are float32 (of centred values rounded once); duplicate rows tie exactly.
    rng = np.random.default_rng(10)
    database = rng.integers(0, 256, (800, 16), dtype=np.uint8)
    database[400:500] = database[:100]
    query = np.concatenate([database[:5], rng.integers(0, 256, (15, 16), dtype=np.uint8)])
    for chunk_rows in (None, 129):
        np.testing.assert_array_equal(neighbours(query, database, 12, "euclidean", chunk_rows),
                                      brute_force(query, database, 12))
        np.testing.assert_array_equal(
            neighbours(query, database, 12, "inner_product", chunk_rows),
            brute_force_inner_product(query, database, 12))
    # Mixed types: uint8 queries against the same values as float32.
    np.testing.assert_array_equal(exact_neighbours(query, database.astype(np.float32), 12),
                                  brute_force(query, database, 12))


def test_inner_product_with_a_large_offset_in_the_database():
    # Only the database is shifted for inner products (<q, x - m> keeps the order over x for
    # each q; shifting q would not): queries of both signs, a common offset of 1000 and
    # float64 features differing by 1e-7.
    rng = np.random.default_rng(11)
    database = 1000 + rng.normal(size=(600, 10))
    database[300:] = database[:300] + 1e-7
    query = rng.normal(size=(20, 10))
    for chunk_rows in (None, 50):
        np.testing.assert_array_equal(
            neighbours(query, database, 10, "inner_product", chunk_rows),
            brute_force_inner_product(query, database, 10))


def test_ties_across_chunks_go_to_the_smaller_index():
    # The same 60 rows three times: every distance ties with two copies in other chunks, and
    # later chunks are pruned by the k-th key of earlier ones, which must keep the first copy.
    rng = np.random.default_rng(12)
    rows = rng.integers(0, 4, (60, 5)).astype(np.float32)
    database = np.concatenate([rows, rows, rows])
    query = rng.integers(0, 4, (10, 5)).astype(np.float32)
    for chunk_rows in (1, 7, 60, 61):
        for similarity, oracle in (("euclidean", brute_force),
                                   ("inner_product", brute_force_inner_product)):
            np.testing.assert_array_equal(
                neighbours(query, database, 70, similarity, chunk_rows),
                oracle(query, database, 70))


def test_lists_that_overflow_are_scanned_again(monkeypatch):
    # 600 identical rows: all are within the margin of the k-th, more than a list of 4k + 64
    # holds, so the query is scanned again with a longer list; ties then go by index.
    capacities = []
    scan = sgh.data.neighbours._scan

    def recorded(*args):
        capacities.append(args[7])  # _scan(..., k, capacity, threads)
        return scan(*args)

    monkeypatch.setattr(sgh.data.neighbours, "_scan", recorded)
    database = np.ones((600, 4), np.float32)
    database[[5, 300]] = 2  # two rows farther from the zero query, nearer to the ones query
    query = np.array([[0, 0, 0, 0], [2, 2, 2, 2]], np.float32)
    ids = exact_neighbours(query, database, 3)
    np.testing.assert_array_equal(ids, [[0, 1, 2], [5, 300, 0]])
    assert capacities[0] == 4 * 3 + 64 and capacities[1] > capacities[0]


def test_results_do_not_depend_on_threads_blocks_or_chunks(monkeypatch):
    rng = np.random.default_rng(13)
    database = rng.integers(0, 5, (3000, 8)).astype(np.float32)  # many ties
    query = rng.integers(0, 5, (150, 8)).astype(np.float32)
    want = brute_force(query, database, 25)
    for workers, block_size, chunk_rows in ((1, None, None), (2, 7, 1000), (3, 64, 333)):
        np.testing.assert_array_equal(
            neighbours(query, database, 25, "euclidean", chunk_rows, block_size,
                       workers=workers), want)
    # Blocks of 64 items (the fewest) and groups of 4 queries: many product blocks per chunk
    # and many groups, each with its own heaps.
    monkeypatch.setattr(sgh.data.neighbours, "_PRODUCT_BLOCK_BYTES", 1)
    monkeypatch.setattr(sgh.data.neighbours, "_STATE_BYTES", 4 * 16 * (25 + 4 * 25 + 64))
    np.testing.assert_array_equal(exact_neighbours(query, database, 25, workers=2), want)


def test_no_queries_give_no_rows():
    ids = exact_neighbours(np.zeros((0, 3), np.float32), np.zeros((5, 3), np.float32), 2)
    assert ids.shape == (0, 2) and ids.dtype == np.int64


def test_values_whose_squares_overflow_float64_are_refused():
    database = np.array([[1e200, 0.0], [-1e200, 0.0]])  # the mean is 0; |x|^2 overflows
    with pytest.raises(ValueError, match="database values are too large: their squared "
                                         "distances overflow float64"):
        exact_neighbours(np.zeros((1, 2)), database, 1)
    database = np.full((4, 2), 1e200)  # centred on 1e200: the query's |q - m|^2 overflows
    with pytest.raises(ValueError, match="query values are too large"):
        exact_neighbours(np.full((1, 2), -1e200), database, 1)
