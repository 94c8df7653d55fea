"""`sgh-train`: the Hydra boundary. `main` composes the config; `run(config, run_dir)` works.

The data flow reads straight down: typed config -> load split -> build model -> train
(TensorBoard, checkpoints) -> encode database and queries -> metrics -> run directory.
Nothing below `main` knows Hydra; tests call `run` directly.
"""

from __future__ import annotations

from sgh.quiet_tensorflow import import_tensorflow

import_tensorflow()  # before anything else imports TensorFlow

import logging
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import hydra
import numpy as np
import tensorflow as tf
from omegaconf import DictConfig, OmegaConf

from sgh.artifacts import RunDirectory
from sgh.config import Config, register_configs, validate
from sgh.data import load_split
from sgh.errors import USAGE_ERROR_EXIT_CODE, UserInputError
from sgh.evaluate import CONVENTIONS, collapse_warning, ground_truth, results_table, score
from sgh.model import SGH, encode_packed
from sgh.trainer import ChunkLog, Trainer, TrainingDiverged, median_ms_per_step

register_configs()


class TrainingInterrupted(Exception):
    """SIGINT/SIGTERM arrived; the run saved a checkpoint and can be resumed."""


INTERRUPTED_EXIT_CODE = 130
DIVERGED_EXIT_CODE = 3


