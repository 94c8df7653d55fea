"""Which devices train and which process writes: `tf.distribute` strategies from the config.

`trainer.strategy`: `one_device` (TensorFlow's default: the first GPU if any, else the CPU),
`mirrored` (one replica per local GPU, or per logical CPU when `trainer.logical_cpus >= 2`),
`multi_worker` (the workers of the `TF_CONFIG` environment variable, each with its local GPUs or
its CPU), or `auto` (multi_worker when `TF_CONFIG` is set, mirrored with more than one GPU or
logical CPU, else one_device).

Devices are fixed once TensorFlow has initialised them: call `strategy_for` at the start of a
program (a sweep's jobs reuse its strategies). Only the chief writes (`writable_run_dir`).
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

import tensorflow as tf

from sgh.config import TrainerConfig
from sgh.errors import UserInputError

_strategies: dict[tuple, tf.distribute.Strategy] = {}


def resolve_strategy(config: TrainerConfig) -> str:
    """The concrete strategy name of `config.strategy` (resolves `auto`, see the module doc)."""
    if config.strategy != "auto":
        return config.strategy
    if os.environ.get("TF_CONFIG"):
        return "multi_worker"
    if config.logical_cpus >= 2 or len(tf.config.list_physical_devices("GPU")) > 1:
        return "mirrored"
    return "one_device"


def configure_logical_cpus(count: int) -> None:
    """Split the physical CPU into `count` logical devices (0 or 1: none), before TF starts."""
    if count < 2:
        return
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu)
    if current is not None and len(current) == count:
        return
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
    except RuntimeError as error:  # "Virtual devices cannot be modified after being initialized"
        have = len(tf.config.list_logical_devices("CPU"))
        raise UserInputError(
            f"trainer.logical_cpus={count} cannot take effect: TensorFlow already initialised "
            f"this process with {have} CPU device(s), and devices are fixed per process; accepted: "
            f"the same logical_cpus for every job of a sweep, or a new process ({error})"
        ) from None


def strategy_for(config: TrainerConfig) -> tf.distribute.Strategy:
    """The strategy `config` asks for, created on first use and reused within the process."""
    name = resolve_strategy(config)
    if name == "multi_worker" and config.logical_cpus >= 2:
        raise UserInputError(
            f"trainer.logical_cpus={config.logical_cpus} with trainer.strategy=multi_worker is "
            "not supported (each worker mirrors over its GPUs or its one CPU); accepted: "
            "logical_cpus=0 with multi_worker, or strategy=mirrored")
    if name == "multi_worker" and not os.environ.get("TF_CONFIG"):
        raise UserInputError("trainer.strategy=multi_worker needs the TF_CONFIG environment "
                             "variable (the cluster and this worker's task); see "
                             "docs/guide/devices.md")
    if name == "one_device":
        # Not cached: `get_strategy` answers with the strategy whose scope is open.
        if tf.distribute.has_strategy():
            raise ValueError("trainer.strategy=one_device inside another strategy's scope")
        return tf.distribute.get_strategy()
    key = (name, config.logical_cpus if name == "mirrored" else 0,
           os.environ.get("TF_CONFIG") if name == "multi_worker" else None)
    if key not in _strategies:
        _strategies[key] = _create(name, config.logical_cpus)
    return _strategies[key]


def _create(name: str, logical_cpus: int) -> tf.distribute.Strategy:
    if name == "mirrored":
        configure_logical_cpus(logical_cpus)
        kind = "CPU" if logical_cpus >= 2 else "GPU"
        devices = [device.name for device in tf.config.list_logical_devices(kind)] or None
        return tf.distribute.MirroredStrategy(devices)
    try:
        return tf.distribute.MultiWorkerMirroredStrategy()
    except RuntimeError as error:  # "Collective ops must be configured at program startup"
        raise UserInputError(
            "trainer.strategy=multi_worker must be set up before TensorFlow initialises; "
            "accepted: a process of its own per worker (not a sweep job after other jobs) "
            f"({error})") from None
    except (ValueError, KeyError) as error:
        raise UserInputError(f"TF_CONFIG={os.environ.get('TF_CONFIG')!r} is not a valid "
                             f"cluster description: {error}") from None


def is_multi_worker(strategy: tf.distribute.Strategy | None) -> bool:
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def is_chief(strategy: tf.distribute.Strategy | None) -> bool:
    """True for the process that writes: a single process, or task `chief` (else worker 0)."""
    if not is_multi_worker(strategy):
        return True
    resolver = strategy.cluster_resolver
    if resolver.task_type in (None, "chief"):
        return True
    return resolver.task_type == "worker" and resolver.task_id == 0 and "chief" not in (
        resolver.cluster_spec().as_dict())


@contextmanager
def writable_run_dir(run_dir: str | os.PathLike, strategy: tf.distribute.Strategy | None):
    """`run_dir` for the chief, else a temporary directory, deleted on exit."""
    if is_chief(strategy):
        yield Path(run_dir)
        return
    resolver = strategy.cluster_resolver
    with tempfile.TemporaryDirectory(prefix=f"sgh-{resolver.task_type}{resolver.task_id}-",
                                     ignore_cleanup_errors=True) as scratch:
        yield Path(scratch)


def tf_config(workers: list[str], index: int) -> str:
    """The `TF_CONFIG` value of worker `index` of a cluster of `host:port` workers (worker 0 is
    the chief), e.g. tf_config(["10.0.0.1:12345", "10.0.0.2:12345"], 1)."""
    return json.dumps({"cluster": {"worker": list(workers)},
                       "task": {"type": "worker", "index": index}})


class Workers:
    """What the workers of a multi-worker run agree on between compiled calls."""

    def __init__(self, strategy: tf.distribute.Strategy):
        self.strategy = strategy

    def adopt_chief_values(self, variables: list) -> None:
        """Set every (mirrored) variable to its value on the chief (replica 0), on every worker."""
        # A Keras variable (the optimizer's) wraps a tf.Variable, its `value`.
        variables = [v if isinstance(v, tf.Variable) else v.value for v in variables]

        def chief_values():
            context = tf.distribute.get_replica_context()
            on_chief = tf.equal(context.replica_id_in_sync_group, 0)
            masked = [tf.where(on_chief, v.read_value(), tf.zeros_like(v.read_value()))
                      for v in variables]
            values = list(masked)
            for dtype in {value.dtype for value in masked}:
                where = [i for i, value in enumerate(masked) if value.dtype == dtype]
                reduced = context.all_reduce(tf.distribute.ReduceOp.SUM, [masked[i] for i in where])
                for i, value in zip(where, reduced, strict=True):
                    values[i] = value
            return values

        @tf.function(autograph=False)
        def adopt():
            values = self.strategy.run(chief_values)
            for variable, value in zip(variables, values, strict=True):
                variable.assign(self.strategy.experimental_local_results(value)[0])

        adopt()

    def any(self, flag: bool) -> bool:
        """Whether `flag` is true on any worker."""
        total = self.strategy.experimental_local_results(
            self._sum_over_replicas(tf.constant(float(flag))))[0]
        return bool(total.numpy() > 0)

    @tf.function(autograph=False)
    def _sum_over_replicas(self, value: tf.Tensor):
        return self.strategy.run(lambda local: tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.SUM, tf.identity(local)), args=(value,))
