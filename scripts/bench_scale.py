"""Scaling benchmark: training steps/s on one device against mirrored replicas on logical CPUs.

    python scripts/bench_scale.py [--rounds 3] [--json PATH] [--map]

1. Speed: each setting trains in a subprocess of its own (device configuration is per process):
   `one_device` (XLA over the whole call, the default path), `mirrored` on 1 device (the
   distributed code path's own overhead), and `mirrored` on 2 logical CPUs, with and without XLA
   for the replicas' forward/backward. MNIST-sized data (60,000 x 784 float32, random values:
   speed does not depend on them), 32 bits, batch 500, `steps_per_call` 100. Each subprocess
   times blocks of 200 steps after a warm-up call; the settings take turns for `--rounds`
   rounds and the median over all their blocks is reported.
2. Encoding (`--encode N`, default 10,000,000; 0 skips): `scripts/bench_encode.py` writes an
   N x 128 uint8 `.bvecs` chunk by chunk and streams it through `sgh-encode`'s code path in its
   own process: vectors/s, peak RSS (target < 1.5 GiB at 10 M), slices equal to in-memory codes.
3. With --map: the default recipe on MNIST through `sgh-train` (20,000 steps) on one device and
   mirrored on 2 logical CPUs at the same global batch, mAP@all side by side (target: within
   0.02). Needs the MNIST files of the data directory (`SGH_DATA_DIR` or the bundled `data/`).

Logical CPUs share the same physical cores, so on a small machine 2 replicas cannot be faster
than one device: the figure shows what the replication costs, and that it works; real speed-ups
need GPUs or machines (docs/guide/devices.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

SETTINGS = {
    "one_device": {"strategy": "one_device", "logical_cpus": 0, "jit_compile": True},
    "mirrored_1": {"strategy": "mirrored", "logical_cpus": 0, "jit_compile": True},
    "mirrored_2_xla": {"strategy": "mirrored", "logical_cpus": 2, "jit_compile": True},
    "mirrored_2_graph": {"strategy": "mirrored", "logical_cpus": 2, "jit_compile": False},
}
BLOCK_STEPS, BLOCKS, STEPS_PER_CALL, BATCH, BITS = 200, 5, 100, 500, 32
PROJECT = Path(__file__).resolve().parent.parent


def time_setting(setting: dict) -> dict:
    """In this (fresh) process: ms per step of each timed block, for one setting."""
    import time

    from sgh.model.quiet_tensorflow import import_tensorflow

    import_tensorflow()
    import tensorflow as tf

    from sgh.config import ModelConfig, TrainerConfig
    from sgh.model.sgh_model import SGH
    from sgh.training.devices import strategy_for
    from sgh.training.loop import Trainer

    x_train = np.random.default_rng(0).normal(size=(60000, 784)).astype(np.float32)
    config = TrainerConfig(batch_size=BATCH, steps_per_call=STEPS_PER_CALL, **setting)
    strategy = strategy_for(config)
    with strategy.scope():
        model = SGH.from_training_data(ModelConfig(bits=BITS), x_train, seed=0)
    trainer = Trainer(model, x_train, config, strategy)

    def block() -> float:
        started = time.perf_counter()
        for _ in range(BLOCK_STEPS // STEPS_PER_CALL):
            trainer._run(tf.constant(STEPS_PER_CALL)).numpy()
        return 1e3 * (time.perf_counter() - started) / BLOCK_STEPS

    block()  # compilation and warm-up
    return {"replicas": trainer.replicas, "device": model.W.device,
            "blocks_ms_per_step": [block() for _ in range(BLOCKS)]}


def speed_table(rounds: int) -> dict:
    blocks = {name: [] for name in SETTINGS}
    replicas = {}
    for _ in range(rounds):
        for name, setting in SETTINGS.items():  # settings take turns: load drifts over time
            out = subprocess.run([sys.executable, __file__, "--time-setting", json.dumps(setting)],
                                 check=True, capture_output=True, text=True).stdout
            result = json.loads(out.strip().splitlines()[-1])
            blocks[name] += result["blocks_ms_per_step"]
            replicas[name] = result["replicas"]
    rows = {}
    for name, times in blocks.items():
        ms = float(np.median(times))
        rows[name] = {**SETTINGS[name], "replicas": replicas[name], "ms_per_step": ms,
                      "steps_per_second": 1e3 / ms, "blocks_ms_per_step": times}
    return rows


def map_comparison() -> dict:
    """The default recipe on MNIST, one device against mirrored on 2 logical CPUs."""
    results = {}
    for name, overrides in {"one_device": ["trainer.strategy=one_device"],
                            "mirrored_2": ["trainer.strategy=mirrored",
                                           "trainer.logical_cpus=2"]}.items():
        with tempfile.TemporaryDirectory() as run_dir:
            subprocess.run([sys.executable, "-m", "sgh.cli.train", *overrides,
                            f"hydra.run.dir={run_dir}"], check=True, cwd=PROJECT,
                           stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
            metrics = json.loads((Path(run_dir) / "metrics.json").read_text())
        results[name] = {key: metrics.get(key) for key in (
            "map", "recall10@100", "replicas", "batch_size", "steps", "ms_per_step",
            "train_seconds")}
    results["map_difference"] = results["mirrored_2"]["map"] - results["one_device"]["map"]
    return results


def encode_benchmark(n: int) -> dict:
    """Streaming encode of n x 128 uint8 vectors: throughput, peak RSS, slices vs in-memory."""
    with tempfile.TemporaryDirectory() as workdir:
        result_path = Path(workdir) / "encode.json"
        subprocess.run([sys.executable, str(PROJECT / "scripts" / "bench_encode.py"),
                        "--n", str(n), "--json", str(result_path)], check=True, cwd=PROJECT)
        return json.loads(result_path.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--map", action="store_true", help="also mAP on MNIST, 1 vs 2 devices")
    parser.add_argument("--encode", type=int, default=10_000_000, metavar="N",
                        help="streaming-encode N x 128 uint8 .bvecs vectors generated on the fly "
                             "(scripts/bench_encode.py; default 10,000,000; 0 skips)")
    parser.add_argument("--time-setting", help=argparse.SUPPRESS)  # the subprocess' entry
    args = parser.parse_args()
    if args.time_setting:
        print(json.dumps(time_setting(json.loads(args.time_setting))))
        return

    load_before = os.getloadavg()[0]
    report = {"speed": speed_table(args.rounds),
              "load_average_1min_before_after": [load_before, os.getloadavg()[0]],
              "speed_convention": (
                  f"MNIST-sized random data (60000 x 784), {BITS} bits, batch {BATCH} (global), "
                  f"steps_per_call {STEPS_PER_CALL}; median over {args.rounds} rounds x {BLOCKS} "
                  f"blocks of {BLOCK_STEPS} steps, each setting in its own process, after "
                  f"warm-up; {os.cpu_count()} CPU cores")}
    print(f"\nTraining speed ({report['speed_convention']}; load average before/after "
          f"{report['load_average_1min_before_after'][0]:.1f}/"
          f"{report['load_average_1min_before_after'][1]:.1f}):")
    print(f"{'setting':<18}{'replicas':>9}{'XLA':>6}{'ms/step':>9}{'steps/s':>9}")
    for name, row in report["speed"].items():
        print(f"{name:<18}{row['replicas']:>9}{'yes' if row['jit_compile'] else 'no':>6}"
              f"{row['ms_per_step']:>9.2f}{row['steps_per_second']:>9.0f}")
    if args.map:
        report["map"] = map_comparison()
        m = report["map"]
        print(f"\nMNIST, default recipe, batch {m['one_device']['batch_size']}: mAP@all one "
              f"device {m['one_device']['map']:.4f}, mirrored on 2 logical CPUs "
              f"{m['mirrored_2']['map']:.4f} (difference {m['map_difference']:+.4f}, target "
              f"within 0.02)")
    if args.encode:
        report["encode"] = encode_benchmark(args.encode)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
