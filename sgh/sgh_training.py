"""Training SGH inside a run directory: resume, progress, checkpoints, interruption.

`train_sgh` is what `sgh.train.run` calls for `model=sgh`; it returns the encoded split and the
SGH-specific fields of `metrics.json`.
"""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf

from sgh.artifacts import RunDirectory
from sgh.config import Config
from sgh.data import RetrievalSplit
from sgh.errors import UserInputError
from sgh.model import SGH, encode_packed
from sgh.trainer import ChunkLog, Trainer, median_ms_per_step


@dataclass
class EncodedSplit:
    """A trained method's codes for the split, and what it reports about its training."""

    database: np.ndarray  # packed uint8
    query: np.ndarray
    fields: dict = field(default_factory=dict)


class TrainingInterrupted(Exception):
    """SIGINT/SIGTERM arrived; the run saved a checkpoint and can be resumed."""


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


def train_sgh(config: Config, split: RetrievalSplit, run_directory: RunDirectory) -> EncodedSplit:
    """Train (or resume) SGH as configured, checkpointing into the run directory; encode."""
    if config.trainer.batch_size > len(split.train):
        raise UserInputError(
            f"trainer.batch_size={config.trainer.batch_size} is larger than the training set "
            f"({len(split.train)} items of {split.name!r}); accepted: 1..{len(split.train)}")
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
    return EncodedSplit(
        database=encode_packed(model, split.database),
        query=encode_packed(model, split.query),
        fields={
            "objective": config.model.objective,
            "estimator": config.model.estimator,
            "noise": config.model.noise,
            "steps": step,
            "batch_size": config.trainer.batch_size,
            "train_seconds": train_seconds,  # this process's training (a resumed run: its part)
            "ms_per_step": median_ms_per_step(logs),
            "ms_per_step_convention": ("median over compiled calls of wall time / steps, first "
                                       "call (compilation) excluded"),
            "final_loss_terms_per_item": logs[-1].terms if logs else {},
        })


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
