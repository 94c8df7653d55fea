"""Streaming encode at scale: `sgh-encode` on an n x 128 uint8 `.bvecs` generated on the fly.

    python scripts/bench_encode.py                      # 1,000,000 vectors (quick)
    python scripts/bench_encode.py --n 10000000 --json bench_encode.json   # the issue's target

Steps: (1) write an n x dim `.bvecs` (SIFT-1B's format) into a temporary directory in chunks,
never holding it in memory; (2) build a 32-bit SGH model (random initial weights, normaliser from
a sample of the data: speed and memory do not depend on training) and export it as a SavedModel;
(3) encode the file in a *separate process* through `sgh.cli.encode.encode_file` (the code behind
`sgh-encode`), so that its peak RSS (VmHWM, see CHILD) is the encoder's alone, not the
generator's; (4) check the codes of random slices (and the first and last rows) against the
in-memory Python model on the same rows: they must be identical.

Target (issue 7): 10,000,000 x 128 encoded with peak RSS < 1.5 GiB.
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
sys.path.insert(0, str(ROOT))

from sgh.model.quiet_tensorflow import import_tensorflow  # noqa: E402

TARGET_RSS_BYTES = 1.5 * 2**30
GENERATE_CHUNK = 1_000_000

# Runs in the child process: encode, then report its own peak RSS and the encode summary.
# The peak is /proc's VmHWM (high-water RSS of this process's address space), not getrusage's
# ru_maxrss: Linux carries ru_maxrss across exec, so a child forked from this (TensorFlow-laden)
# parent would report the parent's RSS at the fork.
CHILD = """
import json, sys
from sgh.cli.encode import EncodeCommandConfig, encode_file
from sgh.model.quiet_tensorflow import import_tensorflow
import_tensorflow()
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
before = status("VmRSS")
summary = encode_file(EncodeCommandConfig(encoder=sys.argv[1], input=sys.argv[2], out=sys.argv[3],
                                          batch_size=int(sys.argv[4])))
summary["rss_after_tensorflow_import_bytes"] = before
summary["peak_rss_bytes"] = status("VmHWM")
print("RESULT " + json.dumps(summary))
"""


def write_rows(path: Path, n: int, dim: int, draw) -> None:
    """A `.bvecs` of n rows (int32 dim, dim uint8), `draw(count)` giving the values of each chunk
    of GENERATE_CHUNK rows, written chunk by chunk: the file is never held in memory."""
    row_type = np.dtype([("dim", "<i4"), ("values", "u1", (dim,))])
    with open(path, "wb") as handle:
        for start in range(0, n, GENERATE_CHUNK):
            count = min(GENERATE_CHUNK, n - start)
            rows = np.empty(count, row_type)
            rows["dim"] = dim
            rows["values"] = draw(count)
            rows.tofile(handle)


def write_bvecs(path: Path, n: int, dim: int, seed: int) -> None:
    """n clustered SIFT-like rows of `dim` bytes (encoding speed does not depend on them)."""
    rng = np.random.default_rng(seed)
    centres = rng.integers(0, 256, (64, dim)).astype(np.int16)

    def draw(count):
        noise = rng.integers(-40, 41, (count, dim), dtype=np.int16)
        return np.clip(centres[rng.integers(0, 64, count)] + noise, 0, 255)

    write_rows(path, n, dim, draw)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="vectors (default 1,000,000)")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--bits", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=65536)
    parser.add_argument("--slices", type=int, default=5, help="random slices checked")
    parser.add_argument("--workdir", default=None, help="where the files go (default: a temp dir)")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()

    import_tensorflow()
    from sgh.config import ModelConfig
    from sgh.data.feature_conversion import as_float32_features
    from sgh.data.vector_files import open_vectors
    from sgh.model.encoding import encode_packed
    from sgh.model.export import export_encoder
    from sgh.model.sgh_model import SGH

    with tempfile.TemporaryDirectory(prefix="bench_encode.", dir=args.workdir) as workdir:
        workdir = Path(workdir)
        data, out = workdir / "base.bvecs", workdir / "codes.npy"
        started = time.perf_counter()
        write_bvecs(data, args.n, args.dim, seed=0)
        generate_seconds = time.perf_counter() - started
        vectors = open_vectors(data)
        sample, _ = as_float32_features(vectors.read(0, min(args.n, 100_000)), data, None)
        model = SGH.from_training_data(ModelConfig(bits=args.bits), sample, seed=0)
        encoder_dir = export_encoder(model, workdir / "encoder")
        print(f"[bench] wrote {data} ({data.stat().st_size / 2**30:.2f} GiB) in "
              f"{generate_seconds:.1f} s; encoding in a subprocess ...", flush=True)

        child = subprocess.run(
            [sys.executable, "-c", CHILD, str(encoder_dir), str(data), str(out),
             str(args.batch_size)], cwd=ROOT, capture_output=True, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        if child.returncode != 0:
            sys.exit(f"[bench] the encoding process failed:\n{child.stderr[-3000:]}")
        summary = json.loads(next(line[len("RESULT "):] for line in child.stdout.splitlines()
                                  if line.startswith("RESULT ")))

        codes = np.load(out, mmap_mode="r", allow_pickle=False)
        assert codes.shape == (args.n, (args.bits + 7) // 8) and codes.dtype == np.uint8
        rng = np.random.default_rng(1)
        width = min(10_000, args.n)
        starts = [0, args.n - width, *rng.integers(0, args.n - width + 1, args.slices)]
        mismatched_rows = 0
        for start in starts:
            features, _ = as_float32_features(vectors.read(start, start + width), data, None)
            expected = encode_packed(model, features)
            mismatched_rows += int(np.any(expected != codes[start:start + width], axis=1).sum())
        del codes

    results = {
        "n": args.n, "dim": args.dim, "bits": args.bits, "batch_size": args.batch_size,
        "file_bytes": args.n * (4 + args.dim),
        "encode_seconds": summary["seconds"],
        "vectors_per_second": summary["vectors_per_second"],
        "peak_rss_bytes": summary["peak_rss_bytes"],
        "rss_after_tensorflow_import_bytes": summary["rss_after_tensorflow_import_bytes"],
        "peak_rss_target_bytes": TARGET_RSS_BYTES,
        "slices_checked": len(starts), "rows_checked": len(starts) * width,
        "mismatched_rows": mismatched_rows,
        "conversion": summary["conversion"],
        "cpu_count": os.cpu_count(),
    }
    print(f"[bench] {args.n:,} x {args.dim} uint8 .bvecs -> {args.bits}-bit codes: "
          f"{summary['seconds']:.1f} s, {summary['vectors_per_second']:,.0f} vectors/s; peak RSS "
          f"{summary['peak_rss_bytes'] / 2**20:,.0f} MiB (after importing TensorFlow "
          f"{summary['rss_after_tensorflow_import_bytes'] / 2**20:,.0f} MiB; target < "
          f"{TARGET_RSS_BYTES / 2**20:,.0f} MiB); {len(starts)} slices of {width} rows "
          f"identical to in-memory encoding: {mismatched_rows == 0}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    if mismatched_rows or summary["peak_rss_bytes"] >= TARGET_RSS_BYTES:
        sys.exit(1)


if __name__ == "__main__":
    main()
