"""The training loop: schedules reach the optimizer, runs are reproducible, configs matter."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

from sgh.config import ModelConfig, TrainerConfig
from sgh.model.sgh_model import SGH
from sgh.training.loop import Trainer, TrainingDiverged, median_ms_per_step

X = np.random.default_rng(0).normal(size=(300, 16)).astype(np.float32)


def _train(model_config=None, jit_compile=False, **trainer_overrides):
    # one_device: `auto` would mirror over the GPUs of a machine with several (test_distributed).
    config = TrainerConfig(**{"steps": 40, "batch_size": 32, "steps_per_call": 10,
                              "learning_rate": 0.01, "strategy": "one_device",
                              "jit_compile": jit_compile, **trainer_overrides})
    model = SGH.from_training_data(model_config or ModelConfig(bits=8), X, seed=config.seed)
    trainer = Trainer(model, X, config)
    return trainer, trainer.fit()


def _weights(trainer):
    return {v.name: v.numpy().copy() for v in trainer.model.trainable_variables}


def test_step_schedule_reaches_the_optimizer():
    # decay_rate = 0 makes the rate exactly 0 from step 20 on: if the schedule reaches the
    # optimizer the weights stop moving there; with the constant rate they keep moving.
    trainer, logs = _train(steps=20, schedule="step", decay_every=20, decay_rate=0.0)
    frozen = _weights(trainer)
    trainer.config.steps = 40
    later = trainer.fit()
    assert [log.learning_rate for log in logs] == pytest.approx([0.01, 0.01])
    assert [log.learning_rate for log in later] == [0.0, 0.0]
    for name, value in _weights(trainer).items():
        np.testing.assert_array_equal(value, frozen[name])

    constant, _ = _train(steps=20)
    before = _weights(constant)
    constant.config.steps = 40
    constant.fit()
    assert any(np.any(value != before[name]) for name, value in _weights(constant).items())


def test_cosine_schedule_decays_to_zero():
    _, logs = _train(steps=40, schedule="cosine")
    rates = [log.learning_rate for log in logs]
    assert rates[0] == pytest.approx(0.01)
    assert all(a > b for a, b in zip(rates, rates[1:], strict=False))


def test_same_seed_same_weights_whatever_the_grouping_of_steps():
    a, _ = _train(steps_per_call=10)
    b, _ = _train(steps_per_call=7)  # 7 + 7 + ... + 5: same steps, other call boundaries
    for name, value in _weights(a).items():
        np.testing.assert_array_equal(value, _weights(b)[name])


def test_fit_stops_between_calls_once_asked_and_a_later_fit_carries_on_exactly():
    # What early stopping (validation.patience) and Ctrl-C rely on: the request is read before
    # each compiled call, so training ends on the call boundary where it became true, at no
    # cost to the weights: carried on later, the run ends as an unstopped one does.
    config = TrainerConfig(steps=40, batch_size=32, steps_per_call=10, learning_rate=0.01,
                           strategy="one_device", jit_compile=False)
    trainer = Trainer(SGH.from_training_data(ModelConfig(bits=8), X, seed=config.seed), X,
                      config)
    stopped = trainer.fit(stop_requested=lambda: int(trainer.step.numpy()) >= 20)
    assert [log.step for log in stopped] == [10, 20] and int(trainer.step.numpy()) == 20
    assert [log.step for log in trainer.fit()] == [30, 40]
    unstopped, _ = _train()
    for name, value in _weights(unstopped).items():
        np.testing.assert_array_equal(value, _weights(trainer)[name])


def test_xla_and_graph_paths_learn_alike():
    # Not bit-for-bit: XLA draws stateless random numbers from a runtime seed with its own
    # kernel (another stream than the graph executor's), and its float32 sigmoid differs by a
    # few ulp. Runs are reproducible for a given trainer.jit_compile; both settings must learn.
    a, logs_a = _train(jit_compile=True, steps=200, steps_per_call=50)
    b, logs_b = _train(jit_compile=False, steps=200, steps_per_call=50)
    assert logs_a[-1].terms["total"] == pytest.approx(logs_b[-1].terms["total"], rel=0.02)
    assert logs_a[-1].terms["total"] < 0.95 * logs_a[0].terms["total"]


def test_seed_changes_the_run():
    a, _ = _train(seed=0)
    b, _ = _train(seed=1)
    assert np.any(_weights(a)["W:0"] != _weights(b)["W:0"])


@pytest.mark.parametrize("field, other", [("noise", "fixed"), ("gradient_estimator", "unbiased"),
                                          ("init", "released")])
def test_model_options_change_training(field, other):
    base, _ = _train()
    changed, _ = _train(model_config=ModelConfig(bits=8, **{field: other}))
    assert np.any(_weights(base)["W:0"] != _weights(changed)["W:0"])


def test_logs_report_loss_terms_and_timing():
    trainer, logs = _train()
    assert trainer.replicas == 1 and not trainer.replicated  # the single-device XLA path
    assert [log.step for log in logs] == [10, 20, 30, 40]
    assert set(logs[0].terms) == {"total", "reconstruction", "gaussian_nll", "kl", "rho"}
    assert median_ms_per_step(logs) > 0
    assert logs[-1].terms["total"] < logs[0].terms["total"]  # it learns


def test_a_diverging_loss_stops_with_the_step_and_the_last_finite_loss():
    # A sane first call, then an absurd rate: the loss overflows within the next call.
    trainer, logs = _train(steps=10)
    trainer.optimizer.learning_rate.assign(1e12)
    trainer.config.steps = 100
    with pytest.raises(TrainingDiverged, match=r"between steps 11 and 20; last finite loss "):
        trainer.fit()


def test_an_aligned_training_set_is_adopted_not_copied_and_trains_to_the_same_weights():
    from sgh.data.aligned import aligned_empty, is_aligned

    adopted = aligned_empty(X.shape)
    adopted[...] = X
    copied = aligned_empty((X.size + 1,))[1:].reshape(X.shape)  # 4 bytes off the boundary
    copied[...] = X
    assert is_aligned(adopted) and not is_aligned(copied) and copied.flags.c_contiguous
    config = TrainerConfig(steps=20, batch_size=32, steps_per_call=10, strategy="one_device",
                           jit_compile=False)
    trainers = {}
    for name, x in (("adopted", adopted), ("copied", copied)):
        model = SGH.from_training_data(ModelConfig(bits=8), x, seed=0)
        trainers[name] = Trainer(model, x, config)
    # The adopted set is the array's own memory (no second copy of the training set); the
    # copied one is TensorFlow's.
    original, changed = X[0, 0], X[0, 0] + np.float32(1)
    adopted[0, 0] = copied[0, 0] = changed
    assert trainers["adopted"].data[0, 0].numpy() == changed
    assert trainers["copied"].data[0, 0].numpy() == original
    adopted[0, 0], copied[0, 0] = original, original
    for trainer in trainers.values():
        trainer.fit()
    for a, b in zip(_weights(trainers["adopted"]).values(),
                    _weights(trainers["copied"]).values(), strict=True):
        np.testing.assert_array_equal(a, b)
