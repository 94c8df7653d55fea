"""A large index end to end: `sgh-index build` and `search` over a vector file too large to
hold as floats, their time and peak memory, the bytes per item, the recall, and save/load.

    python scripts/bench_large_index.py --run RUN --data DIR [--nlist 1024] [--nprobes 8 32]
        [--mode scan|bytes [--encoding E]] [--json bench_large_index.json] [--work WORKDIR]

DIR: the files of `scripts/make_clustered_vectors.py` (`base.fvecs`, `query.fvecs`,
`groundtruth.ivecs`); RUN: an `sgh-train` run on them (e.g. `dataset=file
dataset.path=DIR/base.fvecs dataset.learn_path=DIR/learn.fvecs dataset.query_path=...
dataset.groundtruth_path=...`). For the flat index and one with --nlist inverted lists, each
built and searched in --mode: `scan` (the model's scan) or `bytes` (the byte decoder, its items
coded by --encoding; default: the run's validated choice; local search on ten million items
takes hours):

1. `sgh-index build run=RUN input=DIR/base.fvecs [nlist=N] mode=M out=...` in a child process: the
   base streamed and encoded in batches, with progress; wall time and the child's peak RSS
   (VmHWM, read at its exit).
2. `sgh-index search index=... input=DIR/query.fvecs k=100 out=...` in a child process, the same
   figures (loading the index included).
3. In this process, one thread (faiss's and BLAS'): the saved index loaded, its queries searched
   (queries/s: the median of 3 searches of all of them, the search structures built by a first,
   untimed one; at each --nprobes with lists), Recall10@100 against the exact ground truth
   (share of each query's 10 true neighbours among its first 100 results, ids as returned), and
   the results of the index saved again and loaded equal to the bit.

Bytes per item: on disk, the saved directory over the items; in memory, what the loaded index
holds per item (`SGHIndex.bytes_per_item`: its codes, ids where they are not the rows, list
numbers), and what the model's scan builds (faiss's interleaved copy of the codes, with lists
faiss's ids, and the item terms its refine reads); the byte decoder's scans read the index's own
codes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np
from threadpoolctl import threadpool_limits

from sgh.data.vector_files import open_vectors
from sgh.search.sgh_index import SGHIndex

K, ROUNDS = 100, 3
# Runs sgh-index in this child and prints its own peak RSS at exit.
CHILD = """
import atexit
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            print("PEAK_RSS_BYTES", int(line.split()[1]) * 1024, flush=True)
atexit.register(peak)
from sgh.cli.index import main
main()
"""


def sgh_index(*arguments: str) -> dict:
    """One `sgh-index` command in a child: its wall seconds and peak RSS; progress passes on."""
    started = time.perf_counter()
    finished = subprocess.run([sys.executable, "-c", CHILD, *arguments], stdout=subprocess.PIPE,
                              text=True)
    if finished.returncode:
        sys.exit(f"sgh-index {' '.join(arguments)} failed ({finished.returncode})")
    peak = [int(line.split()[1]) for line in finished.stdout.splitlines()
            if line.startswith("PEAK_RSS_BYTES")]
    return {"seconds": round(time.perf_counter() - started, 1), "peak_rss_mib":
            round(peak[-1] / 2**20, 1)}


def recall(I: np.ndarray, truth: np.ndarray) -> float:
    return float((I[:, :K, None] == truth[:, None, :10]).any(axis=1).mean())


def memory_per_item(index: SGHIndex) -> dict:
    """Bytes per item the loaded index holds, by part (module doc)."""
    n = index.ntotal
    parts = {name: float(size) for name, size in index.bytes_per_item.items()}
    if index.mode != "bytes":  # the byte decoder's scans read the index's own codes
        scan = index._engine(index.scores.chosen)  # the model's scan (engines by score kind)
        engine = scan._index()  # its faiss index
        ivf = faiss.try_extract_index_ivf(engine)
        parts["norms_for_the_refine"] = scan.norms.nbytes / n
        if ivf is None:
            parts["faiss_fast_scan_codes"] = engine.codes.size() / n
        else:  # blocks of 32 codes per list, and an int64 id per item
            lists = faiss.downcast_InvertedLists(ivf.invlists)
            parts["faiss_fast_scan_codes"] = sum(
                -(-lists.list_size(i) // lists.n_per_block) * lists.block_size
                for i in range(ivf.nlist)) / n
            parts["faiss_ids"] = 8.0
    parts["total"] = sum(parts.values())
    return {name: round(value, 2) for name, value in parts.items()}


def measured(run: Path, data: Path, work: Path, nlist: int | None, nprobes: list[int],
             mode: list[str]) -> dict:
    name = "flat" if nlist is None else f"IVF{nlist}"
    out = work / f"{name}.sghindex"
    build = sgh_index("build", f"run={run}", f"input={data / 'base.fvecs'}", f"out={out}",
                      *(() if nlist is None else (f"nlist={nlist}",)), *mode)
    search = sgh_index("search", f"index={out}", f"input={data / 'query.fvecs'}", f"k={K}",
                       f"out={work / f'{name}_results.npz'}",
                       *(() if nlist is None else (f"nprobe={nprobes[0]}",)))
    queries = open_vectors(data / "query.fvecs").read(0, len(open_vectors(data /
                                                                          "query.fvecs")))
    truth = open_vectors(data / "groundtruth.ivecs").read(0, len(queries)).astype(np.int64)
    started = time.perf_counter()
    index = SGHIndex.load(out)
    loaded_seconds = time.perf_counter() - started
    on_disk = sum(path.stat().st_size for path in out.iterdir())
    result = {"layout": name, "mode": index.mode, "encoding": index.encoding,
              "items": index.ntotal, "build": build, "cli_search": search,
              "load_seconds": round(loaded_seconds, 1),
              "bytes_per_item_on_disk": round(on_disk / index.ntotal, 2),
              "bytes_per_item_in_memory": memory_per_item(index), "searches": []}
    for nprobe in nprobes if nlist else [None]:
        if nprobe is not None:
            index.nprobe = nprobe
        D, I = index.search(queries, K)  # builds the search structures; gives the recall
        seconds = []
        for _ in range(ROUNDS):
            begun = time.perf_counter()
            index.search(queries, K)
            seconds.append(time.perf_counter() - begun)
        result["searches"].append({"nprobe": nprobe, "recall10@100": round(recall(I, truth), 4),
                                   "queries_per_second": round(
                                       len(queries) / statistics.median(seconds), 1)})
    with tempfile.TemporaryDirectory(dir=work) as again:
        reloaded = SGHIndex.load(index.save(Path(again) / "index"))
        D2, I2 = reloaded.search(queries, K)
    result["identical_after_save_and_load"] = bool(np.array_equal(D, D2)
                                                   and np.array_equal(I, I2))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a finished sgh-train run")
    parser.add_argument("--data", type=Path, required=True,
                        help="make_clustered_vectors.py's directory")
    parser.add_argument("--nlist", type=int, default=1024)
    parser.add_argument("--nprobes", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--work", type=Path, help="where the indexes go (default: a temporary "
                        "directory beside the data)")
    parser.add_argument("--mode", choices=("scan", "bytes"), default="scan",
                        help="the index's mode (sgh-index build's): the model's scan, or the "
                        "byte decoder's")
    parser.add_argument("--encoding", help="the byte decoder's encoding (sgh-index build's; "
                        "--mode bytes)")
    parser.add_argument("--json", help="write every figure here")
    args = parser.parse_args()
    mode = [f"mode={args.mode}", *([f"encoding={args.encoding}"] if args.encoding else [])]
    faiss.omp_set_num_threads(1)
    results = []
    with tempfile.TemporaryDirectory(dir=args.data) as scratch, threadpool_limits(1):
        work = args.work or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        for nlist in (None, args.nlist):
            results.append(measured(args.run, args.data, work, nlist, args.nprobes, mode))
            print(json.dumps(results[-1], indent=1), flush=True)
    print(f"(machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f})")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()
