"""Protocol A benchmark: the default recipe and the released preset at 16/32/64 bits, and speed.

    python scripts/bench_train.py [--bits 16 32 64] [--cifar] [--skip-accuracy] [--json PATH]

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
4. The step against its GEMM floor, in the same process: the default recipe's training step
   (batch 500, MNIST's 784 dimensions) at 16, 32 and 64 bits and the deep model's (mlp encoder
   and decoder, 32 bits), each against the same step's matrix products timed alone with
   numpy's BLAS at the same shapes and layouts (`step_products`). Blocks alternate between
   the step and its products; `step_over_gemm_floor` is the ratio of the medians (target
   <= 1.2 at 32 bits). What the products leave out (the gather, the neuron's noise, the
   elementwise terms, the reductions, Adam) is exactly what the ratio measures. The same
   products compiled by XLA in one loop (`xla_products_timer`), timed in the same rotation,
   give the step's own floor, `step_over_xla_products`: XLA runs these small products faster
   than numpy's BLAS does.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from sgh.model.quiet_tensorflow import import_tensorflow

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


def step_products(model: SGH, batch: int) -> list[tuple[str, int, int, int, bool, bool]]:
    """The (name, m, k, n, transpose_a, transpose_b) matrix products of one training step.

    Each dense map of kernel (i, o) costs a forward product (B, i) @ (i, o), its kernel's
    gradient x^T dY, (i, B) @ (B, o), and the gradient of its input dY K^T, (B, o) @ (o, i) --
    except the encoder's first map, whose input is the data. Linear SGH: encoder forward,
    decoder forward, the decoder's gradient, the code's gradient, the encoder's gradient (five
    B x d x l products). The unbiased estimator with an mlp decoder adds its finite
    differences: the decoder forward on 2 l codes per item."""
    encoder = model.encoder.kernels if model.config.encoder == "mlp" else [model.W]
    decoder = model.decoder.kernels if model.config.decoder == "mlp" else [model.U]
    products = []
    for part, kernels in (("encoder", encoder), ("decoder", decoder)):
        for index, kernel in enumerate(kernels):
            fan_in, fan_out = kernel.shape
            name = f"{part}[{index}]"
            products.append((f"{name} forward", batch, fan_in, fan_out, False, False))
            products.append((f"{name} kernel gradient", fan_in, batch, fan_out, True, False))
            if part == "decoder" or index > 0:
                products.append((f"{name} input gradient", batch, fan_out, fan_in, False, True))
    if model.config.gradient_estimator == "unbiased" and model.config.decoder == "mlp":
        rows = batch * 2 * model.bits
        products += [(f"decoder[{index}] finite differences", rows, *kernel.shape, False, False)
                     for index, kernel in enumerate(decoder)]
    return products


def xla_products_timer(operands: list[tuple[np.ndarray, np.ndarray]],
                       products: list[tuple[str, int, int, int, bool, bool]]):
    """ms per step of the step's products alone, compiled by XLA in one loop as the step is."""
    transposes = [(transpose_a, transpose_b) for *_, transpose_a, transpose_b in products]

    @tf.function(jit_compile=True, autograph=False)
    def run(steps, *arrays):
        def body(i, total, *carried):
            pairs = zip(carried[::2], carried[1::2], strict=True)
            for (a, b), (transpose_a, transpose_b) in zip(pairs, transposes, strict=True):
                total = total + tf.matmul(a, b, transpose_a=transpose_a,
                                          transpose_b=transpose_b)[0, 0]
            # Every operand takes a zero-valued update of one element from this iteration's
            # products (in place), so that XLA cannot hoist a product out of the loop.
            return (i + 1, total, *[tf.tensor_scatter_nd_add(array, [[0, 0]], [total * 0.0])
                                    for array in carried])
        return tf.while_loop(lambda i, *_: i < steps, body, (0, 0.0, *arrays))[1]

    # As stored: a product with transpose_a reads (k, m), as the step's gradient does.
    arrays = [tf.constant(np.ascontiguousarray(x.T) if transposed else x)
              for (a, b), (transpose_a, transpose_b) in zip(operands, transposes, strict=True)
              for x, transposed in ((a, transpose_a), (b, transpose_b))]

    def time_xla_products(repeats=BLOCK_STEPS):
        started = time.perf_counter()
        run(tf.constant(repeats), *arrays).numpy()
        return 1e3 * (time.perf_counter() - started) / repeats

    return time_xla_products


