import numpy as np
import pytest

from sgh.metrics.histograms import distance_histograms
from sgh.metrics.relevance import label_relevance, neighbour_relevance


def brute_force_relevance(query_labels, database_labels):
    query_labels, database_labels = np.asarray(query_labels), np.asarray(database_labels)
    if query_labels.ndim == 1:
        return query_labels[:, None] == database_labels[None, :]
    return (query_labels.astype(int) @ database_labels.T.astype(int)) > 0


def engine_relevant_counts(relevance):
    """R of each query as the engine counts it: relevant items summed over the distance levels
    of a scan of random codes."""
    rng = np.random.default_rng(0)
    query = rng.integers(0, 256, (relevance.n_queries, 1), dtype=np.uint8)
    database = rng.integers(0, 256, (relevance.n_database, 1), dtype=np.uint8)
    return distance_histograms(query, database, 8, relevance).relevant.sum(axis=1)


def check_every_view(relevance, expected):
    """class_relevance (per item, through its class) and the engine's R agree with a matrix."""
    n_queries = expected.shape[0]
    np.testing.assert_array_equal(
        relevance.class_relevance(slice(1, 3))[:, relevance.database_classes], expected[1:3]
    )
    by_class = relevance.class_relevance(slice(0, n_queries))[:, relevance.database_classes]
    np.testing.assert_array_equal(by_class, expected)
    np.testing.assert_array_equal(engine_relevant_counts(relevance), expected.sum(axis=1))


def test_single_labels_any_comparable_values():
    # Query label "z" appears in no database item: it has no relevant item.
    query_labels = np.array(["cat", "dog", "z", "cat"])
    database_labels = np.array(["dog", "cat", "cat", "bird", "dog", "cat"])
    relevance = label_relevance(query_labels, database_labels)
    assert relevance.kind == "single"
    expected = brute_force_relevance(query_labels, database_labels)
    check_every_view(relevance, expected)
    assert engine_relevant_counts(relevance).tolist() == [3, 2, 0, 3]


def test_multi_label_means_at_least_one_shared_label():
    # Columns a, b, c. Query {a, c} shares a label with {a} and {b, c}; {b} and {} share none.
    relevance = label_relevance(
        [[1, 0, 1], [0, 0, 0]], [[1, 0, 0], [0, 1, 0], [0, 1, 1], [0, 0, 0]]
    )
    assert relevance.kind == "multi"
    expected = np.array([[True, False, True, False], [False, False, False, False]])
    check_every_view(relevance, expected)
    # Classes are the distinct label sets of the database: 4 here.
    assert relevance.n_classes == 4


@pytest.mark.parametrize("n_labels", [3, 64, 70, 200])
def test_multi_label_matches_brute_force_for_any_number_of_labels(n_labels):
    rng = np.random.default_rng(n_labels)
    query_labels = rng.random((7, n_labels)) < 3 / n_labels
    database_labels = (rng.random((30, n_labels)) < 3 / n_labels).astype(np.float32)
    database_labels[::4] = database_labels[0]  # repeated label sets share a class
    relevance = label_relevance(query_labels, database_labels)
    check_every_view(relevance, brute_force_relevance(query_labels, database_labels))
    assert relevance.n_classes < 30


def test_neighbour_relevance_counts_each_distinct_id_once():
    groundtruth = np.array([[4, 2, 2, 9], [0, 1, 3, 3]])
    relevance = neighbour_relevance(groundtruth, k=3, n_queries=2, n_database=10)
    assert relevance.kind == "neighbours"
    # First 3 ids: {4, 2} and {0, 1, 3}.
    assert engine_relevant_counts(relevance).tolist() == [2, 3]
    # Ids sorted per row, repeats flagged, so the engine can walk them in database order.
    np.testing.assert_array_equal(relevance.ids, [[2, 2, 4], [0, 1, 3]])
    np.testing.assert_array_equal(relevance.distinct, [[True, False, True], [True, True, True]])


def test_bad_labels_are_named():
    with pytest.raises(ValueError, match="query_labels is 1-D but database_labels is 2-D"):
        label_relevance([0, 1], [[0, 1]])
    with pytest.raises(ValueError, match="2 label columns but database_labels has 3"):
        label_relevance([[0, 1]], [[0, 1, 1]])
    with pytest.raises(ValueError, match="database_labels is 2-D, .* found the value 2"):
        label_relevance([[0, 1]], [[0, 2]])
    with pytest.raises(ValueError, match="query_labels contains NaN"):
        label_relevance([0.0, np.nan], [1.0])
    with pytest.raises(ValueError, match=r"got shape \(1, 1, 1\)"):
        label_relevance(np.zeros((1, 1, 1)), [0])
    with pytest.raises(ValueError, match="dtype <U1"):
        label_relevance([["a"]], [["b"]])
    with pytest.raises(ValueError, match=r"shape \(2, >= k=5\)"):
        neighbour_relevance(np.zeros((2, 3), int), k=5, n_queries=2, n_database=10)
    with pytest.raises(ValueError, match=r"indices in \[0, 10\), found 0..12"):
        neighbour_relevance([[0, 12]], k=2, n_queries=1, n_database=10)
    with pytest.raises(ValueError, match="k=0 is impossible; accepted: an integer >= 1"):
        neighbour_relevance([[0]], k=0, n_queries=1, n_database=10)


@pytest.mark.parametrize(
    "values",
    [
        np.array([7, 3, 7, 3, 9]),
        np.arange(-128, 128, dtype=np.int8)[::-1],  # offsets wrap in int8: 127 - (-128) = 255
        np.array([2**64 - 1, 2**64 - 3, 2**64 - 1], dtype=np.uint64),
        np.array([-(2**63), -(2**63) + 5, 0], dtype=np.int64),  # wide range: falls back to sort
        np.array([], dtype=np.int32),
        np.array(["dog", "cat", "dog"]),
        np.array([True, False, True]),
    ],
)
def test_distinct_values_equals_numpy_unique(values):
    from sgh.metrics.relevance import distinct_values

    classes, inverse = distinct_values(values)
    expected_classes, expected_inverse = np.unique(values, return_inverse=True)
    np.testing.assert_array_equal(classes, expected_classes)
    assert classes.dtype == expected_classes.dtype
    np.testing.assert_array_equal(inverse, expected_inverse.reshape(-1))
    assert inverse.dtype == np.intp
