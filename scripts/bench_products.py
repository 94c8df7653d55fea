"""The fixed-order products against BLAS and faiss: the byte decoder's query tables and the
inverted lists' coarse step, on random data of the datasets' shapes.

    python scripts/bench_products.py [--json bench_products.json] [--rounds 21]

- **Query tables** (`ByteDecoder.lookup_tables`' two products: the features onto 2 × 32
  directions, then onto 4 × 256 table entries): `sgh.scores.fixed_order.product`, against
  each row as its own BLAS matrix-vector product (numba's ``np.dot``, the same bits alone or in
  a batch, as our product gives them) and against BLAS's matrix product (faster in batches on
  some machines, but a row's sums there depend on the rows beside it).
- **Coarse step** (`CoarseQuantizer.nearest`: each query's nearest lists), against faiss's
  `IndexFlatL2` search for as many; the share of lists both give is printed beside.

One thread (numpy's and scipy's BLAS, faiss's OpenMP); each figure the median of --rounds
calls, the contenders taking turns; milliseconds per call.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

import faiss
import numba
import numpy as np

# numba's np.dot (the row-by-row reference) calls scipy's BLAS: loaded now, so that the thread
# limit below reaches it.
import scipy.linalg.cython_blas  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ann import median_seconds, threads  # noqa: E402

from sgh.scores.fixed_order import product  # noqa: E402
from sgh.search.coarse_lists import CoarseQuantizer  # noqa: E402

DIRECTIONS, TABLE_ENTRIES = 64, 4 * 256  # the byte decoder's shapes at 32 bits
FEATURES = {"MNIST": 784, "CIFAR-10 GIST": 512, "SIFT10K": 128, "glove-50": 50}
TABLE_CALLS = (1, 16, 100, 1000)
# (dataset, queries a call, lists, nearest lists): bench_ann's list counts.
COARSE_CASES = [("MNIST", 1000, 263, 8), ("MNIST", 1000, 1051, 8), ("MNIST", 100, 263, 4),
                ("MNIST", 1, 263, 4), ("CIFAR-10 GIST", 1000, 972, 16),
                ("CIFAR-10 GIST", 1, 972, 8), ("SIFT10K", 100, 400, 8), ("SIFT10K", 100, 100, 4),
                ("SIFT10K", 1, 100, 4), ("glove-50", 1000, 2498, 8), ("glove-50", 1000, 624, 8),
                ("glove-50", 16, 2498, 8), ("glove-50", 1, 2498, 8)]


@numba.njit(nogil=True)
def _row_products(rows, matrix, out):
    for i in range(rows.shape[0]):
        np.dot(rows[i], matrix, out[i])


def row_by_row(rows: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    out = np.empty((len(rows), matrix.shape[1]), np.float32)
    _row_products(rows, matrix, out)
    return out


def chained(multiply, x: np.ndarray, basis: np.ndarray, tables: np.ndarray) -> np.ndarray:
    """The query tables' two products, by ``multiply``."""
    return multiply(multiply(x, basis), tables)


def query_tables(rng, rounds: int) -> list[dict]:
    rows = []
    for name, dim in FEATURES.items():
        basis = rng.standard_normal((dim, DIRECTIONS)).astype(np.float32)
        tables = rng.standard_normal((DIRECTIONS, TABLE_ENTRIES)).astype(np.float32)
        for calls in TABLE_CALLS:
            x = rng.standard_normal((calls, dim)).astype(np.float32)
            ours, rowwise, blas = (ms * 1e3 for ms in median_seconds(
                [partial(chained, multiply, x, basis, tables)
                 for multiply in (product, row_by_row, np.matmul)], rounds))
            rows.append({"shape": name, "features": dim, "queries": calls, "ours_ms": ours,
                         "row_by_row_ms": rowwise, "blas_matrix_product_ms": blas})
            print(f"tables  {name:14} {calls:5} queries: ours {ours:8.4f} ms, row by row "
                  f"{rowwise:8.4f} ({rowwise / ours:.2f}x ours), BLAS matrix product "
                  f"{blas:8.4f} ({blas / ours:.2f}x ours)", flush=True)
    return rows


def coarse_step(rng, rounds: int) -> list[dict]:
    rows = []
    for name, calls, nlist, nearest in COARSE_CASES:
        dim = FEATURES[name]
        centroids = rng.standard_normal((nlist, dim)).astype(np.float32)
        x = rng.standard_normal((calls, dim)).astype(np.float32)
        ours = CoarseQuantizer(centroids)
        flat = faiss.IndexFlatL2(dim)
        flat.add(centroids)
        same = float(np.mean(ours.nearest(x, nearest) == flat.search(x, nearest)[1]))
        mine, theirs = (ms * 1e3 for ms in median_seconds(
            [partial(ours.nearest, x, nearest), partial(flat.search, x, nearest)], rounds))
        rows.append({"shape": name, "features": dim, "queries": calls, "nlist": nlist,
                     "nearest": nearest, "ours_ms": mine, "faiss_flat_ms": theirs,
                     "same_lists": same})
        print(f"coarse  {name:14} {calls:5} queries, {nlist:5} lists, {nearest:2} nearest: ours "
              f"{mine:8.4f} ms, faiss IndexFlatL2 {theirs:8.4f} ({theirs / mine:.2f}x ours); "
              f"the same lists {same:.4f}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--rounds", type=int, default=21, help="calls per figure (median)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with threads(1):
        figures = {"convention": "ms per call, one thread, median of the rounds, contenders "
                                 "taking turns; random data of the datasets' shapes",
                   "rounds": args.rounds, "query_tables": query_tables(rng, args.rounds),
                   "coarse_step": coarse_step(rng, args.rounds)}
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
        print(f"json: {args.json}")


if __name__ == "__main__":
    main()
