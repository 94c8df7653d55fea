"""A clustered vector set of any size, in texmex files: base, learn, queries and exact ground truth.

    python scripts/make_clustered_vectors.py OUT_DIR [--n 10000000] [--dim 64] [--clusters 4096]
        [--learn 1000000] [--queries 1000] [--k 100] [--seed 0]

Writes, chunk by chunk (never the whole set in memory), `OUT_DIR/base.fvecs` (n x dim float32),
`learn.fvecs` (--learn rows of the same distribution, not in the base: a training set),
`query.fvecs` (--queries rows, likewise) and `groundtruth.ivecs` (each query's --k nearest base
rows by Euclidean distance, nearest first, ties by row: `sgh.data.neighbours.exact_neighbours`
over the base streamed from disk). The distribution: --clusters centres drawn from a Gaussian of
unit variance per dimension; each point a centre (chosen with a Zipf-like weight, so that
clusters differ in size as real data's do) plus that centre's own anisotropic Gaussian, a random
8-dimensional subspace at scale 0.5 and isotropic noise at 0.1. Progress to stderr. The files
feed `sgh-train dataset=file dataset.path=OUT_DIR/base.fvecs
dataset.learn_path=OUT_DIR/learn.fvecs dataset.query_path=OUT_DIR/query.fvecs
dataset.groundtruth_path=OUT_DIR/groundtruth.ivecs` and `sgh-index build ... input=base.fvecs`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from sgh.data.neighbours import exact_neighbours
from sgh.data.streamed_features import StreamedFeatures
from sgh.data.vector_files import open_vectors

CHUNK = 1 << 18  # rows drawn and written at a time
SUBSPACE = 8  # each cluster's principal directions


class Clusters:
    """The distribution of the module doc, drawn reproducibly from ``seed``."""

    def __init__(self, dim: int, clusters: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.centres = rng.standard_normal((clusters, dim)).astype(np.float32)
        self.directions = (0.5 * rng.standard_normal((clusters, SUBSPACE, dim))
                           / np.sqrt(dim)).astype(np.float32)
        weights = 1.0 / np.arange(1, clusters + 1) ** 0.5
        self.weights = weights / weights.sum()

    def draw(self, rng: np.random.Generator, count: int) -> np.ndarray:
        chosen = rng.choice(len(self.centres), count, p=self.weights)
        latent = rng.standard_normal((count, SUBSPACE)).astype(np.float32)
        spread = np.einsum("ns,nsd->nd", latent, self.directions[chosen]) * np.sqrt(
            self.centres.shape[1])
        noise = 0.1 * rng.standard_normal((count, self.centres.shape[1])).astype(np.float32)
        return (self.centres[chosen] + spread + noise).astype(np.float32)


def write_texmex(path: Path, n: int, dim: int, rows_of, dtype=np.float32) -> None:
    """A texmex file of n rows (int32 dim, dim values of ``dtype``), ``rows_of(start, count)``
    giving each chunk's rows; progress to stderr."""
    row = np.dtype([("dim", "<i4"), ("values", dtype, (dim,))])
    started = time.perf_counter()
    with open(path, "wb") as handle:
        for start in range(0, n, CHUNK):
            count = min(CHUNK, n - start)
            block = np.empty(count, row)
            block["dim"] = dim
            block["values"] = rows_of(start, count)
            block.tofile(handle)
            print(f"\r{path.name}: {start + count:,} / {n:,} rows "
                  f"({time.perf_counter() - started:.0f} s)", end="", file=sys.stderr,
                  flush=True)
    print(file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="directory for the four files")
    parser.add_argument("--n", type=int, default=10_000_000, help="base rows")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--clusters", type=int, default=4096)
    parser.add_argument("--learn", type=int, default=1_000_000, help="training rows")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--k", type=int, default=100, help="neighbours in the ground truth")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    clusters = Clusters(args.dim, args.clusters, args.seed)
    # One stream per file: each file is the same whatever the others' sizes.
    for name, n, stream in (("base", args.n, 1), ("learn", args.learn, 2),
                            ("query", args.queries, 3)):
        rng = np.random.default_rng([args.seed, stream])
        write_texmex(args.out / f"{name}.fvecs", n, args.dim,
                     lambda start, count, rng=rng: clusters.draw(rng, count))
    queries = open_vectors(args.out / "query.fvecs").read(0, args.queries)
    base = StreamedFeatures(open_vectors(args.out / "base.fvecs"))
    started = time.perf_counter()
    print(f"ground truth: {args.queries:,} queries x {args.n:,} rows ...", file=sys.stderr,
          flush=True)
    truth = exact_neighbours(np.asarray(queries, np.float32), base, args.k, "euclidean")
    print(f"ground truth: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    write_texmex(args.out / "groundtruth.ivecs", len(truth), args.k,
                 lambda start, count: truth[start : start + count], np.int32)


if __name__ == "__main__":
    main()
