"""tf.distribute training: mirrored replicas compute the single-device run, the strategy follows
the config, and with several workers only the chief writes.

Device configuration (logical CPUs, collective ops) is fixed per process and this test process
has initialised TensorFlow already, so runs on several devices happen in subprocesses.
"""

import json
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from sgh.config import ModelConfig, TrainerConfig, validate
from sgh.errors import UserInputError
from sgh.model.sgh_model import SGH
from sgh.training.devices import (
    configure_logical_cpus,
    is_chief,
    resolve_strategy,
    tf_config,
    writable_run_dir,
)
from sgh.training.loop import Trainer, replica_share
from tests.helpers import quick
from tests.helpers_vector_files import write_texmex

X = np.random.default_rng(0).normal(size=(400, 16)).astype(np.float32)
RELEASED = ModelConfig(bits=8, objective="released", noise="fixed", init="released",
                       normalization="none")


def _python(script: str, env: dict | None = None, timeout: int = 300, args=()):
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args],
                            capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, **(env or {})})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


# Trains one device and mirrored on 2 logical CPUs from the same seed, for both objectives (the
# released one sums over the batch and needs its weight decay counted once, see replica_share);
# the paper objective with XLA (the default), the released one without (compiling costs seconds).
# Then mirrored again on a training set streamed from the file argv[1] against the same rows in
# memory: each replica slices the streamed global batch as it slices the gathered one. (Device
# layout is fixed per process: one subprocess for all of it.)
MIRRORED_AGAINST_ONE_DEVICE = """
    import json, sys
    import numpy as np
    from sgh.config import ModelConfig, TrainerConfig
    from sgh.data.streamed_features import StreamedFeatures
    from sgh.data.feature_conversion import read_float32
    from sgh.data.vector_files import open_vectors
    from sgh.training.devices import strategy_for
    from sgh.errors import UserInputError
    from sgh.model.sgh_model import SGH
    from sgh.training.loop import Trainer

    x = np.random.default_rng(0).normal(size=(3000, 32)).astype(np.float32)
    # (model, XLA, steps, steps per call). The deep model for 10 steps: its sampled bits make
    # a long run chaotic (a bit within rounding of its threshold flips under the other
    # summation order, and the runs part: 120 steps saw 0.2 % of the final codes differ),
    # while a wrong share of its batch or objective shows from the first step.
    models = {"paper": (ModelConfig(bits=16), True, 120, 40),
              "released": (ModelConfig(bits=16, objective="released", noise="fixed",
                                       init="released", normalization="none"), False, 120, 40),
              "deep": (ModelConfig(bits=16, encoder="mlp", decoder="mlp", encoder_hidden=[32],
                                   decoder_hidden=[32], gradient_estimator="unbiased"),
                       False, 10, 5)}
    out = {}
    for objective, (model_config, jit_compile, steps, per_call) in models.items():
        for name, cpus in (("mirrored", 2), ("one_device", 0)):
            config = TrainerConfig(steps=steps, batch_size=100, steps_per_call=per_call,
                                   strategy=name, logical_cpus=cpus, jit_compile=jit_compile)
            strategy = strategy_for(config)
            with strategy.scope():
                model = SGH.from_training_data(model_config, x, seed=0)
            trainer = Trainer(model, x, config, strategy)
            initial = {v.name: v.numpy().tolist() for v in model.trainable_variables}
            initial_codes = model.encode_bits(x).numpy().tolist()
            logs = trainer.fit()
            out[f"{objective}/{name}"] = {
                "replicas": trainer.replicas, "terms": [log.terms for log in logs],
                "initial_weights": initial, "initial_codes": initial_codes,
                "weights": {v.name: v.numpy().tolist() for v in model.trainable_variables},
                "codes": model.encode_bits(x).numpy().tolist()}
    strategy = strategy_for(TrainerConfig(strategy="mirrored", logical_cpus=2))
    try:  # the global batch must split evenly
        with strategy.scope():
            model = SGH.from_training_data(ModelConfig(bits=8), x, seed=0)
        Trainer(model, x, TrainerConfig(batch_size=99, strategy="mirrored", logical_cpus=2),
                strategy)
    except UserInputError as error:
        out["uneven_batch_error"] = str(error)
    try:  # a model built outside the strategy's scope has no mirrored variables
        Trainer(SGH.from_training_data(ModelConfig(bits=8), x, seed=0), x,
                TrainerConfig(strategy="mirrored", logical_cpus=2), strategy)
    except ValueError as error:
        out["outside_scope_error"] = str(error)

    vectors = open_vectors(sys.argv[1])
    config = TrainerConfig(steps=90, batch_size=40, steps_per_call=30, strategy="mirrored",
                           logical_cpus=2)
    for name, rows in (("in_memory", read_float32(vectors)[0]),
                       ("streamed", StreamedFeatures(vectors))):
        with strategy.scope():
            model = SGH.from_training_data(ModelConfig(bits=8), rows, seed=0)
        trainer = Trainer(model, rows, config, strategy)
        logs = trainer.fit()
        out[f"from_file/{name}"] = {"replicas": trainer.replicas,
                                    "terms": [log.terms for log in logs],
                                    "W": model.W.numpy().tolist()}
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def mirrored_runs(tmp_path_factory):
    rows = np.random.default_rng(0).normal(3.0, 2.0, (1000, 12)).astype(np.float32)
    path = write_texmex(tmp_path_factory.mktemp("stream") / "x.fvecs", rows)
    # Every step compiled here, in this process's device layout: an executable from the
    # compile cache was compiled by another process (other threads, no logical CPUs), and
    # parallel loops split as they were split there, which moves the rounding compared.
    return _python(MIRRORED_AGAINST_ONE_DEVICE, env={"SGH_COMPILE_CACHE": "off"},
                   args=[str(path)])


# Slow: the module's mirrored runs are two processes training three models (~25 s).
@pytest.mark.slow
def test_mirrored_training_streams_too(mirrored_runs):
    streamed, in_memory = mirrored_runs["from_file/streamed"], mirrored_runs["from_file/in_memory"]
    assert streamed["replicas"] == in_memory["replicas"] == 2
    assert streamed["terms"] == in_memory["terms"]
    assert streamed["W"] == in_memory["W"]


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["paper", "released", "deep"])
def test_mirrored_on_two_logical_cpus_equals_one_device(mirrored_runs, objective):
    mirrored = mirrored_runs[f"{objective}/mirrored"]
    single = mirrored_runs[f"{objective}/one_device"]
    assert (mirrored["replicas"], single["replicas"]) == (2, 1)
    # Same global batch and noise per step, slices on two replicas, gradients all-reduced: the
    # loss terms of every call and the final weights agree to float32 rounding, as amplified by
    # the steps that follow it: the terms are held to the weights' bound, 1e-4 relative (CI saw
    # the deep model's reconstruction move by 1.1e-5 after its last call). The rounding of the
    # summed gradients moves every term by a fraction of the *total* loss, so a small term (the
    # deep model's KL, 0.15 of 45) is held to that scale: a relative bound on it alone is noise.
    # A wrong share of the batch or of the objective moves the terms by far more (percents).
    for got, want in zip(mirrored["terms"], single["terms"], strict=True):
        assert got == pytest.approx(want, rel=1e-4, abs=2e-5 * abs(want["total"]))
    # atol 1e-4: log_rho sits near 0, where only an absolute bound means anything (1e-4 in
    # log rho is rho to 1e-4). The deep model's weights are held to 5 % of how far training
    # moved them: in its 10 steps a rare flipped bit (see the script) moves a few weights by a
    # learning-rate step, while a wrong slice of the batch moves them all by about as much as
    # training does.
    for name, value in mirrored["weights"].items():
        want = np.asarray(single["weights"][name])
        if objective == "deep":
            moved = np.linalg.norm(want - np.asarray(single["initial_weights"][name]))
            gap = np.linalg.norm(np.asarray(value) - want)
            assert gap <= 0.05 * moved + 1e-6, (name, gap, moved)
        else:
            np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-4)
    codes_differ = np.mean(np.not_equal(mirrored["codes"], single["codes"]))
    if objective == "deep":
        # Held like its weights: to 5 % of the bits its training flipped (CI saw 0.10 % differ).
        trained_away = np.mean(np.not_equal(single["codes"], single["initial_codes"]))
        assert codes_differ <= 0.05 * trained_away, (codes_differ, trained_away)
    else:
        assert codes_differ < 0.001


@pytest.mark.slow
def test_mirrored_refuses_an_uneven_batch_and_an_unmirrored_model(mirrored_runs):
    assert mirrored_runs["uneven_batch_error"] == (
        "trainer.batch_size=99 does not split evenly over 2 replicas; accepted: a multiple of 2")
    assert "build the model inside strategy.scope()" in mirrored_runs["outside_scope_error"]


@pytest.mark.parametrize("model_config", [ModelConfig(bits=8), RELEASED],
                         ids=["paper", "released"])
@pytest.mark.parametrize("replicas", [2, 4])
def test_replica_shares_add_up_to_the_global_batch(model_config, replicas):
    # The objective of R slices, each rescaled by replica_share, sums to the objective of the
    # whole batch, and the reported terms average to its terms (what the all-reduces compute).
    model = SGH.from_training_data(model_config, X, seed=0)
    x, epsilon = X[:40], tf.random.stateless_uniform([40, 8], seed=[1, 2])
    whole = model.loss_terms(x, epsilon)
    local = 40 // replicas
    shares = [replica_share(model.loss_terms(x[r * local:(r + 1) * local],
                                             epsilon[r * local:(r + 1) * local]),
                            replicas, local) for r in range(replicas)]
    assert sum(float(s["objective"]) for s in shares) == pytest.approx(
        float(model.objective(whole)), rel=1e-5)
    for name, value in whole.items():
        if name != "total_sum":
            assert np.mean([float(s[name]) for s in shares]) == pytest.approx(float(value),
                                                                                rel=1e-5)


def test_mirrored_path_on_one_replica_equals_the_fast_path():
    # The distributed code (strategy.run per step, all-reduce, update) with a single replica, in
    # this process: the same run as the single-device loop (graph mode: compiling costs seconds).
    config = TrainerConfig(steps=60, batch_size=50, steps_per_call=20, strategy="one_device",
                           jit_compile=False)
    fast = Trainer(SGH.from_training_data(ModelConfig(bits=8), X, seed=0), X, config)
    fast_logs = fast.fit()
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        model = SGH.from_training_data(ModelConfig(bits=8), X, seed=0)
    mirrored = Trainer(model, X, config, strategy)
    logs = mirrored.fit()
    assert mirrored.replicated and mirrored.replicas == 1 and not fast.replicated
    for got, want in zip(logs, fast_logs, strict=True):
        assert got.terms == pytest.approx(want.terms, rel=1e-5)
    np.testing.assert_allclose(model.W.numpy(), fast.model.W.numpy(), rtol=1e-4, atol=1e-6)


def test_auto_strategy(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: [] if kind == "GPU" else ["CPU"])
    assert resolve_strategy(TrainerConfig()) == "one_device"
    assert resolve_strategy(TrainerConfig(logical_cpus=2)) == "mirrored"
    assert resolve_strategy(TrainerConfig(strategy="one_device", logical_cpus=2)) == "one_device"
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: ["GPU:0", "GPU:1"] if kind == "GPU" else ["CPU"])
    assert resolve_strategy(TrainerConfig()) == "mirrored"
    monkeypatch.setenv("TF_CONFIG", tf_config(["127.0.0.1:1", "127.0.0.1:2"], 1))
    assert resolve_strategy(TrainerConfig()) == "multi_worker"
    assert json.loads(os.environ["TF_CONFIG"])["task"] == {"type": "worker", "index": 1}


def test_strategy_settings_are_validated():
    from sgh.config import Config, SyntheticDatasetConfig

    def config(**trainer):
        return Config(dataset=SyntheticDatasetConfig(), model=ModelConfig(),
                      trainer=TrainerConfig(**trainer))

    validate(config(strategy="mirrored", logical_cpus=2))
    with pytest.raises(UserInputError, match=r"^trainer.strategy='mirored' is not known; "
                                             r"accepted: auto, one_device, mirrored, multi_wo"):
        validate(config(strategy="mirored"))
    with pytest.raises(UserInputError, match=r"^trainer.logical_cpus=-1 is impossible"):
        validate(config(logical_cpus=-1))


def test_logical_cpus_cannot_change_once_tensorflow_has_started():
    tf.constant(1.0) + 1.0  # make sure this process's devices are initialised
    have = len(tf.config.list_logical_devices("CPU"))
    with pytest.raises(UserInputError, match=rf"^trainer.logical_cpus={have + 1} cannot take "
                                             rf"effect: TensorFlow already initialised this "
                                             rf"process with {have} CPU device"):
        configure_logical_cpus(have + 1)
    configure_logical_cpus(0)  # 0 and 1 leave the CPU as it is
    configure_logical_cpus(1)


def test_a_single_process_writes_its_own_run_directory(tmp_path):
    strategy = tf.distribute.get_strategy()
    assert is_chief(strategy)
    with writable_run_dir(tmp_path, strategy) as path:
        assert path == tmp_path


# ---- several workers: two processes on this machine -----------------------------------------
QUICK = quick("trainer.steps=200", "trainer.steps_per_call=50", "trainer.strategy=multi_worker")
ARTIFACTS = ("config.yaml", "codes.npz", "metrics.json", "checkpoints", "tensorboard")


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _run_workers(run_dirs, workers):
    processes = [subprocess.Popen(
        [sys.executable, "-m", "sgh.cli.train", *QUICK, f"hydra.run.dir={run_dir}"],
        env={**os.environ, "TF_CONFIG": tf_config(workers, index)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for index, run_dir in enumerate(run_dirs)]
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=600))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    for process, (_, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err[-3000:]
    return [out for out, _ in outputs]


@pytest.mark.slow
def test_two_workers_train_together_and_only_the_chief_writes(tmp_path):
    run_dirs = [tmp_path / "chief", tmp_path / "worker"]  # as if on two machines
    workers = [f"127.0.0.1:{port}" for port in _free_ports(2)]
    _run_workers(run_dirs, workers)
    chief, worker = run_dirs
    for name in ARTIFACTS:
        assert (chief / name).exists(), name
        assert not (worker / name).exists(), name
    metrics = json.loads((chief / "metrics.json").read_text())
    assert metrics["replicas"] == 2 and metrics["steps"] == 200

    # The same commands again: the chief resumes from its last checkpoint (step 200), the other
    # worker, which kept nothing, takes the chief's state, and both finish at once.
    outputs = _run_workers(run_dirs, [f"127.0.0.1:{port}" for port in _free_ports(2)])
    assert "resuming from step 200" in outputs[0]
    assert not (worker / "metrics.json").exists()
