"""faiss's anchors at 4 bytes per item on the large set `bench_large_index.py` measures SGH on:
`PQ8x4fs` (a flat fast scan) and `IVF{nlist},PQ8x4fs`, one thread.

    python scripts/bench_faiss_large.py --data DIR [--nlist 1024] [--nprobes 8 16 32]
        [--json bench_faiss_large.json]

DIR: the files of `scripts/make_clustered_vectors.py`. Each index is trained on the first
256 x nlist rows of `learn.fvecs`, filled with `base.fvecs` streamed (items/s: the add's
throughput, encoding included), and searched for the queries' 100 nearest; Recall10@100 against
`groundtruth.ivecs` (share of each query's 10 true neighbours among its first 100 results, ids
as returned); queries/s the median of 3 searches of all the queries after an untimed one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import faiss
import numpy as np

from sgh.data.vector_files import open_vectors

K, BATCH = 100, 1 << 18


def measured(key: str, data: Path, nlist: int, nprobes: list[int]) -> list[dict]:
    base, learn = open_vectors(data / "base.fvecs"), open_vectors(data / "learn.fvecs")
    queries = open_vectors(data / "query.fvecs")
    queries = np.asarray(queries.read(0, len(queries)), np.float32)
    truth = open_vectors(data / "groundtruth.ivecs").read(0, len(queries)).astype(np.int64)
    index = faiss.index_factory(base.shape[1], key)
    index.train(np.asarray(learn.read(0, min(len(learn), 256 * nlist)), np.float32))
    started = time.perf_counter()
    for start in range(0, len(base), BATCH):
        index.add(np.asarray(base.read(start, min(start + BATCH, len(base))), np.float32))
    add_seconds = time.perf_counter() - started
    rows = []
    for nprobe in nprobes if key.startswith("IVF") else [None]:
        if nprobe is not None:
            faiss.extract_index_ivf(index).nprobe = nprobe
        index.search(queries, K)
        seconds = []
        for _ in range(3):
            started = time.perf_counter()
            found = index.search(queries, K)[1]
            seconds.append(time.perf_counter() - started)
        recall = (found[:, :, None] == truth[:, None, :10]).any(axis=1).mean()
        rows.append({"index": key, "nprobe": nprobe, "items": len(base),
                     "recall10@100": round(float(recall), 4),
                     "queries_per_second": round(len(queries) / statistics.median(seconds), 1),
                     "add_items_per_second": round(len(base) / add_seconds)})
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--nlist", type=int, default=1024)
    parser.add_argument("--nprobes", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--json", type=Path, default=Path("bench_faiss_large.json"))
    args = parser.parse_args()
    faiss.omp_set_num_threads(1)
    rows = [row for key in ("PQ8x4fs", f"IVF{args.nlist},PQ8x4fs")
            for row in measured(key, args.data, args.nlist, args.nprobes)]
    args.json.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
