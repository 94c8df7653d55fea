"""`SGHIndex.search` runs on the threads faiss is given (faiss.omp_set_num_threads), in every mode
and layout (flat, or inverted lists), and returns the same results on any number of them."""

import faiss
import numpy as np
import pytest
from sklearn.datasets import load_digits
from threadpoolctl import threadpool_limits

from sgh import ITQ
from sgh.search.sgh_index import SGHIndex


@pytest.fixture(scope="module")
def digits():
    """sklearn's digits, an ITQ of 32 bits, and 300 queries: several blocks of 64 per call."""
    x = load_digits().data.astype(np.float32)
    rng = np.random.default_rng(0)
    queries = x[rng.integers(0, len(x), 300)] + rng.normal(0, 0.5, (300, x.shape[1]))
    return ITQ(n_bits=32, random_state=0).fit(x), x, queries.astype(np.float32)


def _indexes(hasher, x):
    """(label, index, mode) for every mode and layout."""
    with threadpool_limits(1):
        for built, nlist in (("scan", None), ("scan", 8), ("bytes", None), ("bytes", 8)):
            index = SGHIndex(hasher, mode=built, nlist=nlist)
            if built == "bytes" or nlist:
                index.train(x)
            index.add(x)
            if nlist:
                index.nprobe = 3
            modes = ("bytes",) if built == "bytes" else ("scan", "two_stage") + (
                () if nlist else ("hamming",))
            for mode in modes:
                index.mode = mode
                yield f"{mode} nlist={nlist}", index, mode


@pytest.mark.filterwarnings("ignore:two-stage search")
def test_every_mode_gives_the_same_results_on_one_thread_and_on_two(digits):
    hasher, x, queries = digits
    previous = faiss.omp_get_max_threads()
    try:
        for label, index, mode in _indexes(hasher, x):
            index.mode = mode
            results = []
            for threads in (1, 2):
                faiss.omp_set_num_threads(threads)
                results.append(index.search(queries, 25))
            (D1, I1), (D2, I2) = results
            np.testing.assert_array_equal(I1, I2, err_msg=label)
            np.testing.assert_array_equal(D1, D2, err_msg=label)
            assert (I1 >= 0).all(), label
    finally:
        faiss.omp_set_num_threads(previous)


def test_the_lists_distances_do_not_move_with_the_threads_of_blas():
    # faiss's coarse distances (its BLAS) differ in their last bits between thread counts at
    # this size; the byte decoder's lists compute each probed list's distance themselves.
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2000, 784)).astype(np.float32)
    queries = rng.standard_normal((1000, 784)).astype(np.float32)
    with threadpool_limits(1):
        index = SGHIndex(ITQ(n_bits=16, random_state=0).fit(x), mode="bytes", nlist=263)
        index.train(x)
        index.add(x)
    index.nprobe = 2
    previous = faiss.omp_get_max_threads()
    results = []
    try:
        for threads in (1, 2):
            faiss.omp_set_num_threads(threads)
            with threadpool_limits(threads):
                results.append(index.search(queries, 5))
    finally:
        faiss.omp_set_num_threads(previous)
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])