def gemm_floor_comparison(cases: dict[str, list[str]]) -> dict:
    """Each case's step (the trainer's own compiled calls) against its products alone."""
    x_train = load_split(_compose([]).dataset).train
    rng = np.random.default_rng(0)
    timers = {}
    for case, overrides in cases.items():
        config = _compose([*overrides, "trainer.strategy=one_device"])
        model = SGH.from_training_data(config.model, x_train, seed=0)
        trainer = Trainer(model, x_train, config.trainer)
        calls = max(1, BLOCK_STEPS // config.trainer.steps_per_call)
        products = step_products(model, config.trainer.batch_size)
        operands = []
        for _, m, k, n, transpose_a, transpose_b in products:
            a = rng.standard_normal((k, m) if transpose_a else (m, k), dtype=np.float32)
            b = rng.standard_normal((n, k) if transpose_b else (k, n), dtype=np.float32)
            operands.append((a.T if transpose_a else a, b.T if transpose_b else b))

        def time_step(trainer=trainer, calls=calls, n=config.trainer.steps_per_call):
            started = time.perf_counter()
            for _ in range(calls):
                trainer._run(tf.constant(n)).numpy()
            return 1e3 * (time.perf_counter() - started) / (calls * n)

        def time_products(operands=operands, repeats=BLOCK_STEPS):
            started = time.perf_counter()
            for _ in range(repeats):
                for a, b in operands:
                    np.matmul(a, b)
            return 1e3 * (time.perf_counter() - started) / repeats

        time_xla_products = xla_products_timer(operands, products)
        time_step(), time_products(), time_xla_products()  # compile and warm up
        flops = sum(2 * m * k * n for _, m, k, n, _, _ in products)
        timers[case] = (time_step, time_products, time_xla_products, flops, products)
    step_ms = {case: [] for case in cases}
    floor_ms = {case: [] for case in cases}
    xla_ms = {case: [] for case in cases}
    for _ in range(BLOCKS):
        for case, (time_step, time_products, time_xla_products, _, _) in timers.items():
            # A pause before each block: TensorFlow's and OpenBLAS's thread pools spin for a
            # while after their work, and would otherwise take the cores from each other.
            for timer, blocks in ((time_step, step_ms), (time_products, floor_ms),
                                  (time_xla_products, xla_ms)):
                time.sleep(0.05)
                blocks[case].append(timer())
    results = {}
    for case, (_, _, _, flops, products) in timers.items():
        step, floor = float(np.median(step_ms[case])), float(np.median(floor_ms[case]))
        xla_products = float(np.median(xla_ms[case]))
        results[case] = {
            "overrides": cases[case], "step_ms": step, "gemm_floor_ms": floor,
            "step_over_gemm_floor": step / floor,
            # The same products compiled by XLA, as the step runs them: the step's own floor.
            "xla_products_ms": xla_products, "step_over_xla_products": step / xla_products,
            "gflop_per_step": flops / 1e9,
            "step_gflops_per_s": flops / step / 1e6, "floor_gflops_per_s": flops / floor / 1e6,
            "products": [f"{name}: ({m} x {k}) @ ({k} x {n})"
                         for name, m, k, n, _, _ in products],
            "step_blocks_ms": step_ms[case], "floor_blocks_ms": floor_ms[case],
            "xla_products_blocks_ms": xla_ms[case]}
    results["convention"] = (
        f"MNIST (60,000 x 784), batch 500, the trainer's compiled calls of steps_per_call steps "
        f"(XLA, data on the device); floor: the step's products alone, numpy {np.__version__} "
        f"BLAS ({blas_summary()}), float32; medians of {BLOCKS} alternating blocks of "
        f"{BLOCK_STEPS} steps")
    return results


def blas_summary() -> str:
    config = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    return f"{config.get('name', '?')} {config.get('version', '')}".strip()


GEMM_FLOOR_CASES = {"linear/16": ["model.bits=16"], "linear/32": ["model.bits=32"],
                    "linear/64": ["model.bits=64"],
                    "deep/32": ["model.bits=32", "model.encoder=mlp", "model.decoder=mlp"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bits", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--cifar", action="store_true", help="also protocol B at 32 bits")
    parser.add_argument("--skip-accuracy", action="store_true",
                        help="speed only: the plain port and the GEMM floor (no training runs)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    floor = gemm_floor_comparison(GEMM_FLOOR_CASES)
    speed = speed_comparison()
    rows = [] if args.skip_accuracy else accuracy_table(args.bits)
    if args.cifar and not args.skip_accuracy:
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
    print(f"\nThe step against its GEMM floor ({floor['convention']}):")
    print(f"  {'case':<11}{'step ms':>9}{'floor ms':>10}{'ratio':>7}{'XLA products ms':>17}"
          f"{'ratio':>7}{'GFLOP/s':>9}{'floor GFLOP/s':>15}")
    for case in GEMM_FLOOR_CASES:
        r = floor[case]
        print(f"  {case:<11}{r['step_ms']:>9.3f}{r['gemm_floor_ms']:>10.3f}"
              f"{r['step_over_gemm_floor']:>7.2f}{r['xla_products_ms']:>17.3f}"
              f"{r['step_over_xla_products']:>7.2f}{r['step_gflops_per_s']:>9.1f}"
              f"{r['floor_gflops_per_s']:>15.1f}")
    print(f"  step_over_gemm_floor at 32 bits: {floor['linear/32']['step_over_gemm_floor']:.2f} "
          "(target <= 1.2)")
    if args.json:
        args.json.write_text(json.dumps({"runs": rows, "speed": speed, "gemm_floor": floor},
                                        indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
