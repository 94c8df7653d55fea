"""Out-of-core training at scale: `sgh-train` on an N x 128 uint8 `.bvecs` streamed from disk.

    python scripts/bench_stream.py                                  # 10,000,000 vectors
    python scripts/bench_stream.py --n 1000000 --json bench_stream.json

Steps: (1) write `toy_base.bvecs` (N x 128, SIFT-1B's format; a 16-dim latent mapped to 128
uint8 values plus noise, see `write_structured_bvecs`) and `toy_query.bvecs` (1,000 queries)
chunk by chunk; (2) run the full `sgh-train` job on them in a subprocess with
`dataset.streaming=always`: the statistics pass, validation carve, `--steps` training steps from
the tf.data pipeline, encoding the database, exact ground truth over database chunks,
evaluation; its peak RSS (the child's own VmHWM, read at its exit) is the figure, against the
float32 copy of the data it never makes; (3) the speed side by side on a `--compare-n` dataset
of the same kind (default 1,000,000 vectors, which fit in memory): median ms per training step
of the in-memory path (batches gathered on the device) and of the streamed path with each row
reader (`dataset.stream_reader`: mmap, the default, and pread), each run in its own process,
alternating for `--rounds` rounds; `compare.streamed_over_in_memory` (mmap) and
`compare.streamed_over_in_memory_pread` are the streamed medians over the in-memory one. The
time of one call's gather (`steps_per_call` x `batch_size` rows as float32) by each reader is
measured in this process too (`compare.gather_ms_per_call`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from bench_encode import write_rows  # noqa: E402

from sgh.config import TrainerConfig  # noqa: E402
from sgh.data.streamed_features import STREAM_READERS, StreamedFeatures  # noqa: E402
from sgh.data.vector_files import open_vectors  # noqa: E402

# Runs sgh-train in this child and prints its own peak RSS at exit (VmHWM: see bench_encode).
CHILD = """
import atexit, sys
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            print("PEAK_RSS_BYTES", int(line.split()[1]) * 1024, flush=True)
atexit.register(peak)
sys.argv = ["sgh-train", *sys.argv[1:]]
from sgh.cli.train import main
main()
"""
QUERIES, DIM = 1000, 128
# The compared paths: dataset.streaming and the extra overrides of each.
COMPARED = {"in_memory": ("never", []),
            "streamed": ("always", ["dataset.stream_reader=mmap"]),
            "streamed_pread": ("always", ["dataset.stream_reader=pread"])}
# sgh-train's defaults, which the comparison runs keep: one compiled call's batch rows.
BATCH_SIZE, STEPS_PER_CALL = TrainerConfig.batch_size, TrainerConfig.steps_per_call


def train(base: Path, run_dir: Path, streaming: str, steps: int, extra: list[str]) -> dict:
    """One sgh-train job; its metrics, peak RSS and wall time."""
    args = [f"dataset.path={base}", "dataset=file", f"dataset.streaming={streaming}",
            f"trainer.steps={steps}", "model.bits=32", f"hydra.run.dir={run_dir}", *extra]
    started = time.perf_counter()
    child = subprocess.run([sys.executable, "-c", CHILD, *args], cwd=ROOT, capture_output=True,
                           text=True, env={**os.environ, "PYTHONPATH": str(ROOT),
                                           "PYTHONUNBUFFERED": "1"})
    wall = time.perf_counter() - started
    if child.returncode != 0:
        sys.exit(f"[bench] sgh-train failed ({' '.join(args)}):\n{child.stderr[-3000:]}")
    peak = next(int(line.split()[1]) for line in child.stdout.splitlines()
                if line.startswith("PEAK_RSS_BYTES"))
    metrics = json.loads((run_dir / "metrics.json").read_text())
    streamed_line = next((line for line in child.stdout.splitlines()
                          if line.startswith("[sgh] streaming")), None)
    return {"metrics": metrics, "peak_rss_bytes": peak, "wall_seconds": wall,
            "streaming_line": streamed_line}


LATENT_DIM = 16


def write_structured_bvecs(path: Path, n: int, seed: int) -> None:
    """n SIFT-like uint8 rows with neighbourhood structure, written chunk by chunk: a 16-dim
    Gaussian latent mapped linearly to 128 dims (the same map for every file), plus noise,
    rounded and clipped to 0..255. Euclidean neighbours then follow the latent, as in real
    descriptors, so Recall10@100 is a meaningful figure (clusters of pure noise would make every
    neighbour a coin toss)."""
    mixing = np.random.default_rng(12345).normal(0.0, 12.0, (LATENT_DIM, DIM))
    rng = np.random.default_rng(seed)

    def draw(count):
        values = 128.0 + rng.normal(size=(count, LATENT_DIM)) @ mixing
        values += rng.normal(0.0, 8.0, values.shape)
        return np.clip(np.rint(values), 0, 255)

    write_rows(path, n, DIM, draw)


def gather_ms_per_call(base: Path, repeats: int = 15) -> dict[str, float]:
    """Median ms of one compiled call's `StreamedFeatures.take` (STEPS_PER_CALL x BATCH_SIZE
    uniform rows as float32) by each reader, the file in the page cache (just written)."""
    rng = np.random.default_rng(0)
    medians = {}
    for reader in STREAM_READERS:
        rows = StreamedFeatures(open_vectors(base), reader=reader)
        rows.take(np.arange(2))  # the mapping and the compiled read loop, made once
        times = []
        for _ in range(repeats):
            ids = rng.integers(0, len(rows), STEPS_PER_CALL * BATCH_SIZE)
            started = time.perf_counter()
            rows.take(ids)
            times.append((time.perf_counter() - started) * 1e3)
        medians[reader] = float(np.median(times))
    return medians


def write_dataset(folder: Path, n: int) -> Path:
    write_structured_bvecs(folder / "toy_base.bvecs", n, seed=0)
    write_structured_bvecs(folder / "toy_query.bvecs", QUERIES, seed=1)
    return folder / "toy_base.bvecs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000, help="database vectors")
    parser.add_argument("--steps", type=int, default=5000, help="training steps at --n")
    parser.add_argument("--compare-n", type=int, default=1_000_000,
                        help="vectors of the in-memory vs streamed speed comparison (0 skips)")
    parser.add_argument("--compare-steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workdir", default=None, help="where the files go (default: a temp dir)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    # The 1-minute load average before and after: on shared cores, other work's load changes
    # every figure, the streamed/in-memory ratio most (the reads compete with training).
    report: dict = {"cpu_count": os.cpu_count(), "dim": DIM, "queries": QUERIES,
                    "load_average_1min": {"start": os.getloadavg()[0]}}
    with tempfile.TemporaryDirectory(prefix="bench_stream.", dir=args.workdir) as workdir:
        workdir = Path(workdir)
        if args.compare_n:
            small = workdir / "small"
            small.mkdir()
            base = write_dataset(small, args.compare_n)
            gathers = gather_ms_per_call(base)
            times: dict[str, list[float]] = {name: [] for name in COMPARED}
            peaks: dict[str, int] = {}
            for round_ in range(args.rounds):
                # Side by side, as load drifts over time; each round starts one path later, so
                # no path always runs first.
                names = list(COMPARED)
                names = names[round_ % len(names):] + names[:round_ % len(names)]
                for name in names:
                    streaming, extra = COMPARED[name]
                    result = train(base, workdir / f"compare-{name}-{round_}", streaming,
                                   args.compare_steps, ["validation.every=0", *extra])
                    times[name].append(result["metrics"]["ms_per_step"])
                    peaks[name] = max(peaks.get(name, 0), result["peak_rss_bytes"])
            medians = {key: float(np.median(value)) for key, value in times.items()}
            report["compare"] = {
                "n": args.compare_n, "steps": args.compare_steps, "rounds": args.rounds,
                "in_memory_ms_per_step": medians["in_memory"],
                "streamed_ms_per_step": medians["streamed"],
                "streamed_pread_ms_per_step": medians["streamed_pread"],
                "streamed_over_in_memory": medians["streamed"] / medians["in_memory"],
                "streamed_over_in_memory_pread": medians["streamed_pread"] / medians["in_memory"],
                "gather_ms_per_call": gathers,
                "runs_ms_per_step": times,
                "in_memory_peak_rss_bytes": peaks["in_memory"],
                "streamed_peak_rss_bytes": peaks["streamed"],
                "streamed_pread_peak_rss_bytes": peaks["streamed_pread"],
                "convention": ("median over runs of metrics.json ms_per_step (median over "
                               "compiled calls of wall time / steps, first call excluded); "
                               f"32 bits, batch {BATCH_SIZE}, steps_per_call {STEPS_PER_CALL}, "
                               "no validation; streamed = dataset.stream_reader=mmap (the "
                               "default), streamed_pread = pread; peak RSS = VmHWM, which "
                               "counts the file pages an mmap gather touched; gathers: median "
                               f"of 15 takes of {STEPS_PER_CALL * BATCH_SIZE} uniform rows"),
            }
            c = report["compare"]
            mib = 2**20
            print(f"[bench] {args.compare_n:,} x {DIM}: in memory {c['in_memory_ms_per_step']:.2f}"
                  f" ms/step (peak RSS {c['in_memory_peak_rss_bytes'] / mib:,.0f} MiB); streamed "
                  f"mmap {c['streamed_ms_per_step']:.2f} ms/step, "
                  f"{c['streamed_over_in_memory']:.2f}x (peak RSS "
                  f"{c['streamed_peak_rss_bytes'] / mib:,.0f} MiB, gather "
                  f"{gathers['mmap']:.1f} ms/call); streamed pread "
                  f"{c['streamed_pread_ms_per_step']:.2f} ms/step, "
                  f"{c['streamed_over_in_memory_pread']:.2f}x (peak RSS "
                  f"{c['streamed_pread_peak_rss_bytes'] / mib:,.0f} MiB, gather "
                  f"{gathers['pread']:.1f} ms/call)", flush=True)
        if args.n:
            big = workdir / "big"
            big.mkdir()
            started = time.perf_counter()
            base = write_dataset(big, args.n)
            print(f"[bench] wrote {base} ({base.stat().st_size / 2**30:.2f} GiB) in "
                  f"{time.perf_counter() - started:.0f} s; training streamed ...", flush=True)
            result = train(base, workdir / "big-run", "always", args.steps, [])
            metrics = result["metrics"]
            report["streamed"] = {
                "n": args.n, "steps": args.steps, "file_bytes": base.stat().st_size,
                "float32_bytes": args.n * DIM * 4,
                "peak_rss_bytes": result["peak_rss_bytes"],
                "wall_seconds": result["wall_seconds"],
                "train_seconds": metrics["train_seconds"], "ms_per_step": metrics["ms_per_step"],
                "recall10@100": metrics.get("recall10@100"),
                "groundtruth": metrics["groundtruth"], "n_train": metrics["n_train"],
                "streaming_line": result["streaming_line"],
                "convention": ("whole sgh-train job in one process (statistics pass, "
                               "validation every 1000 steps, training, database encoding, exact "
                               "ground truth over database chunks, evaluation); peak RSS = the "
                               "process's VmHWM at exit; Recall10@100 tie-aware vs exact "
                               "Euclidean 10-NN, 1000 queries"),
            }
            s = report["streamed"]
            print(f"[bench] {args.n:,} x {DIM} uint8 streamed: sgh-train end to end "
                  f"{s['wall_seconds']:.0f} s ({args.steps} steps, {s['ms_per_step']:.2f} ms/step),"
                  f" peak RSS {s['peak_rss_bytes'] / 2**20:,.0f} MiB (the float32 copy would be "
                  f"{s['float32_bytes'] / 2**30:.1f} GiB); Recall10@100 {s['recall10@100']:.4f}",
                  flush=True)
    report["load_average_1min"]["end"] = os.getloadavg()[0]
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
