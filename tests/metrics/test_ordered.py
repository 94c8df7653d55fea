"""Metrics of explicit rankings agree with the Hamming engine's ties-by-index numbers."""

from dataclasses import dataclass

import numpy as np
import pytest

from sgh.codes import pack_bits
from sgh.config import EvalConfig
from sgh.metrics.ordered import ordered_metrics
from sgh.metrics.scoring import score
from tests.helpers import hamming_distances, order_of_distances


def hamming_order(query_codes, database_codes, depth):
    """The first `depth` ids of each query's Hamming ranking, ties by id."""
    return order_of_distances(hamming_distances(query_codes, database_codes), depth)


@dataclass
class HammingByIndex:
    """The Hamming ranking with ties by index, as an explicit ranking (in two blocks)."""

    query_codes: np.ndarray
    database_codes: np.ndarray
    description: str = "hamming, ties by index"

    def order_blocks(self, depth):
        half = len(self.query_codes) // 2
        for q0, q1 in ((0, half), (half, len(self.query_codes))):
            yield q0, q1, hamming_order(self.query_codes[q0:q1], self.database_codes, depth)


@pytest.mark.parametrize("multi_label", [False, True])
@pytest.mark.parametrize("denominator", ["retrieved", "min_rk", "r"])
def test_every_metric_equals_the_engine_with_ties_by_index(multi_label, denominator):
    rng = np.random.default_rng(1)
    bits, n, nq = 12, 700, 40
    database = pack_bits(rng.integers(0, 2, (n, bits)))
    queries = pack_bits(rng.integers(0, 2, (nq, bits)))
    if multi_label:
        database_labels, query_labels = rng.random((n, 4)) < 0.3, rng.random((nq, 4)) < 0.3
    else:
        database_labels, query_labels = rng.integers(0, 5, n), rng.integers(0, 5, nq)
    groundtruth = rng.permuted(np.tile(np.arange(n), (nq, 1)), axis=1)[:, :10]
    config = EvalConfig(map_k=[10, 100, 2000], recall_n=[1, 10, 100, 1000],
                        map_k_denominator=denominator)
    engine = score(database, queries, bits, config, database_labels, query_labels, groundtruth)
    ordered = score(database, queries, bits, config, database_labels, query_labels, groundtruth,
                    ranking=HammingByIndex(queries, database))
    compared = [key for key in ordered if f"{key}_stable" in engine]
    assert len(compared) == 14
    for key in compared:
        assert ordered[key] == pytest.approx(engine[f"{key}_stable"], abs=1e-12), key
    assert ordered["ranking"] == "hamming, ties by index"
    assert not any(key.startswith("lookup_") or key.endswith("_stable") for key in ordered)


def test_recall_alone_reads_only_the_top_of_each_ranking():
    rng = np.random.default_rng(2)
    database = pack_bits(rng.integers(0, 2, (300, 8)))
    queries = pack_bits(rng.integers(0, 2, (9, 8)))
    depths = []

    class Recorded(HammingByIndex):
        def order_blocks(self, depth):
            depths.append(depth)
            return super().order_blocks(depth)

    groundtruth = np.tile(np.arange(10), (9, 1))
    groundtruth[:, 3] = groundtruth[:, 2]  # a repeated id counts once (denominator K stays 10)
    result = ordered_metrics(Recorded(queries, database), 9, 300, groundtruth=groundtruth,
                             recall_k=10, recall_n=[5, 50])
    assert depths == [50]
    orders = hamming_order(queries, database, 50)
    distinct = [set(row[:10]) for row in groundtruth]
    expected = np.mean([len(distinct[q] & set(orders[q, :50])) / 10 for q in range(9)])
    assert result["recall10@50"] == pytest.approx(expected)
    with pytest.raises(ValueError, match="the database is empty"):
        ordered_metrics(Recorded(queries, database[:0]), 9, 0, groundtruth=groundtruth,
                        recall_n=[5])