@contextmanager
def _stop_on_signals():
    """Turn SIGINT/SIGTERM into a request to stop after the current compiled call."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received  # signals can only be handled in the main thread
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda number, _frame: received.append(number))
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _comparable(config) -> dict:
    """What defines a training run: everything but the evaluation settings."""
    values = OmegaConf.to_container(OmegaConf.structured(config)) if not isinstance(
        config, dict) else dict(config)
    values.pop("eval", None)
    return values


def run(config: Config, run_dir) -> dict:
    """Train SGH as configured, evaluate it, write the run directory; return the metrics.

    A run directory that already holds a checkpoint of the same configuration is resumed from
    it: model, optimizer state and step are restored, and since batches and noise of step t
    depend only on (seed, t), the result is the same as an uninterrupted run's.
    """
    validate(config)
    run_directory = RunDirectory(run_dir)
    previous = run_directory.previous_config()
    resumable = (run_directory.path / "checkpoints" / "checkpoint").is_file()
    if resumable and previous is not None and _comparable(previous) != _comparable(config):
        raise UserInputError(
            f"{run_directory.path} holds a run with another configuration; resume it with the "
            "same settings, or choose a new hydra.run.dir")
    run_directory.write_config(config)
    split = load_split(config.dataset)
    if config.trainer.batch_size > len(split.train):
        raise UserInputError(
            f"trainer.batch_size={config.trainer.batch_size} is larger than the training set "
            f"({len(split.train)} items of {split.name!r}); accepted: 1..{len(split.train)}")
    print(f"[sgh] {split.name}: train {split.train.shape}, database {split.database.shape}, "
          f"queries {split.query.shape}; {split.protocol}", flush=True)

    # A sweep runs its jobs in one process: start each from a clean TF state and its own seed.
    tf.keras.backend.clear_session()
    tf.random.set_seed(config.trainer.seed)
    model = SGH.from_training_data(config.model, split.train, seed=config.trainer.seed)
    trainer = Trainer(model, split.train, config.trainer)
    checkpoints = run_directory.checkpoint_manager(trainer.checkpoint())
    if checkpoints.latest_checkpoint:
        trainer.checkpoint().restore(checkpoints.latest_checkpoint).assert_consumed()
        print(f"[sgh] resuming from step {int(trainer.step.numpy())} "
              f"({checkpoints.latest_checkpoint})", flush=True)

    started = time.perf_counter()
    with run_directory.summary_writer().as_default(), _stop_on_signals() as signals:
        logs = trainer.fit(_progress(config, checkpoints), stop_requested=lambda: bool(signals))
    train_seconds = time.perf_counter() - started
    step = int(trainer.step.numpy())
    if checkpoints.latest_checkpoint is None or not checkpoints.latest_checkpoint.endswith(
            f"-{step}"):
        checkpoints.save(checkpoint_number=step)
    if signals:
        raise TrainingInterrupted(
            f"interrupted at step {step} of {config.trainer.steps}; checkpoint saved. Run the same "
            f"command with hydra.run.dir={run_directory.path} to resume")

    database_codes = encode_packed(model, split.database)
    query_codes = encode_packed(model, split.query)
    groundtruth, groundtruth_source = ground_truth(split, config.eval.recall_k)
    metrics = {
        "dataset": split.name,
        "method": "sgh",
        "bits": config.model.bits,
        "objective": config.model.objective,
        "estimator": config.model.estimator,
        "noise": config.model.noise,
        "steps": int(trainer.step.numpy()),
        "batch_size": config.trainer.batch_size,
        "seed": config.trainer.seed,
        "train_seconds": train_seconds,  # this process's training (a resumed run: its part)
        "ms_per_step": median_ms_per_step(logs),
        "ms_per_step_convention": ("median over compiled calls of wall time / steps, first call "
                                   "(compilation) excluded"),
        "final_loss_terms_per_item": logs[-1].terms if logs else {},
        **score(database_codes, query_codes, config.model.bits, config.eval,
                split.database_labels, split.query_labels, groundtruth),
        "protocol": split.protocol,
        "feature_conversion": split.feature_conversion,
        "groundtruth": f"{groundtruth.shape[1]} neighbours per query, {groundtruth_source}",
        **CONVENTIONS,
    }
    codes = {"database": database_codes, "query": query_codes, "bits": np.int64(config.model.bits),
             "groundtruth": groundtruth}
    if split.has_labels:
        codes["database_labels"] = split.database_labels
        codes["query_labels"] = split.query_labels
    run_directory.write_codes(**codes)
    run_directory.write_metrics(metrics)
    title = (f"{metrics['dataset']}, SGH {metrics['bits']} bits, objective "
             f"{metrics['objective']}, {metrics['steps']} steps")
    print(results_table(metrics, title, config.eval), flush=True)
    warning = collapse_warning(metrics, config.model.bits)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    print(f"[sgh] run directory: {run_directory.path}", flush=True)
    return metrics


def _progress(config: Config, checkpoints: tf.train.CheckpointManager):
    """Per compiled call: TensorBoard scalars, a console line about every tenth, checkpoints."""
    total = config.trainer.steps
    print_every = max(total // 10, 1)
    next_print = [print_every]

    def on_chunk(log: ChunkLog) -> None:
        for name, value in log.terms.items():
            tf.summary.scalar(f"loss/{name}", value, step=log.step)
        tf.summary.scalar("train/learning_rate", log.learning_rate, step=log.step)
        tf.summary.scalar("train/ms_per_step", log.ms_per_step, step=log.step)
        tf.summary.scalar("train/steps_per_second", 1e3 / log.ms_per_step, step=log.step)
        if log.step >= next_print[0] or log.step == total:
            next_print[0] = (log.step // print_every + 1) * print_every
            terms = "  ".join(f"{name} {value:.4g}" for name, value in log.terms.items())
            print(f"[sgh] step {log.step:>6}/{total}  {terms}  lr {log.learning_rate:.3g}  "
                  f"{1e3 / log.ms_per_step:.0f} steps/s", flush=True)
        if log.step % config.trainer.checkpoint_every < log.steps:
            checkpoints.save(checkpoint_number=log.step)

    return on_chunk


# An absolute path: Hydra would read a relative one as a Python package ("configs").
CONFIG_DIR = str(Path(__file__).resolve().parent.parent / "configs")


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="train")
def _hydra_main(cfg: DictConfig) -> None:
    run_dir = hydra.core.hydra_config.HydraConfig.get().runtime.output_dir
    # Hydra routes Python logging to the console at INFO; TensorFlow's absl INFO lines are noise.
    logging.getLogger("absl").setLevel(logging.WARNING)
    try:
        config = OmegaConf.to_object(cfg)
        run(config, run_dir)
    except UserInputError as error:
        print(f"sgh-train: error: {error}", file=sys.stderr)
        sys.exit(USAGE_ERROR_EXIT_CODE)
    except TrainingDiverged as divergence:
        print(f"sgh-train: error: {divergence}", file=sys.stderr)
        sys.exit(DIVERGED_EXIT_CODE)
    except TrainingInterrupted as interruption:
        print(f"sgh-train: {interruption}", file=sys.stderr)
        sys.exit(INTERRUPTED_EXIT_CODE)


def main() -> None:
    _hydra_main()


if __name__ == "__main__":
    main()
