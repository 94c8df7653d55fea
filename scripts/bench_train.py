"""Protocol A benchmark: the default recipe and the released preset at 16/32/64 bits, and speed.

    python scripts/bench_train.py [--bits 16 32 64] [--cifar] [--json PATH]

1. Trains and scores each recipe at each bit count through `sgh.pipeline.run` (the same code path
   as `sgh-train`): mAP@all (label relevance, tie-aware), Recall10@100 (Euclidean 10-NN,
   tie-aware), training time, median ms/step, distinct database codes, final reconstruction.
2. With --cifar (needs cifar10_gist under the data directory): protocol B at 32 bits for both
   recipes, where the released demo collapses (one code for every item) and ours must not.
3. Speed, side by side in one process: the released preset's training step (32 bits, batch 500)
   in our trainer (`steps_per_call` steps per XLA-compiled call, data on the device) against a
   *plain port*: the same model and loss, one `tf.function` call per step, each batch drawn in
   numpy and fed from the host. Blocks of 200 steps alternate between the two; medians of the
   per-block ms/step are reported with their ratio (target: ours <= 0.7x plain).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from sgh.quiet_tensorflow import import_tensorflow

import_tensorflow()

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from sgh.cli.schemas import CONFIG_PATH, register_configs  # noqa: E402
from sgh.data import load_split  # noqa: E402
from sgh.model.sgh_model import SGH  # noqa: E402
from sgh.pipeline import run  # noqa: E402
from sgh.training.loop import ADAM_EPSILON, Trainer  # noqa: E402

register_configs()

RECIPES = {"default": [], "released": ["experiment=released_mnist"]}
BLOCK_STEPS, BLOCKS = 200, 7


def _compose(overrides):
    with initialize_config_dir(config_dir=CONFIG_PATH, version_base="1.3"):
        return OmegaConf.to_object(compose("train", overrides=overrides))


def accuracy_table(bits_list, dataset="mnist"):
    rows = []
    for recipe, overrides in RECIPES.items():
        for bits in bits_list:
            config = _compose([*overrides, f"model.bits={bits}", f"dataset={dataset}"])
            with tempfile.TemporaryDirectory() as run_dir:
                metrics = run(config, run_dir)
            rows.append({
                "dataset": dataset, "recipe": recipe, "bits": bits, "map": metrics["map"],
                "recall10@100": metrics["recall10@100"],
                "recall10@100_stable": metrics["recall10@100_stable"],
                "train_seconds": metrics["train_seconds"], "ms_per_step": metrics["ms_per_step"],
                "distinct_database_codes": metrics["distinct_database_codes"],
                "reconstruction_last_100_steps":
                    metrics["final_loss_terms_per_item"]["reconstruction"],
            })
    return rows


def plain_port_step(model: SGH, optimizer):
    """One `tf.function` call per step: the shape of a straightforward TF2 port."""
    variables = model.trainable_variables

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            terms = model.loss_terms(x, tf.fill([tf.shape(x)[0], model.bits], 0.5))
            objective = model.objective(terms)
        optimizer.apply_gradients(zip(tape.gradient(objective, variables), variables,
                                      strict=True))
        return terms["total"]

    return step


def speed_comparison():
    config = _compose([*RECIPES["released"], "model.bits=32", "trainer.strategy=one_device"])
    x_train = load_split(config.dataset).train
    ours = Trainer(SGH.from_training_data(config.model, x_train, seed=0), x_train, config.trainer)
    plain_model = SGH.from_training_data(config.model, x_train, seed=0)
    plain = plain_port_step(plain_model, keras.optimizers.Adam(config.trainer.learning_rate,
                                                               epsilon=ADAM_EPSILON))
    rng = np.random.default_rng(0)
    batch = config.trainer.batch_size

    def time_plain():
        started = time.perf_counter()
        for _ in range(BLOCK_STEPS):
            plain(x_train[rng.choice(len(x_train), batch)]).numpy()
        return 1e3 * (time.perf_counter() - started) / BLOCK_STEPS

    def time_ours():
        started = time.perf_counter()
        remaining = BLOCK_STEPS
        while remaining:  # the trainer's own calls of steps_per_call steps
            n = min(config.trainer.steps_per_call, remaining)
            ours._run(tf.constant(n)).numpy()
            remaining -= n
        return 1e3 * (time.perf_counter() - started) / BLOCK_STEPS

    time_plain(), time_ours()  # compile and warm up both
    plain_ms, ours_ms = [], []
    for _ in range(BLOCKS):
        plain_ms.append(time_plain())
        ours_ms.append(time_ours())
    return {"plain_port_ms_per_step": float(np.median(plain_ms)),
            "ours_ms_per_step": float(np.median(ours_ms)),
            "ratio_ours_to_plain": float(np.median(ours_ms) / np.median(plain_ms)),
            "plain_port_blocks_ms": plain_ms, "ours_blocks_ms": ours_ms,
            "convention": (f"released preset, 32 bits, batch {batch}; median over {BLOCKS} "
                           f"alternating blocks of {BLOCK_STEPS} steps, after warm-up")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bits", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--cifar", action="store_true", help="also protocol B at 32 bits")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    speed = speed_comparison()
    rows = accuracy_table(args.bits)
    if args.cifar:
        rows += accuracy_table([32], dataset="cifar10_gist")
    print("\nProtocol A (mnist: 1,000 test queries, 69,000 database items) and B (cifar10_gist: "
          "100 test queries per class, 59,000 database items). mAP@all: label relevance, "
          "tie-aware. R10@100: Euclidean 10-NN among the top 100, tie-aware (stable: ties by "
          "index). recon: 1/2||x - x^||^2 per item in input space, mean over the last 100 steps.")
    header = (f"{'dataset':<13}{'recipe':<9}{'bits':>5}{'mAP@all':>9}{'R10@100':>9}"
              f"{'(stable)':>9}{'train s':>9}{'ms/step':>9}{'distinct':>10}{'recon':>8}")
    print(header)
    for r in rows:
        print(f"{r['dataset']:<13}{r['recipe']:<9}{r['bits']:>5}{r['map']:>9.4f}"
              f"{r['recall10@100']:>9.4f}"
              f"{r['recall10@100_stable']:>9.4f}{r['train_seconds']:>9.1f}"
              f"{r['ms_per_step']:>9.2f}{r['distinct_database_codes']:>10}"
              f"{r['reconstruction_last_100_steps']:>8.2f}")
    print(f"\nSpeed ({speed['convention']}):\n  plain port (one tf.function call per step): "
          f"{speed['plain_port_ms_per_step']:.2f} ms/step\n  ours ({'XLA'}, data on device): "
          f"{speed['ours_ms_per_step']:.2f} ms/step\n  ratio ours / plain: "
          f"{speed['ratio_ours_to_plain']:.2f} (target <= 0.70)")
    if args.json:
        args.json.write_text(json.dumps({"runs": rows, "speed": speed}, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
