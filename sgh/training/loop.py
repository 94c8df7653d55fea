"""The training loop: many optimizer steps per compiled call, seeded per step, on any strategy.

Rather than one call per step fed from numpy, the training set lives in a TF variable, batches
are gathered on the device (or streamed as one block per call), and `steps_per_call` steps run
inside one XLA-compiled `tf.while_loop`. Batches and noise are keyed by the seed and the step
(`sgh.training.batches`), whatever the grouping into calls, restarts or streaming.

Several replicas (`sgh.training.devices`) each take their slice [r B/R, (r + 1) B/R) of step t's
global batch, so together they compute the single-device step (`replica_share`); the all-reduce
and the update run outside XLA, which cannot span devices.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import keras
import numpy as np
import tensorflow as tf

from sgh.config import TrainerConfig
from sgh.data.aligned import is_aligned
from sgh.data.streamed_features import Features, StreamedFeatures
from sgh.errors import TrainingDiverged, UserInputError
from sgh.model.quiet_tensorflow import cached_compilation, traced_once_per_model
from sgh.model.sgh_model import LOSS_TERMS, SGH
from sgh.training.batches import batch_ids, call_plan, streamed_blocks
from sgh.training.devices import Workers, is_multi_worker

logger = logging.getLogger(__name__)

# TF1's AdamOptimizer default, which the released demo used (Keras' default is 1e-7).
ADAM_EPSILON = 1e-8


def _training_set_tensor(x_train: np.ndarray) -> tf.Tensor:
    """The training set as a float32 tensor, sharing the array's memory where it can (not held
    twice). Safe because nothing writes to it: it is a non-trainable variable's value."""
    array = np.asarray(x_train, np.float32)
    if array.flags.c_contiguous and array.flags.writeable and is_aligned(array):
        return tf.experimental.dlpack.from_dlpack(array.__dlpack__())
    return tf.convert_to_tensor(array)


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


@dataclass
class ChunkLog:
    """What one compiled call reports: mean loss terms over its steps, and its wall time."""

    step: int  # global step after the call
    steps: int  # steps in the call
    seconds: float
    learning_rate: float
    terms: dict[str, float] = field(default_factory=dict)
    # Mean gradient L2 norms per variable and "global"; empty on several replicas.
    gradient_norms: dict[str, float] = field(default_factory=dict)

    @property
    def ms_per_step(self) -> float:
        return 1e3 * self.seconds / self.steps


def replica_share(terms: dict[str, tf.Tensor], replicas: int,
                  local_batch: int) -> dict[str, tf.Tensor]:
    """A replica's loss terms rescaled so that the objective's *sum* and the reported terms' *mean*
    over the replicas are the global batch's (`released`'s weight decay counted once)."""
    if "total_sum" not in terms:
        return {**terms, "objective": terms["total"] / replicas}
    surplus = terms["weight_decay"] * (1.0 - 1.0 / replicas)  # per local item
    return {**terms, "objective": terms["total_sum"] - surplus * local_batch,
            "total": terms["total"] - surplus, "weight_decay": terms["weight_decay"] / replicas}


