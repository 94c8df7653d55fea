"""Monitoring overhead: training time with validation and TensorBoard views vs without.

    python scripts/bench_monitor.py [--repeats 3] [--steps 20000] [--json PATH] [overrides...]

Runs `sgh-train` (default recipe, bundled MNIST unless overridden) as separate processes,
alternating "monitored" (the defaults: a validation point every `validation.every` steps with
fresh encoding, validation mAP, code health, histograms, images) and "bare"
(`validation.every=0`: loss scalars only). Each run reports `train_seconds` in its metrics.json
(wall time of the training loop, validation included, compilation included in both); the
overhead is median(monitored) / median(bare) - 1. Target: <= 10 %.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

VARIANTS = {"monitored": [], "bare": ["validation.every=0"]}


def train_seconds(overrides: list[str]) -> tuple[float, float]:
    """(train_seconds, validation_seconds) of one sgh-train process."""
    with tempfile.TemporaryDirectory() as run_dir:
        subprocess.run([sys.executable, "-m", "sgh.cli.train", *overrides,
                        f"hydra.run.dir={run_dir}"], check=True, capture_output=True)
        metrics = json.loads((Path(run_dir) / "metrics.json").read_text())
    return metrics["train_seconds"], metrics.get("validation_seconds", 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--json", type=Path)
    parser.add_argument("overrides", nargs="*", help="extra sgh-train overrides")
    args = parser.parse_args()
    common = [f"trainer.steps={args.steps}", *args.overrides]
    seconds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    validation: list[float] = []
    for repeat in range(args.repeats):
        # Alternate the order, so a drift in machine load does not favour one variant.
        order = list(VARIANTS) if repeat % 2 == 0 else list(reversed(VARIANTS))
        for name in order:
            train, spent = train_seconds([*common, *VARIANTS[name]])
            seconds[name].append(train)
            if name == "monitored":
                validation.append(spent)
            print(f"repeat {repeat}: {name:>9} train_seconds {train:7.2f}"
                  + (f" (validation {spent:.2f})" if name == "monitored" else ""), flush=True)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    result = {
        "steps": args.steps,
        "overrides": args.overrides,
        "monitored_train_seconds_median": medians["monitored"],
        "bare_train_seconds_median": medians["bare"],
        "validation_seconds_median": statistics.median(validation),
        "overhead": medians["monitored"] / medians["bare"] - 1,
        "overhead_convention": ("median train_seconds (training-loop wall time incl. "
                                "compilation and validation) monitored / bare - 1, "
                                f"{args.repeats} alternating repeats, separate processes"),
        "runs": seconds,
    }
    print(f"monitored {medians['monitored']:.2f} s, bare {medians['bare']:.2f} s (medians of "
          f"{args.repeats}); overhead {100 * result['overhead']:+.1f} % (target <= 10 %); "
          f"validation itself {result['validation_seconds_median']:.2f} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
