"""Which items each training step draws, and the tf.data pipeline that reads them from disk.

Step t's batch is `batch_size` indices drawn uniformly with replacement (as the released demo
does) by a stateless RNG keyed by (seed, 2t) (the neuron's noise: (seed, 2t + 1)), so a run's
data order depends on the seed and the step alone, in memory or streamed (`streamed_blocks`).
Uniform draws, not a shuffle buffer over a sequential read: a file stored in some order stays
locally ordered under a buffer, whose state a resume would need.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from sgh.config import TrainerConfig
from sgh.data.streamed_features import StreamedFeatures
from sgh.model.sgh_model import RNG_ALGORITHM

# Calls whose batches are read concurrently, and ready blocks kept ahead of the training loop.
PARALLEL_READS = 2
PREFETCH_BLOCKS = 1
# Blocks in memory at most: those being read, the ready one, and the one being trained on.
BLOCKS_IN_MEMORY = PARALLEL_READS + PREFETCH_BLOCKS + 1


def batch_ids(seed: tf.Tensor, step: tf.Tensor, batch_size: int, n_train: int) -> tf.Tensor:
    """Step `step`'s batch: (batch_size,) int32 indices into the training set."""
    return tf.random.stateless_uniform(
        [batch_size], seed=tf.stack([tf.cast(seed, tf.int64), 2 * step]), maxval=n_train,
        dtype=tf.int32, alg=RNG_ALGORITHM)


def call_plan(config: TrainerConfig, first_step: int) -> list[tuple[int, int]]:
    """(first step, number of steps) of each compiled call from `first_step` to the end."""
    return [(start, min(config.steps_per_call, config.steps - start))
            for start in range(first_step, config.steps, config.steps_per_call)]


def block_bytes(config: TrainerConfig, dim: int) -> int:
    """Bytes of one call's block of training features."""
    return config.steps_per_call * config.batch_size * dim * 4


def streamed_blocks(rows: StreamedFeatures, config: TrainerConfig,
                    plan: list[tuple[int, int]]) -> tf.data.Dataset:
    """One float32 block (steps, batch_size, d) per call of `plan`; BLOCKS_IN_MEMORY at most."""
    plan = np.array(plan, np.int64).reshape(-1, 2)
    n_train, dim, batch_size = len(rows), rows.shape[1], config.batch_size

    def ids_of_call(call):
        steps = call[0] + tf.range(call[1])
        return tf.map_fn(lambda step: batch_ids(config.seed, step, batch_size, n_train), steps,
                         fn_output_signature=tf.TensorSpec([batch_size], tf.int32))

    def read(ids: np.ndarray) -> np.ndarray:
        return rows.take(ids.reshape(-1)).reshape(ids.shape + (dim,))

    def read_block(ids):
        block = tf.numpy_function(read, [ids], tf.float32, stateful=False)
        return tf.ensure_shape(block, [None, batch_size, dim])

    return (tf.data.Dataset.from_tensor_slices(plan)
            .map(ids_of_call)
            .map(read_block, num_parallel_calls=PARALLEL_READS, deterministic=True)
            .prefetch(PREFETCH_BLOCKS))
