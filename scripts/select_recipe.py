"""Choose the default SGH recipe on a validation split of MNIST's training set (never the queries).

    python scripts/select_recipe.py [--bits 32] [--seeds 0 1 2] [--json PATH] [VARIANT ...]

Each variant is a list of Hydra overrides on top of `dataset=mnist dataset.split=validation`:
a sixth of the training set held out, 1,000 of it as queries, database = the other 50,000
training images + the remaining held-out ones, training on the 50,000 (sgh/data/split.py).
Prints mAP@all (label relevance, tie-aware) and Recall10@100 (Euclidean 10-NN, tie-aware) per
variant (mean and spread over the seeds), and writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from sgh.model.quiet_tensorflow import import_tensorflow

import_tensorflow()

import numpy as np  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from sgh.cli.schemas import CONFIG_PATH, register_configs  # noqa: E402
from sgh.pipeline import run  # noqa: E402

register_configs()

# Every variant names its estimator, learning rate and steps, so the table stays reproducible
# when the defaults change. "chosen" is the default recipe (configs/model/sgh.yaml,
# configs/trainer/default.yaml).
SHORT = ["trainer.learning_rate=0.01", "trainer.steps=5000"]
UNBIASED = ["model.gradient_estimator=unbiased"]
VARIANTS = {
    "chosen": [],
    "approximate_lr1e-2_5k": [*SHORT, "model.gradient_estimator=approximate"],
    "unbiased": UNBIASED,
    "unbiased_lr1e-2_5k": [*SHORT, *UNBIASED],
    "unbiased_lr3e-3_5k": ["trainer.steps=5000", *UNBIASED],
    "unbiased_fixed_noise": [*SHORT, *UNBIASED, "model.noise=fixed"],
    "unbiased_cosine": [*UNBIASED, "trainer.schedule=cosine"],
    "unbiased_step_decay": [*SHORT, *UNBIASED, "trainer.schedule=step"],
    "unbiased_released_init": [*SHORT, *UNBIASED, "model.init=released"],
    "unbiased_50k": [*UNBIASED, "trainer.steps=50000"],
    "unbiased_batch1000": [*UNBIASED, "trainer.batch_size=1000"],
    "released_objective": ["experiment=released_mnist"],
    # The reference of `experiment=fast` (configs/experiment/fast.yaml): the fewest steps whose
    # validation Recall10@100 reaches ITQ's on the same split.
    "itq": ["model=itq"],
    "fast_lr3e-3_1500": ["trainer.steps=1500", "validation.every=0"],
    "fast_lr1e-2_500": ["trainer.learning_rate=0.01", "trainer.steps=500", "validation.every=0"],
    "fast_lr1e-2_1000": ["trainer.learning_rate=0.01", "trainer.steps=1000",
                         "validation.every=0"],
    "fast_lr1e-2_cosine_1000": ["trainer.learning_rate=0.01", "trainer.schedule=cosine",
                                "trainer.steps=1000", "validation.every=0"],
    "fast_lr2e-2_cosine_500": ["trainer.learning_rate=0.02", "trainer.schedule=cosine",
                               "trainer.steps=500", "validation.every=0"],
    "fast_lr1e-2_cosine_500": ["trainer.learning_rate=0.01", "trainer.schedule=cosine",
                               "trainer.steps=500", "validation.every=0"],
    "fast_lr2e-2_500": ["trainer.learning_rate=0.02", "trainer.steps=500", "validation.every=0"],
    "fast_lr1e-2_700": ["trainer.learning_rate=0.01", "trainer.steps=700", "validation.every=0"],
    "fast_lr2e-2_300": ["trainer.learning_rate=0.02", "trainer.steps=300", "validation.every=0"],
    "fast_lr3e-2_300": ["trainer.learning_rate=0.03", "trainer.steps=300", "validation.every=0"],
    "fast_lr5e-2_300": ["trainer.learning_rate=0.05", "trainer.steps=300", "validation.every=0"],
    "fast_lr2e-2_400": ["trainer.learning_rate=0.02", "trainer.steps=400", "validation.every=0"],
    "fast_lr3e-2_400": ["trainer.learning_rate=0.03", "trainer.steps=400", "validation.every=0"],
    "fast_lr3e-2_200": ["trainer.learning_rate=0.03", "trainer.steps=200", "validation.every=0"],
    "fast_lr25e-3_400": ["trainer.learning_rate=0.025", "trainer.steps=400",
                         "validation.every=0"],
    "fast_lr2e-2_cosine_700": ["trainer.learning_rate=0.02", "trainer.schedule=cosine",
                               "trainer.steps=700", "validation.every=0"],
    "fast_lr4e-2_cosine_300": ["trainer.learning_rate=0.04", "trainer.schedule=cosine",
                               "trainer.steps=300", "validation.every=0"],
    "fast_lr6e-2_cosine_300": ["trainer.learning_rate=0.06", "trainer.schedule=cosine",
                               "trainer.steps=300", "validation.every=0"],
    "fast_lr1e-1_cosine_300": ["trainer.learning_rate=0.1", "trainer.schedule=cosine",
                               "trainer.steps=300", "validation.every=0"],
    "fast_lr4e-2_300": ["trainer.learning_rate=0.04", "trainer.steps=300", "validation.every=0"],
    "fast_lr6e-2_cosine_250": ["trainer.learning_rate=0.06", "trainer.schedule=cosine",
                               "trainer.steps=250", "validation.every=0"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="*", default=list(VARIANTS))
    parser.add_argument("--bits", type=int, default=32)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = {}
    with initialize_config_dir(config_dir=CONFIG_PATH, version_base="1.3"):
        for name in args.variants:
            runs = []
            for seed in args.seeds:
                overrides = [*VARIANTS[name], "dataset.split=validation",
                             f"model.bits={args.bits}", f"trainer.seed={seed}"]
                config = OmegaConf.to_object(compose("train", overrides=overrides))
                with tempfile.TemporaryDirectory() as run_dir:
                    metrics = run(config, run_dir)
                runs.append({key: metrics.get(key) for key in ("map", "recall10@100",
                                                               "ms_per_step",
                                                               "train_seconds")})
                print(f"RESULT {name:<20} seed {seed} mAP {metrics['map']:.4f}  "
                      f"R10@100 {metrics['recall10@100']:.4f}", flush=True)
            results[name] = {"overrides": VARIANTS[name], "runs": runs,
                             **{f"{key}_mean": float(np.mean([r[key] for r in runs]))
                                for key in ("map", "recall10@100")},
                             **{f"{key}_std": float(np.std([r[key] for r in runs]))
                                for key in ("map", "recall10@100")}}
    print(f"\nvalidation split of MNIST train, {args.bits} bits, seeds {args.seeds} "
          "(mean +- std); mAP@all tie-aware (label relevance), Recall10@100 tie-aware "
          "(Euclidean 10-NN)")
    for name, r in results.items():
        print(f"{name:<20} mAP {r['map_mean']:.4f} +- {r['map_std']:.4f}   "
              f"R10@100 {r['recall10@100_mean']:.4f} +- {r['recall10@100_std']:.4f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    sys.exit(main())
