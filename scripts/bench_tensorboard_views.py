"""What each TensorBoard view costs at MNIST size, and what that is as a share of training.

    python scripts/bench_tensorboard_views.py [--repeats 10] [--sample 2000] [--bits 32]
                                              [--every 1000] [--steps 20000] [--json PATH]

In one process, on the bundled MNIST (60,000 training items, 784 features):
1. trains the default model for 1,000 steps (so the codes are not those of random weights) and
   measures the median ms/step of the compiled calls (the first, compilation, excluded);
2. times each view of `sgh.reports.tensorboard_views` on a fixed sample of `--sample` training
   items,
   `--repeats` times after one warm-up, writing into a real event file: encoding the sample,
   `write_code_health`, `write_encoder_histograms`, `write_images`; and the once-per-run views
   `write_pr_curve` (1,000 test queries x 69,000 database codes, protocol A) and
   `write_hparams`; the first call of each (tracing, JIT of the metrics kernels) is reported
   apart, as it is paid once per process;
3. projects the share of a default run: (validation points x per-point cost + once-per-run
   cost) / (steps x ms/step), with a validation point every `--every` steps. Validation mAP,
   which the training loop computes at the same points, is not a view and is not included.
Medians are reported; the machine's other load shows in both numerators and denominators.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from sgh.model.quiet_tensorflow import import_tensorflow

import_tensorflow()

import numpy as np  # noqa: E402

from sgh.artifacts.tensorboard_events import recording_to  # noqa: E402
from sgh.cli.resources import BUNDLED_DATA_DIR  # noqa: E402
from sgh.config import (  # noqa: E402
    Config,
    ModelConfig,
    SyntheticDatasetConfig,
    TrainerConfig,
)
from sgh.model.encoding import encode_packed  # noqa: E402
from sgh.model.sgh_model import SGH  # noqa: E402
from sgh.reports import tensorboard_views as views  # noqa: E402
from sgh.training.loop import Trainer, median_ms_per_step  # noqa: E402

WARMUP_STEPS = 1000


FIRST_CALL_MS: dict[str, float] = {}


def _median_ms(name: str, function, repeats: int) -> float:
    """Median ms of `repeats` calls after a first one, whose time (tracing, JIT compilation of
    the metrics kernels, first allocations: paid once per process) goes to FIRST_CALL_MS."""
    started = time.perf_counter()
    function(-1)
    FIRST_CALL_MS[name] = 1e3 * (time.perf_counter() - started)
    times = []
    for repeat in range(repeats):
        started = time.perf_counter()
        function(repeat)
        times.append(time.perf_counter() - started)
    return 1e3 * float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--sample", type=int, default=2000)
    parser.add_argument("--bits", type=int, default=32)
    parser.add_argument("--every", type=int, default=1000, help="steps between validation points")
    parser.add_argument("--steps", type=int, default=20000, help="steps of the projected run")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    mnist = np.load(BUNDLED_DATA_DIR / "mnist" / "mnist.npz", allow_pickle=False)
    x_train = mnist["X_train"].reshape(len(mnist["X_train"]), -1).astype(np.float32) / 255
    x_test = mnist["X_test"].reshape(len(mnist["X_test"]), -1).astype(np.float32) / 255
    queries = np.random.default_rng(0).permutation(len(x_test))[:1000]  # protocol A
    database = np.concatenate([x_train, np.delete(x_test, queries, axis=0)])
    database_labels = np.concatenate([mnist["y_train"], np.delete(mnist["y_test"], queries)])

    model = SGH.from_training_data(ModelConfig(bits=args.bits), x_train, seed=0)
    logs = Trainer(model, x_train, TrainerConfig(steps=WARMUP_STEPS)).fit()
    ms_per_step = median_ms_per_step(logs)
    sample = x_train[np.random.default_rng(1).permutation(len(x_train))[:args.sample]]
    query_codes, database_codes = encode_packed(model, x_test[queries]), encode_packed(
        model, database)
    config = Config(dataset=SyntheticDatasetConfig(), model=ModelConfig(bits=args.bits))

    with tempfile.TemporaryDirectory() as logdir, recording_to(logdir):
        per_point = {
            "encode_sample": _median_ms("encode_sample",
                                        lambda step: model.encode_bits(sample).numpy(),
                                        args.repeats),
            "code_health": _median_ms("code_health", lambda step: views.write_code_health(
                model.encode_bits(sample).numpy(), step), args.repeats),
            "encoder_histograms": _median_ms(
                "encoder_histograms",
                lambda step: views.write_encoder_histograms(model, sample, step), args.repeats),
            "images": _median_ms("images", lambda step: views.write_images(model, sample, step),
                                 args.repeats),
        }
        once = {
            "pr_curve": _median_ms("pr_curve", lambda step: views.write_pr_curve(
                query_codes, database_codes, args.bits, mnist["y_test"][queries],
                database_labels, step), max(1, args.repeats // 3)),
            "hparams": _median_ms("hparams", lambda step: views.write_hparams(config),
                                  args.repeats),
        }
    # code_health includes its own encoding; encode_sample is listed to show that share.
    point_ms = sum(value for name, value in per_point.items() if name != "encode_sample")
    points = args.steps // args.every
    train_ms = args.steps * ms_per_step
    result = {
        "sample": args.sample, "bits": args.bits, "repeats": args.repeats,
        "per_point_ms": per_point, "once_per_run_ms": once, "first_call_ms": FIRST_CALL_MS,
        "ms_per_step": ms_per_step,
        "projected_run": {"steps": args.steps, "validation_points": points,
                          "views_seconds": (points * point_ms + sum(once.values())) / 1e3,
                          "train_seconds": train_ms / 1e3},
    }
    result["projected_run"]["views_share_of_training"] = (
        result["projected_run"]["views_seconds"] / result["projected_run"]["train_seconds"])
    for name, value in {**per_point, **once}.items():
        print(f"{name:>20}  {value:8.1f} ms  (first call {FIRST_CALL_MS[name]:6.1f} ms)"
              + ("  once per run" if name in once else ""))
    run = result["projected_run"]
    print(f"training {ms_per_step:.2f} ms/step -> {run['train_seconds']:.1f} s for {args.steps} "
          f"steps; views {point_ms:.0f} ms x {points} points + {sum(once.values()):.0f} ms once "
          f"= {run['views_seconds']:.2f} s = {100 * run['views_share_of_training']:.1f} % of "
          "training")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
