"""The SGH model: the estimator recipes (docs/design.md, Estimators), normalisation, encoding.

Recipes 1, 2 and 6 concern the neuron alone and live in test_ops.py.
"""

import itertools
import logging
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from sgh.config import ModelConfig
from sgh.model.encoding import encode_packed
from sgh.model.ops import doubly_sn
from sgh.model.sgh_model import SGH, unbiased_correction


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _quadratic_problem(bits=4, dim=6, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=bits), rng.normal(size=(bits, dim)), rng.normal(size=dim), 0.7)


def _estimator_gradient(z, U, x, rho, h, estimator):
    """d/dz of 1/2 ||x - hU||^2 / rho^2 through the neuron, with h forced to the given codes.

    `h` is one code (l,) or a batch (M, l): each row is an independent draw. epsilon = 1 - h
    forces the code: h = 1 needs p >= 0 (always), h = 0 needs p < 1.
    """
    h = np.asarray(h, np.float64)
    z = tf.constant(np.broadcast_to(z, h.shape), tf.float64)
    U, x = tf.constant(U, tf.float64), tf.constant(x, tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(z)
        codes, _ = doubly_sn(z, tf.constant(1.0 - h))
        residual = x - tf.reshape(tf.matmul(tf.reshape(codes, [-1, len(U)]), U), [*h.shape[:-1],
                                                                                   -1])
        loss = 0.5 * tf.reduce_sum(tf.square(residual)) / rho**2
        if estimator == "unbiased":
            loss += unbiased_correction(codes, tf.reduce_sum(tf.square(U), axis=1) / rho**2)
    np.testing.assert_array_equal(codes.numpy(), h)
    return tape.gradient(loss, z).numpy()


def _exact_gradient_by_enumeration(z, U, x, rho):
    """grad_z E_q[loss] = sum_h loss(h) grad_z q(h), over all 2^l codes (float64)."""
    p = _sigmoid(z)
    gradient = np.zeros_like(z)
    for h in itertools.product((0.0, 1.0), repeat=len(z)):
        h = np.array(h)
        q = np.prod(np.where(h == 1, p, 1 - p))
        loss = 0.5 * np.sum((x - h @ U) ** 2) / rho**2
        # d q / d z_k = q * (h_k - p_k)   (log-derivative of a Bernoulli in its logit)
        gradient += loss * q * (h - p)
    return gradient


def _expected_estimator(z, U, x, rho, estimator):
    """E_q[estimator] exactly: the estimator is a deterministic function of the sampled code."""
    p = _sigmoid(z)
    expectation = np.zeros_like(z)
    for h in itertools.product((0.0, 1.0), repeat=len(z)):
        h = np.array(h)
        q = np.prod(np.where(h == 1, p, 1 - p))
        expectation += q * _estimator_gradient(z, U, x, rho, h, estimator)
    return expectation


def test_recipe4_unbiased_estimator_is_exact_and_approximate_bias_is_closed_form():
    z, U, x, rho = _quadratic_problem()
    exact = _exact_gradient_by_enumeration(z, U, x, rho)
    p = _sigmoid(z)
    np.testing.assert_allclose(_expected_estimator(z, U, x, rho, "unbiased"), exact, atol=1e-10)
    # E[approx] - exact = sigma'(z) (p - 1/2) ||u_k||^2 / rho^2   (docs/design.md, Estimators)
    bias = p * (1 - p) * (p - 0.5) * np.sum(U**2, axis=1) / rho**2
    np.testing.assert_allclose(_expected_estimator(z, U, x, rho, "approximate") - exact, bias,
                               atol=1e-10)
    assert np.max(np.abs(bias)) > 1e-3  # the check above is not vacuous


def test_recipe4_monte_carlo_mean_of_unbiased_estimator_matches_enumeration():
    z, U, x, rho = _quadratic_problem(bits=3, dim=5, seed=1)
    exact = _exact_gradient_by_enumeration(z, U, x, rho)
    rng = np.random.default_rng(2)
    draws = 20000
    codes = (rng.uniform(size=(draws, len(z))) <= _sigmoid(z)) * 1.0  # h ~ q(h|x)
    samples = _estimator_gradient(z, U, x, rho, codes, "unbiased")
    tolerance = 4 * samples.std(axis=0) / np.sqrt(draws)  # CLT: 4 standard errors
    assert np.all(np.abs(samples.mean(axis=0) - exact) <= tolerance)


def test_recipe3_linear_loss_gives_c_sigma_prime_for_both_estimators():
    rng = np.random.default_rng(3)
    z, c = rng.normal(size=5), rng.normal(size=5)
    for epsilon in (rng.uniform(size=5), np.full(5, 0.5)):
        for estimator in ("approximate", "unbiased"):
            zt = tf.constant(z)
            with tf.GradientTape() as tape:
                tape.watch(zt)
                h, _ = doubly_sn(zt, tf.constant(epsilon))
                loss = tf.reduce_sum(c * h)
                if estimator == "unbiased":
                    # A linear loss has ||a_k|| = 0 in the Gaussian form: no correction.
                    loss += unbiased_correction(h, tf.zeros(5, tf.float64))
            p = _sigmoid(z)
            np.testing.assert_allclose(tape.gradient(loss, zt).numpy(), c * p * (1 - p),
                                       rtol=1e-12)


def test_recipe5_closed_form_difference_equals_brute_force():
    # dL/dh with the correction is Delta_k = L(h_k = 1) - L(h_k = 0), for random codes.
    rng = np.random.default_rng(4)
    U, x, rho = rng.normal(size=(5, 7)), rng.normal(size=7), 1.3

    def loss(h):
        return 0.5 * np.sum((x - h @ U) ** 2) / rho**2

    for _ in range(10):
        h = (rng.uniform(size=5) < 0.5) * 1.0
        ht = tf.constant(h)
        with tf.GradientTape() as tape:
            tape.watch(ht)
            value = 0.5 * tf.reduce_sum(tf.square(x - tf.linalg.matvec(U, ht, transpose_a=True)))
            value = value / rho**2 + unbiased_correction(ht, np.sum(U**2, axis=1) / rho**2)
        brute = [loss(np.where(np.arange(5) == k, 1.0, h)) - loss(np.where(np.arange(5) == k,
                                                                          0.0, h))
                 for k in range(5)]
        np.testing.assert_allclose(tape.gradient(value, ht).numpy(), brute, rtol=1e-10)
        assert value.numpy() == pytest.approx(loss(h), rel=1e-12)  # the correction adds 0


def _model(objective="paper", estimator="unbiased", bits=4, dim=6, seed=0):
    config = ModelConfig(bits=bits, objective=objective, gradient_estimator=estimator,
                         noise="uniform" if objective == "paper" else "fixed",
                         normalization="isotropic" if objective == "paper" else "none",
                         init="random" if objective == "paper" else "released")
    x = np.random.default_rng(seed).normal(3.0, 2.0, size=(40, dim)).astype(np.float32)
    return SGH.from_training_data(config, x, seed=seed), x


def test_model_gradient_matches_closed_form_estimator():
    # The model's d total / d b for one item, with the code forced, is
    # sigma'(z) (Delta_k / rho^2-scaled) + d KL / d z: checked against numpy in float32.
    model, x = _model()
    item = x[:1]
    h = np.array([[1.0, 0.0, 1.0, 0.0]], np.float32)
    with tf.GradientTape() as tape:
        terms = model.loss_terms(tf.constant(item), tf.constant(1.0 - h))
    grad_b = tape.gradient(model.objective(terms), model.b).numpy()

    xn = (item - model.mean.numpy()) / model.scale.numpy()
    z = (xn @ model.W.numpy() + model.b.numpy())[0]
    p = _sigmoid(z.astype(np.float64))
    U, c, rho2 = model.U.numpy(), model.c.numpy(), np.exp(2 * model.log_rho.numpy())

    def reconstruction(code):
        return 0.5 * np.sum((xn[0] - code @ U - c) ** 2) / rho2

    delta = np.array([reconstruction(np.where(np.arange(4) == k, 1.0, h[0]))
                      - reconstruction(np.where(np.arange(4) == k, 0.0, h[0])) for k in range(4)])
    theta = _sigmoid(model.prior_logits.numpy().astype(np.float64))
    # d KL / d z = sigma'(z) (log(p / (1 - p)) - log(theta / (1 - theta)))
    d_kl = p * (1 - p) * (np.log(p / (1 - p)) - np.log(theta / (1 - theta)))
    np.testing.assert_allclose(grad_b, p * (1 - p) * delta + d_kl, rtol=2e-4, atol=1e-6)


@pytest.mark.parametrize("objective, term_to_variables", [
    ("paper", {"gaussian_nll": {"W", "b", "U", "c", "log_rho"},
               "kl": {"W", "b", "prior_logits"}}),
    ("released", {"reconstruction": {"W", "b", "U", "s", "m"},
                  "bce": {"W", "b"},
                  "weight_decay": {"W", "U"}}),
])
def test_recipe7_every_loss_term_reaches_its_parameters(objective, term_to_variables):
    model, x = _model(objective=objective, estimator="approximate")
    variables = {v.name.split(":")[0]: v for v in model.trainable_variables}
    rng = np.random.default_rng(5)
    epsilon = tf.constant(rng.uniform(size=(len(x), model.bits)), tf.float32)
    with tf.GradientTape(persistent=True) as tape:
        terms = model.loss_terms(tf.constant(x), epsilon)
        objective_value = model.objective(terms)
    for term, expected in term_to_variables.items():
        gradients = tape.gradient(terms[term], list(variables.values()))
        reached = {name for name, g in zip(variables, gradients, strict=True)
                   if g is not None and np.any(g.numpy() != 0)}
        assert reached == expected, term
    # Nothing is dropped on the way to the optimizer: the objective's gradient is the sum of the
    # terms' (scaled to the objective's batch sum for `released`).
    scale = len(x) if objective == "released" else 1.0
    parts = [tape.gradient(terms[t], model.W) for t in term_to_variables]
    total = sum(p.numpy() for p in parts if p is not None) * scale
    np.testing.assert_allclose(tape.gradient(objective_value, model.W).numpy(), total,
                               rtol=1e-4, atol=1e-6)


def test_isotropic_normalisation_uses_one_global_scale_and_keeps_neighbours():
    model, x = _model()
    xn = (x - model.mean.numpy()) / model.scale.numpy()
    np.testing.assert_allclose(xn.mean(axis=0), 0, atol=1e-5)
    assert np.mean(xn**2) == pytest.approx(1.0, rel=1e-5)  # RMS of centred coordinates is 1
    # One scale for every dimension: distances are scaled, never reordered.
    d_raw = np.sum((x[0] - x[1:]) ** 2, axis=1)
    d_norm = np.sum((xn[0] - xn[1:]) ** 2, axis=1)
    np.testing.assert_array_equal(np.argsort(d_raw), np.argsort(d_norm))


def test_encode_is_deterministic_mode_and_packs_msb_first():
    model, x = _model(bits=12)
    packed = encode_packed(model, x, batch_size=7)  # chunks must not change the codes
    xn = (x - model.mean.numpy()) / model.scale.numpy()
    expected_bits = (xn @ model.W.numpy() + model.b.numpy()) >= 0
    assert packed.shape == (len(x), 2) and packed.dtype == np.uint8
    np.testing.assert_array_equal(np.unpackbits(packed, axis=1)[:, :12], expected_bits)
    np.testing.assert_array_equal(packed, encode_packed(model, x))


def test_released_init_matches_the_demo():
    model, x = _model(objective="released", bits=8, dim=6)
    np.testing.assert_allclose(model.s.numpy(), np.clip(x.var(axis=0), 1e-7, None), rtol=1e-5)
    np.testing.assert_allclose(model.m.numpy(), x.mean(axis=0), rtol=1e-5)
    assert model.scale.numpy() == 1.0 and not np.any(model.mean.numpy())  # no normalisation
    assert np.any(model.b.numpy() != 0)  # b ~ N(0, 1)
    paper, _ = _model(objective="paper", bits=8)
    assert not np.any(paper.b.numpy())  # init=random: b = 0


# ---- deep SGH: mlp encoder and decoder ------------------------------------------------------
def _deep(estimator="approximate", bits=6, dim=9, seed=0):
    x = np.random.default_rng(seed).normal(size=(300, dim)).astype(np.float32)
    config = ModelConfig(bits=bits, encoder="mlp", decoder="mlp", encoder_hidden=[16],
                         decoder_hidden=[12, 10], gradient_estimator=estimator)
    return SGH.from_training_data(config, x, seed=seed), x


def test_finite_differences_equal_the_loss_with_each_bit_set_and_cleared():
    from sgh.model.sgh_model import finite_differences

    model, x = _deep()
    x_norm = (x[:5] - model.mean) / model.scale
    h = tf.constant(np.random.default_rng(1).integers(0, 2, (5, 6)), tf.float32)
    rho2 = tf.constant(0.7)
    got = finite_differences(model.decode, x_norm, h, rho2).numpy()
    for k in range(6):
        on, off = h.numpy().copy(), h.numpy().copy()
        on[:, k], off[:, k] = 1, 0
        loss = [np.sum((x_norm - model.decode(tf.constant(c)).numpy()) ** 2, axis=1) / 1.4
                for c in (on, off)]
        np.testing.assert_allclose(got[:, k], loss[0] - loss[1], rtol=1e-5, atol=1e-5)


def test_the_unbiased_estimator_with_an_mlp_decoder_is_the_exact_difference():
    # d total / d z_k = sigmoid'(z_k) (L(h_k=1) - L(h_k=0)) / B + d KL / d z_k: the reconstruction
    # reaches the logits only through the exact differences, the KL through p directly.
    from sgh.model.sgh_model import bernoulli_kl, finite_differences

    model, x = _deep(estimator="unbiased")
    batch = x[:8]
    z = tf.Variable(model.logits(batch))
    epsilon = tf.random.stateless_uniform(z.shape, seed=[0, 1])
    with tf.GradientTape(persistent=True) as tape:
        h, _ = doubly_sn(z, epsilon)
        total = model._paper_terms(batch, z, h)["total"]
        kl = tf.reduce_mean(tf.reduce_sum(bernoulli_kl(z, model.prior_logits), axis=1))
    p = tf.sigmoid(z)
    x_norm = (batch - model.mean) / model.scale
    differences = finite_differences(model.decode, x_norm, h, tf.exp(2.0 * model.log_rho))
    expected = p * (1 - p) * differences / 8 + tape.gradient(kl, z)
    np.testing.assert_allclose(tape.gradient(total, z).numpy(), expected.numpy(), rtol=1e-4,
                               atol=1e-6)


def test_deep_sgh_trains_and_its_weights_round_trip():
    from sgh.config import TrainerConfig
    from sgh.training.loop import Trainer

    for estimator in ("approximate", "unbiased"):
        model, x = _deep(estimator=estimator)
        logs = Trainer(model, x, TrainerConfig(steps=200, batch_size=50, steps_per_call=50,
                                               jit_compile=False)).fit()
        assert logs[-1].terms["total"] < logs[0].terms["total"]
        assert len(np.unique(model.encode_bits(x).numpy(), axis=0)) > 1
    twin = SGH.skeleton(model.config, model.dim)
    twin.assign_weights(model.weights())
    np.testing.assert_array_equal(twin.encode_bits(x).numpy(), model.encode_bits(x).numpy())
    assert model.decoder_templates().shape == (6, 9)
    assert {"encoder_kernel_0", "decoder_bias_2", "mean", "log_rho"} <= set(model.weights())


@pytest.mark.parametrize("overrides, message", [
    ({"decoder": "mlp", "objective": "released"}, "model.decoder=mlp needs model.objective="),
    ({"decoder": "bytes", "objective": "released"}, "model.decoder=bytes needs model.objective="),
    ({"decoder": "table"}, "model.decoder='table' is not known; accepted: linear, mlp, bytes"),
    ({"encoder": "mlp", "encoder_hidden": []}, "model.encoder_hidden is empty"),
    ({"decoder_activation": "swish"}, "model.decoder_activation='swish' is not known"),
    ({"encoder_hidden": [0]}, "model.encoder_hidden=0 is impossible"),
])
def test_network_settings_are_checked(overrides, message):
    from sgh.config import Config, SyntheticDatasetConfig, validate
    from sgh.errors import UserInputError

    with pytest.raises(UserInputError, match=message):
        validate(Config(dataset=SyntheticDatasetConfig(), model=ModelConfig(**overrides)))


def test_tensorflow_notices_retracing_of_a_users_function_but_not_of_each_new_model(caplog):
    """TensorFlow warns after 5 traces of one Python function among its recent calls. Each new
    model traces `encode_bits` once, which is no mistake of a program that fits several; a
    user's function traced for every call still gets the notice."""
    caplog.set_level(logging.WARNING, logger="tensorflow")
    for seed in range(7):
        model, x = _model(seed=seed)
        model.encode_bits(x)
    assert "retracing" not in caplog.text

    @tf.function
    def users_function(x):
        return x * 2

    for size in range(1, 8):
        users_function(tf.zeros([size]))
    assert "calls to <function test_tensorflow_notices" in caplog.text
    assert "triggered tf.function retracing" in caplog.text
