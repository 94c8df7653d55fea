"""The training loop: many optimizer steps per compiled call, seeded per step, on any strategy.

Why it is fast: a plain TF2 port calls one `tf.function` per step and feeds each batch from numpy;
at SGH's size (~125 MFLOP a step) that per-call overhead is a large share of the step. Here the
training set lives in a TF variable, batches are gathered on the device, and `steps_per_call`
steps run inside one `tf.while_loop`, compiled with XLA. A training set streamed from disk
(`StreamedFeatures`) is fed instead as one (steps, batch, d) block per call, read ahead by a
tf.data pipeline (`sgh.training.batches`); the batches, and so the weights, are the same.

Why it is reproducible: the batch indices and the neuron's noise of step t are drawn from
stateless RNGs keyed by (seed, 2t) and (seed, 2t + 1), so a run's data order depends only on the
seed and the step, never on how the steps were grouped into calls, whether the run was
restarted, or whether the data were streamed.

Several replicas (`sgh.training.devices`: mirrored GPUs or logical CPUs, or workers): the global
batch stays `batch_size`. Every replica draws the same global batch of step t and takes its own
slice, replica r items [r B/R, (r + 1) B/R), so the replicas together compute the single-device
step; their gradients are summed by the optimizer's all-reduce, each replica's objective scaled so
that the sum is the global batch's objective (`replica_share`). The loop over steps stays inside one
`tf.function`; XLA compiles each replica's forward and backward pass (`jit_compile`), while the
all-reduce and the optimizer update run outside XLA, which cannot span devices.
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
    """The in-memory training set as a float32 tensor: the array's own memory where TensorFlow
    can take it (float32, C-contiguous, writeable, 64-byte aligned: `sgh.data.aligned`, as the
    data stages make it), so the training set is not held twice; a copy otherwise. Nothing
    writes to it: it is a non-trainable variable's value."""
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
    # L2 norms of the objective's gradient, per variable and "global" (all variables), means over
    # the call's steps; empty on several replicas (each sees only its share before the
    # all-reduce).
    gradient_norms: dict[str, float] = field(default_factory=dict)

    @property
    def ms_per_step(self) -> float:
        return 1e3 * self.seconds / self.steps


def replica_share(terms: dict[str, tf.Tensor], replicas: int,
                  local_batch: int) -> dict[str, tf.Tensor]:
    """A replica's loss terms rescaled so that, over the R replicas, the objective's *sum* and
    the reported terms' *mean* are those of the global batch (R slices of B/R items).

    `paper` (per-item means plus parameter-only terms): objective_r / R; the reported terms need
    nothing, the mean over equal slices of a mean being the global mean.
    `released` (`total_sum`, summed over the batch, plus the parameter-only weight decay WD):
    sum_r + WD / R, so WD counts once; reported `weight_decay` (WD per local item) / R and `total`
    lowered to match.
    """
    if "total_sum" not in terms:
        return {**terms, "objective": terms["total"] / replicas}
    surplus = terms["weight_decay"] * (1.0 - 1.0 / replicas)  # per local item
    return {**terms, "objective": terms["total_sum"] - surplus * local_batch,
            "total": terms["total"] - surplus, "weight_decay": terms["weight_decay"] / replicas}