class Trainer:
    """Trains `model` on `x_train` (in memory, or `StreamedFeatures`) on the replicas of
    `strategy` (None: one device), inside whose scope a replicated model must have been built."""

    def __init__(self, model: SGH, x_train: Features, config: TrainerConfig,
                 strategy: tf.distribute.Strategy | None = None):
        self.model, self.config = model, config
        self.strategy = strategy if strategy is not None else tf.distribute.get_strategy()
        self.replicas = self.strategy.num_replicas_in_sync
        self.replicated = isinstance(self.strategy, (tf.distribute.MirroredStrategy,
                                                     tf.distribute.MultiWorkerMirroredStrategy))
        if self.replicated:
            self._check_replicas()
        self.n_train = len(x_train)
        self.term_names = LOSS_TERMS[model.config.objective]
        self._warned_overflow = False
        self.gradient_names = () if self.replicated else tuple(
            variable.name.split(":")[0].split("/")[-1]
            for variable in model.trainable_variables) + ("global",)
        self.streamed = x_train if isinstance(x_train, StreamedFeatures) else None
        with self.strategy.scope():
            if self.streamed is None:
                # A variable (a constant would be copied into every traced graph), made from a
                # tensor whose buffer it takes over: from the array itself it is slower than a copy.
                self.data = tf.Variable(_training_set_tensor(x_train), trainable=False,
                                        name="train")
            self.optimizer = keras.optimizers.Adam(learning_rate_schedule(config),
                                                   epsilon=ADAM_EPSILON)
            self.optimizer.build(model.trainable_variables)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
            if self.replicated:
                # Added locally, averaged on read: no communication inside the loop.
                self._term_sums = tf.Variable(
                    tf.zeros([len(self.term_names)]), trainable=False, name="term_sums",
                    synchronization=tf.VariableSynchronization.ON_READ,
                    aggregation=tf.VariableAggregation.MEAN)
        # autograph off: the loops are explicit tf.while_loops, and replica functions are traced
        # in one thread per device.
        if self.replicated:
            self._replica_gradients = tf.function(self._gradients, autograph=False,
                                                  jit_compile=config.jit_compile)
            self._run = tf.function(self._run_replicated_steps, autograph=False)
        else:
            self._run = tf.function(self._run_steps, jit_compile=config.jit_compile,
                                    autograph=False)
        self.workers = Workers(self.strategy) if is_multi_worker(self.strategy) else None
        # Multi-worker: fit() returned early because another worker's stop_requested() was true.
        self.stopped_by_another_worker = False
        self.last_finite_log: ChunkLog | None = None

    def _check_replicas(self) -> None:
        if self.config.batch_size % self.replicas:
            raise UserInputError(
                f"trainer.batch_size={self.config.batch_size} does not split evenly over "
                f"{self.replicas} replicas; accepted: a multiple of {self.replicas}")
        foreign = [variable.name for variable in self.model.variables
                   if not self.strategy.extended.variable_created_in_scope(variable)]
        if foreign:
            raise ValueError(f"the model's variables {foreign} were not created under the "
                             f"training strategy; build the model inside strategy.scope() "
                             f"(strategy = sgh.training.devices.strategy_for(config.trainer))")

    def checkpoint(self, **extra) -> tf.train.Checkpoint:
        """Everything an exact resume needs; `extra` adds the caller's own state to it."""
        return tf.train.Checkpoint(model=self.model, optimizer=self.optimizer, step=self.step,
                                   **extra)

    def _batch_ids(self, step: tf.Tensor) -> tf.Tensor:
        return batch_ids(self.config.seed, step, self.config.batch_size, self.n_train)

    def _noise(self, step: tf.Tensor) -> tf.Tensor:
        """Step `step`'s noise of the neuron (B, bits)."""
        seed = tf.stack([tf.cast(self.config.seed, tf.int64), 2 * step + 1])
        return self.model.sample_noise(self.config.batch_size, seed)

    def train_step(self, step: tf.Tensor, x: tf.Tensor | None = None) -> tf.Tensor:
        """One optimizer step on batch `x` (None: gathered); the loss terms, then gradient norms."""
        if x is None:
            x = tf.gather(self.data, self._batch_ids(step))
        epsilon = self._noise(step)
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            terms = self.model.loss_terms(x, epsilon)
            objective = self.model.objective(terms)
        gradients = tape.gradient(objective, variables)
        self.optimizer.apply_gradients(zip(gradients, variables, strict=True))
        norms = tf.stack([tf.norm(gradient) for gradient in gradients])
        return tf.concat([tf.stack([terms[name] for name in self.term_names]), norms,
                          tf.norm(norms)[tf.newaxis]], axis=0)

    @traced_once_per_model
    def _run_steps(self, n_steps: tf.Tensor, block: tf.Tensor | None = None) -> tf.Tensor:
        """`n_steps` steps from the current one; `block`: their streamed batches (n, B, d)."""
        start = self.step.read_value()

        def body(i, total):
            x = None if block is None else block[i]
            return i + 1, total + self.train_step(start + tf.cast(i, tf.int64), x)

        zeros = tf.zeros([len(self.term_names) + len(self.gradient_names)])
        _, total = tf.while_loop(lambda i, _: i < n_steps, body, (tf.constant(0), zeros))
        self.step.assign_add(tf.cast(n_steps, tf.int64))
        return total / tf.cast(n_steps, tf.float32)

    @traced_once_per_model
    def _gradients(self, step: tf.Tensor, replica: tf.Tensor, x_global: tf.Tensor | None = None):
        """Replica `replica`'s gradients of its share of step `step`'s objective, and its terms."""
        local_batch = self.config.batch_size // self.replicas
        epsilon = self._noise(step)
        first = replica * local_batch
        if x_global is None:
            x = tf.gather(self.data, self._batch_ids(step)[first:first + local_batch])
        else:
            x = x_global[first:first + local_batch]
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            terms = replica_share(self.model.loss_terms(x, epsilon[first:first + local_batch]),
                                  self.replicas, local_batch)
        gradients = tape.gradient(terms["objective"], variables)
        return gradients, tf.stack([terms[name] for name in self.term_names])

    def _replica_step(self, step: tf.Tensor, x_global: tf.Tensor | None = None) -> None:
        replica = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.int32)
        gradients, terms = self._replica_gradients(step, replica, x_global)
        # Keras all-reduces (sums) the replicas' gradients before the update.
        self.optimizer.apply_gradients(zip(gradients, self.model.trainable_variables, strict=True))
        self._term_sums.assign_add(terms)

    @traced_once_per_model
    def _run_replicated_steps(self, n_steps: tf.Tensor, block: tf.Tensor | None = None
                              ) -> tf.Tensor:
        start = self.step.read_value()
        self._term_sums.assign(tf.zeros([len(self.term_names)]))

        def body(i):
            step = start + tf.cast(i, tf.int64)
            self.strategy.run(self._replica_step,
                              args=(step,) if block is None else (step, block[i]))
            return (i + 1,)

        tf.while_loop(lambda i: i < n_steps, body, (tf.constant(0),))
        self.step.assign_add(tf.cast(n_steps, tf.int64))
        return self._term_sums.read_value() / tf.cast(n_steps, tf.float32)

    def _stop(self, stop_requested: Callable[[], bool]) -> bool:
        requested = stop_requested()
        if self.workers is None:
            return requested
        anywhere = self.workers.any(requested)  # all workers stop after the same call
        self.stopped_by_another_worker = anywhere and not requested
        return anywhere

    def fit(self, on_chunk: Callable[[ChunkLog], None] | None = None,
            stop_requested: Callable[[], bool] = lambda: False) -> list[ChunkLog]:
        """Train to `config.steps`, or until `stop_requested()` (on any worker) between calls."""
        if self.workers is not None:
            # Only the chief restores checkpoints (the others may not see its disk).
            self.workers.adopt_chief_values([*self.model.variables, self.step,
                                             *self.optimizer.variables])
        logs, n_terms = [], len(self.term_names)
        plan = call_plan(self.config, int(self.step.numpy()))
        blocks = (None if self.streamed is None else
                  iter(streamed_blocks(self.streamed, self.config, plan)))
        for _, n in plan:
            if self._stop(stop_requested):
                break
            learning_rate = float(self.optimizer.learning_rate.numpy())
            started = time.perf_counter()
            with cached_compilation() if not logs else contextlib.nullcontext():
                # Waiting for a streamed block counts: a slow disk shows in ms_per_step.
                block = () if blocks is None else (next(blocks),)
                means = self._run(tf.constant(n), *block).numpy()
            log = ChunkLog(step=int(self.step.numpy()), steps=n,
                           seconds=time.perf_counter() - started, learning_rate=learning_rate,
                           terms=dict(zip(self.term_names, means[:n_terms].tolist(), strict=True)),
                           gradient_norms=dict(zip(self.gradient_names,
                                                   means[n_terms:].tolist(), strict=True)))
            # A non-finite gradient leaves non-finite weights even under a finite mean loss; the
            # other terms only monitor (`paper`'s input-unit `reconstruction` may overflow).
            watched = [self.term_names.index("total"), *range(n_terms, len(means))]
            if not np.all(np.isfinite(means[watched])):
                good = self.last_finite_log
                last = (f"last finite loss {good.terms['total']:.6g} (mean of steps "
                        f"{good.step - good.steps + 1}-{good.step})" if good
                        else "no finite loss yet")
                raise TrainingDiverged(
                    f"the loss became NaN/Inf between steps {log.step - n + 1} and {log.step}; "
                    f"{last}; the checkpoints hold only finite states. Lower "
                    f"trainer.learning_rate (now {self.config.learning_rate:g}), or check the "
                    "features' scale")
            if not np.all(np.isfinite(means[:n_terms])) and not self._warned_overflow:
                self._warned_overflow = True
                overflowing = [name for name, value in log.terms.items() if not np.isfinite(value)]
                logger.warning("the monitoring term(s) %s exceed float32's range in input units "
                               "(features of a very large scale); they show as inf, and "
                               "training, which works on normalised features, is unaffected",
                               ", ".join(overflowing))
            logs.append(log)
            self.last_finite_log = log
            if on_chunk is not None:
                on_chunk(log)
        return logs


def median_ms_per_step(logs: list[ChunkLog]) -> float:
    """Median training-step time over calls, leaving out the first (it includes compilation)."""
    timed = logs[1:] if len(logs) > 1 else logs
    return float(np.median([log.ms_per_step for log in timed])) if timed else float("nan")
