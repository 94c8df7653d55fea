"""Deep SGH (mlp encoder and decoder) against linear SGH: speed, the recipe, and both protocols.

    SGH_DATA_DIR=../shared/data python scripts/bench_deep.py --json bench_deep.json
        [--bits 16 32 64] [--datasets mnist cifar10_gist] [--skip-selection]

1. Speed, side by side in one process: ms per training step (32 bits, batch 500, MNIST's shape)
   of linear and deep SGH, each with the approximate and the unbiased estimator; blocks of 200
   steps alternate between the four, medians of the per-block ms/step.
2. The deep recipe, chosen on the validation split only (never the test queries): candidate
   learning rates and hidden sizes on MNIST at 32 bits, each a full run whose best
   validation Recall10@100 (1,000 held-out training queries against 10,000 training items)
   decides; steps are chosen by the same validation (the best validated step's weights).
3. Linear (the default recipe) and the chosen deep recipe on every dataset and code length:
   mAP@all (label relevance, tie-aware) and Recall10@100 (exact Euclidean 10-NN, tie-aware at
   the cut-off) on the test queries, with the best validation score and the training time.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from sgh.model.quiet_tensorflow import import_tensorflow

import_tensorflow()

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from sgh.cli.schemas import CONFIG_PATH, register_configs  # noqa: E402
from sgh.config import ModelConfig, TrainerConfig  # noqa: E402
from sgh.model.sgh_model import SGH  # noqa: E402
from sgh.pipeline import run  # noqa: E402
from sgh.training.loop import Trainer  # noqa: E402

register_configs()

DEEP = ["model.encoder=mlp", "model.decoder=mlp"]
# Candidates of the deep recipe (section 2): hidden sizes and learning rates.
CANDIDATES = {
    "mlp512_lr1e-3": [*DEEP, "model.encoder_hidden=[512]", "model.decoder_hidden=[512]",
                      "trainer.learning_rate=1e-3"],
    "mlp512_lr3e-3": [*DEEP, "model.encoder_hidden=[512]", "model.decoder_hidden=[512]",
                      "trainer.learning_rate=3e-3"],
}
BLOCK_STEPS, BLOCKS = 200, 5


def step_times() -> dict:
    x = np.random.default_rng(0).random((60000, 784), dtype=np.float32)
    trainers = {}
    for name, model_config in {
        "linear/approximate": ModelConfig(bits=32),
        "linear/unbiased": ModelConfig(bits=32, gradient_estimator="unbiased"),
        "deep/approximate": ModelConfig(bits=32, encoder="mlp", decoder="mlp"),
        "deep/unbiased": ModelConfig(bits=32, encoder="mlp", decoder="mlp",
                                     gradient_estimator="unbiased"),
    }.items():
        config = TrainerConfig(steps=10**9, steps_per_call=100)
        trainer = Trainer(SGH.from_training_data(model_config, x, seed=0), x, config)
        trainer._run(tf.constant(BLOCK_STEPS)).numpy()  # compile
        trainers[name] = trainer
    times = {name: [] for name in trainers}
    for _ in range(BLOCKS):
        for name, trainer in trainers.items():
            started = time.perf_counter()
            trainer._run(tf.constant(BLOCK_STEPS)).numpy()
            times[name].append(1e3 * (time.perf_counter() - started) / BLOCK_STEPS)
    medians = {name: float(np.median(values)) for name, values in times.items()}
    return {"ms_per_step_median": medians,
            "deep_over_linear": medians["deep/approximate"] / medians["linear/approximate"],
            "unbiased_over_approximate_deep": (medians["deep/unbiased"]
                                               / medians["deep/approximate"]),
            "unbiased_over_approximate_linear": (medians["linear/unbiased"]
                                                 / medians["linear/approximate"]),
            "convention": (f"32 bits, batch 500, d = 784, XLA; medians over {BLOCKS} "
                           f"alternating blocks of {BLOCK_STEPS} steps, one process")}


def _run(overrides: list[str]) -> dict:
    with initialize_config_dir(config_dir=CONFIG_PATH, version_base="1.3"):
        config = OmegaConf.to_object(compose("train", overrides=overrides))
    with tempfile.TemporaryDirectory() as run_dir:
        metrics = run(config, run_dir)
    keep = ("dataset", "bits", "map", "recall10@100", "best_step", "best_validation_recall10@100",
            "train_seconds", "ms_per_step", "distinct_database_codes", "dead_bits")
    return {key: metrics.get(key) for key in keep}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bits", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--datasets", nargs="+", default=["mnist", "cifar10_gist"])
    parser.add_argument("--skip-selection", action="store_true",
                        help="use the first candidate instead of choosing on validation")
    parser.add_argument("--json")
    args = parser.parse_args()
    report = {"speed": step_times()}
    print(json.dumps(report["speed"], indent=2), flush=True)

    if args.skip_selection:
        chosen = next(iter(CANDIDATES))
    else:
        selection = {name: _run([*overrides, "model.bits=32"])
                     for name, overrides in CANDIDATES.items()}
        for name, row in selection.items():
            print(f"selection {name}: validation Recall10@100 "
                  f"{row['best_validation_recall10@100']:.4f} (step {row['best_step']})",
                  flush=True)
        chosen = max(selection, key=lambda name: selection[name]["best_validation_recall10@100"])
        # The test numbers of the candidates are kept for the record, never used to choose.
        report["selection"] = {"chosen": chosen, "candidates": selection,
                               "rule": "highest best validation Recall10@100, MNIST, 32 bits"}
    rows = []
    for dataset in args.datasets:
        for bits in args.bits:
            for model, overrides in (("linear", []), ("deep", CANDIDATES[chosen])):
                row = {"model": model, **_run([*overrides, f"dataset={dataset}",
                                               f"model.bits={bits}"])}
                rows.append(row)
                print(json.dumps(row), flush=True)
    report["table"] = rows
    report["conventions"] = {
        "map": "mAP@all, label relevance (same label), tie-aware",
        "recall10@100": "Recall10@100: exact Euclidean 10-NN among the first 100 of the Hamming "
                        "ranking, tie-aware at the cut-off; test queries",
        "best_validation_recall10@100": "the same on the validation split carved from the "
                                        "training set (selection only)",
        "recipe": f"linear: the default; deep: {chosen} ({' '.join(CANDIDATES[chosen])})",
    }
    if args.json:
        with open(args.json, "w") as file:
            json.dump(report, file, indent=2)


if __name__ == "__main__":
    main()