class Trainer:
    """Trains `model` on `x_train` (in memory, or `StreamedFeatures` read from disk as needed);
    on several replicas when `strategy` has them.

    `strategy` is the one the program created at its start (`sgh.training.devices.strategy_for`);
    None is TensorFlow's default, one device. With several replicas the model must have been
    built inside `strategy.scope()` (its variables mirrored).
    """

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
                # A variable, not a constant: a constant would be copied into every traced graph.
                # Made from a tensor, whose buffer the variable takes over: made from the array
                # itself it is several times slower than one copy.
                self.data = tf.Variable(_training_set_tensor(x_train), trainable=False,
                                        name="train")
            self.optimizer = keras.optimizers.Adam(learning_rate_schedule(config),
                                                   epsilon=ADAM_EPSILON)
            self.optimizer.build(model.trainable_variables)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
            if self.replicated:
                # Each replica adds its terms locally; a read averages over replicas (MEAN), so
                # the loss needs no communication inside the loop.
                self._term_sums = tf.Variable(
                    tf.zeros([len(self.term_names)]), trainable=False, name="term_sums",
                    synchronization=tf.VariableSynchronization.ON_READ,
                    aggregation=tf.VariableAggregation.MEAN)
        if self.replicated:
            # autograph off: replica functions are traced in one thread per device, and nothing
            # here needs Python control flow converted.
            self._replica_gradients = tf.function(self._gradients, autograph=False,
                                                  jit_compile=config.jit_compile)
            self._run = tf.function(self._run_replicated_steps, autograph=False)
        else:
            # autograph off: the loop is an explicit tf.while_loop and nothing else needs
            # converting; converting it anyway would lengthen every run's tracing.
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
        """Step `step`'s batch indices (B,), whoever draws them (`sgh.training.batches`)."""
        return batch_ids(self.config.seed, step, self.config.batch_size, self.n_train)

    def _noise(self, step: tf.Tensor) -> tf.Tensor:
        """Step `step`'s noise of the neuron (B, bits)."""
        seed = tf.stack([tf.cast(self.config.seed, tf.int64), 2 * step + 1])
        return self.model.sample_noise(self.config.batch_size, seed)

    # ---- one device: the whole call is one XLA computation ---------------------------------
    def train_step(self, step: tf.Tensor, x: tf.Tensor | None = None) -> tf.Tensor:
        """One optimizer step at global step `step` on its batch `x` (gathered from the
        in-memory training set when None); returns the loss terms, then the gradient norms
        (`gradient_names`), as one vector."""
        if x is None:
            x = tf.gather(self.data, self._batch_ids(step))
        epsilon = self._noise(step)
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            terms = self.model.loss_terms(x, epsilon)
            objective = self.model.objective(terms)
        gradients = tape.gradient(objective, variables)
        self.optimizer.apply_gradients(zip(gradients, variables, strict=True))
        # A few reductions over the ~2 * bits * dim gradient entries, inside the same XLA
        # computation: next to nothing per step, and the weights unchanged bit for bit.
        norms = tf.stack([tf.norm(gradient) for gradient in gradients])
        return tf.concat([tf.stack([terms[name] for name in self.term_names]), norms,
                          tf.norm(norms)[tf.newaxis]], axis=0)

    @traced_once_per_model  # each trainer's tf.function traces it once
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

    # ---- several replicas --------------------------------------------------------------------
    @traced_once_per_model  # each trainer's tf.function traces it once
    def _gradients(self, step: tf.Tensor, replica: tf.Tensor, x_global: tf.Tensor | None = None):
        """Replica `replica`'s gradients of its share of step `step`'s objective, and its terms;
        `x_global`: the step's streamed global batch (else gathered from memory)."""
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
        variables = self.model.trainable_variables
        # Keras all-reduces (sums) the replicas' gradients before the update.
        self.optimizer.apply_gradients(zip(gradients, variables, strict=True))
        self._term_sums.assign_add(terms)

    @traced_once_per_model  # each trainer's tf.function traces it once
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

    def current_learning_rate(self) -> float:
        return float(self.optimizer.learning_rate.numpy())

    def fit(self, on_chunk: Callable[[ChunkLog], None] | None = None,
            stop_requested: Callable[[], bool] = lambda: False) -> list[ChunkLog]:
        """Train from the current step to `config.steps`; call `on_chunk` after each call.

        Stops early, between calls, once `stop_requested()` is true (an interrupted run); with
        several workers, once it is true on any of them.
        """
        if self.workers is not None:
            # Only the chief restores checkpoints (the others may not see its disk): after a
            # resume the workers would otherwise start from different steps.
            self.workers.adopt_chief_values([*self.model.variables, self.step,
                                             *self.optimizer.variables])
        logs, n_terms = [], len(self.term_names)
        plan = call_plan(self.config, int(self.step.numpy()))
        blocks = (None if self.streamed is None else
                  iter(streamed_blocks(self.streamed, self.config, plan)))
        for _, n in plan:
            if self._stop(stop_requested):
                break
            learning_rate = self.current_learning_rate()
            started = time.perf_counter()
            # The first call compiles the step or loads it from the compiled-step cache.
            with cached_compilation() if not logs else contextlib.nullcontext():
                if blocks is None:
                    means = self._run(tf.constant(n)).numpy()
                else:
                    # The time waiting for a block counts: a slow disk shows in ms_per_step.
                    means = self._run(tf.constant(n), next(blocks)).numpy()
            log = ChunkLog(step=int(self.step.numpy()), steps=n,
                           seconds=time.perf_counter() - started, learning_rate=learning_rate,
                           terms=dict(zip(self.term_names, means[:n_terms].tolist(),
                                          strict=True)),
                           gradient_norms=dict(zip(self.gradient_names,
                                                   means[n_terms:].tolist(), strict=True)))
            # The objective and the gradient norms: a non-finite gradient leaves non-finite
            # weights even when this call's mean loss is finite, and those must not reach a
            # checkpoint. The other terms only monitor: objective `paper` trains on normalised
            # features, so its input-unit `reconstruction` may overflow float32 (features of
            # scale >~1e19) while training is sound; it is then reported as inf, once warned.
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
                overflowing = [name for name, value in log.terms.items()
                               if not np.isfinite(value)]
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
