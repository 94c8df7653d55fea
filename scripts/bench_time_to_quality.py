"""Time to quality: whole `sgh-train` processes of SGH's fast recipe and of ITQ, side by side.

    python scripts/bench_time_to_quality.py [--rounds 3] [--bits 32] [--json PATH]

Each round runs, one after the other, `sgh-train model=itq` and `sgh-train experiment=fast`
(both `dataset=mnist model.bits=B`, each in a new run directory) and times each process from
its start to its exit: imports, data, training or fitting, export, ground truth, evaluation,
TensorBoard, the results table, shutdown. A warm-up round first fills what any second run on a
machine finds: the page cache, the ground-truth cache, numba's and XLA's compiled code. SGH is
also timed once with an empty user cache (`cold`: its training step compiled afresh) and
TensorFlow's compilation cache switched off.

SGH's process imports TensorFlow to train; ITQ's imports none (its TensorBoard views are
written without it, `sgh.artifacts.tensorboard_events`). Each round also times a process that
does nothing but that import (`tensorflow_import`), so that a reader sees how much of SGH's
command it is.

Figures: median wall seconds of each command over the rounds, their ratio
`sgh_over_itq_wall`, the median of each round's own ratio `sgh_over_itq_wall_paired_median`
(target <= 1; the two commands run in alternating order), and each command's Recall10@100
(Euclidean 10-NN, tie-aware) and mAP@all (label relevance, tie-aware) on the test queries of
protocol A.
`experiment=fast` was chosen on the validation split (scripts/select_recipe.py: the fewest
steps whose validation Recall10@100 reaches ITQ's on the same split), never on these queries.
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

COMMANDS = {"itq": ["model=itq"], "sgh_fast": ["experiment=fast"]}
IMPORT_ONLY = [sys.executable, "-c",
               "from sgh.model.quiet_tensorflow import import_tensorflow; import_tensorflow()"]


def timed_run(overrides: list[str], bits: int, env: dict | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="sgh-ttq-") as run_dir:
        command = [sys.executable, "-m", "sgh.cli.train", "dataset=mnist", f"model.bits={bits}",
                   *overrides, f"hydra.run.dir={run_dir}"]
        started = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True,
                                env={**os.environ, **(env or {})})
        seconds = time.perf_counter() - started
        if result.returncode:
            sys.exit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
        metrics = json.loads((Path(run_dir) / "metrics.json").read_text())
    return {"wall_seconds": seconds, "recall10@100": metrics["recall10@100"],
            "map": metrics["map"], "train_seconds": metrics.get("train_seconds"),
            "steps": metrics.get("steps")}


def timed_import() -> float:
    """Wall seconds of a process that only imports TensorFlow, as sgh-train does."""
    started = time.perf_counter()
    subprocess.run(IMPORT_ONLY, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bits", type=int, default=32)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    for overrides in COMMANDS.values():  # warm-up: caches filled, as on a second run
        timed_run(overrides, args.bits)
    runs = {name: [] for name in COMMANDS}
    imports = []
    for round_index in range(args.rounds):
        order = list(COMMANDS) if round_index % 2 == 0 else list(reversed(COMMANDS))
        for name in order:  # which goes first alternates: neither always follows the other
            runs[name].append(timed_run(COMMANDS[name], args.bits))
        imports.append(timed_import())
    with tempfile.TemporaryDirectory(prefix="sgh-cold-cache-") as empty_cache:
        cold = timed_run(COMMANDS["sgh_fast"], args.bits, {"XDG_CACHE_HOME": empty_cache})
    uncached = timed_run(COMMANDS["sgh_fast"], args.bits, {"SGH_COMPILE_CACHE": "off"})

    medians = {name: statistics.median(run["wall_seconds"] for run in done)
               for name, done in runs.items()}
    result = {
        "commands": {name: ["sgh-train", "dataset=mnist", f"model.bits={args.bits}", *overrides]
                     for name, overrides in COMMANDS.items()},
        "median_wall_seconds": medians,
        "sgh_over_itq_wall": medians["sgh_fast"] / medians["itq"],
        # The ratio within each round, side by side in time: on a noisy machine the fairer
        # figure, and the one the documentation quotes first.
        "sgh_over_itq_wall_paired_median": statistics.median(
            sgh["wall_seconds"] / itq["wall_seconds"]
            for sgh, itq in zip(runs["sgh_fast"], runs["itq"], strict=True)),
        # Part of SGH's wall time, none of ITQ's.
        "tensorflow_import_median_wall_seconds": statistics.median(imports),
        "recall10@100": {name: done[0]["recall10@100"] for name, done in runs.items()},
        "map": {name: done[0]["map"] for name, done in runs.items()},
        "sgh_fast_cold_cache_wall_seconds": cold["wall_seconds"],
        "sgh_fast_without_compile_cache_wall_seconds": uncached["wall_seconds"],
        "runs": runs,
        "convention": (f"MNIST protocol A (1,000 test queries, 69,000 database items), "
                       f"{args.bits} bits; wall time of the whole process, start to exit, "
                       f"median of {args.rounds} alternating rounds after a warm-up round; "
                       "Recall10@100: Euclidean 10-NN, tie-aware; mAP@all: label relevance, "
                       "tie-aware"),
    }
    print(f"\nTime to quality ({result['convention']}):")
    print(f"  {'command':<44}{'wall s':>8}{'R10@100':>9}{'mAP':>8}")
    for name in COMMANDS:
        print(f"  {' '.join(result['commands'][name]):<44}{medians[name]:>8.2f}"
              f"{result['recall10@100'][name]:>9.4f}{result['map'][name]:>8.4f}")
    print(f"  sgh_over_itq_wall: {result['sgh_over_itq_wall']:.2f} (ratio of the medians); "
          f"median of the rounds' own ratios: {result['sgh_over_itq_wall_paired_median']:.2f} "
          "(target <= 1)")
    print(f"  a process that only imports TensorFlow (SGH's command does, ITQ's does not): "
          f"{result['tensorflow_import_median_wall_seconds']:.2f} s")
    print(f"  experiment=fast with an empty user cache (step compiled afresh): "
          f"{cold['wall_seconds']:.2f} s; with SGH_COMPILE_CACHE=off: "
          f"{uncached['wall_seconds']:.2f} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
