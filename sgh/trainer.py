"""The training loop: many optimizer steps per compiled call, seeded per step.

Why it is fast: a plain TF2 port calls one `tf.function` per step and feeds each batch from numpy;
at SGH's size (~125 MFLOP a step) that per-call overhead is a large share of the step. Here the
training set lives in a TF variable, batches are gathered on the device, and `steps_per_call`
steps run inside one `tf.while_loop`, compiled with XLA.

Why it is reproducible: the batch indices and the neuron's noise of step t are drawn from
stateless RNGs keyed by (seed, t), so a run's data order depends only on the seed and the step,
never on how the steps were grouped into calls or whether the run was restarted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import keras
import numpy as np
import tensorflow as tf

from sgh.config import TrainerConfig
from sgh.model import LOSS_TERMS, RNG_ALGORITHM, SGH

# TF1's AdamOptimizer default, which the released demo used (Keras' default is 1e-7).
ADAM_EPSILON = 1e-8


def learning_rate_schedule(config: TrainerConfig):
    """The rate the optimizer reads at each step (a Keras schedule driven by its iterations)."""
    if config.schedule == "step":
        return keras.optimizers.schedules.ExponentialDecay(
            config.learning_rate, decay_steps=config.decay_every, decay_rate=config.decay_rate,
            staircase=True)
    if config.schedule == "cosine":
        return keras.optimizers.schedules.CosineDecay(config.learning_rate,
                                                      decay_steps=max(config.steps, 1))
    return config.learning_rate


class TrainingDiverged(Exception):
    """The loss became NaN/Inf; the message says where and what to change."""


@dataclass
class ChunkLog:
    """What one compiled call reports: mean loss terms over its steps, and its wall time."""

    step: int  # global step after the call
    steps: int  # steps in the call
    seconds: float
    learning_rate: float
    terms: dict[str, float] = field(default_factory=dict)

    @property
    def ms_per_step(self) -> float:
        return 1e3 * self.seconds / self.steps


class Trainer:
    def __init__(self, model: SGH, x_train: np.ndarray, config: TrainerConfig):
        self.model, self.config = model, config
        # A variable, not a constant: a constant would be copied into every traced graph.
        self.data = tf.Variable(np.asarray(x_train, np.float32), trainable=False, name="train")
        self.n_train = len(x_train)
        self.optimizer = keras.optimizers.Adam(learning_rate_schedule(config),
                                               epsilon=ADAM_EPSILON)
        self.optimizer.build(model.trainable_variables)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.term_names = LOSS_TERMS[model.config.objective]
        self._run = tf.function(self._run_steps, jit_compile=config.jit_compile)
        self.last_finite_log: ChunkLog | None = None

    def checkpoint(self) -> tf.train.Checkpoint:
        return tf.train.Checkpoint(model=self.model, optimizer=self.optimizer, step=self.step)

    def train_step(self, step: tf.Tensor) -> tf.Tensor:
        """One optimizer step at global step `step`; returns the loss terms as a vector."""
        seed = tf.cast(self.config.seed, tf.int64)
        batch_ids = tf.random.stateless_uniform(
            [self.config.batch_size], seed=tf.stack([seed, 2 * step]), maxval=self.n_train,
            dtype=tf.int32, alg=RNG_ALGORITHM)  # with replacement, as the released demo does
        x = tf.gather(self.data, batch_ids)
        epsilon = self.model.sample_noise(self.config.batch_size, tf.stack([seed, 2 * step + 1]))
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            terms = self.model.loss_terms(x, epsilon)
            objective = self.model.objective(terms)
        self.optimizer.apply_gradients(
            zip(tape.gradient(objective, variables), variables, strict=True))
        return tf.stack([terms[name] for name in self.term_names])

    def _run_steps(self, n_steps: tf.Tensor) -> tf.Tensor:
        start = self.step.read_value()

        def body(i, total):
            return i + 1, total + self.train_step(start + tf.cast(i, tf.int64))

        zeros = tf.zeros([len(self.term_names)])
        _, total = tf.while_loop(lambda i, _: i < n_steps, body, (tf.constant(0), zeros))
        self.step.assign_add(tf.cast(n_steps, tf.int64))
        return total / tf.cast(n_steps, tf.float32)

    def current_learning_rate(self) -> float:
        return float(self.optimizer.learning_rate.numpy())

    def fit(self, on_chunk: Callable[[ChunkLog], None] | None = None,
            stop_requested: Callable[[], bool] = lambda: False) -> list[ChunkLog]:
        """Train from the current step to `config.steps`; call `on_chunk` after each call.

        Stops early, between calls, once `stop_requested()` is true (an interrupted run).
        """
        logs = []
        while int(self.step.numpy()) < self.config.steps and not stop_requested():
            n = min(self.config.steps_per_call, self.config.steps - int(self.step.numpy()))
            learning_rate = self.current_learning_rate()
            started = time.perf_counter()
            means = self._run(tf.constant(n)).numpy()
            log = ChunkLog(step=int(self.step.numpy()), steps=n,
                           seconds=time.perf_counter() - started, learning_rate=learning_rate,
                           terms=dict(zip(self.term_names, means.tolist(), strict=True)))
            if not np.all(np.isfinite(means)):
                good = self.last_finite_log
                last = (f"last finite loss {good.terms['total']:.6g} (mean of steps "
                        f"{good.step - good.steps + 1}-{good.step})" if good
                        else "no finite loss yet")
                raise TrainingDiverged(
                    f"the loss became NaN/Inf between steps {log.step - n + 1} and {log.step}; "
                    f"{last}; the checkpoints hold only finite states. Lower "
                    f"trainer.learning_rate (now {self.config.learning_rate:g}), or check the "
                    "features' scale")
            logs.append(log)
            self.last_finite_log = log
            if on_chunk is not None:
                on_chunk(log)
        return logs


def median_ms_per_step(logs: list[ChunkLog]) -> float:
    """Median training-step time over calls, leaving out the first (it includes compilation)."""
    timed = logs[1:] if len(logs) > 1 else logs
    return float(np.median([log.ms_per_step for log in timed])) if timed else float("nan")
