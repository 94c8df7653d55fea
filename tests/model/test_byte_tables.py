"""SGH with its byte decoder (`model.decoder=bytes`, sgh/model/byte_tables.py): the tables are a
multilinear polynomial of each byte's bits, so the linear decoder is their degree-1 case (the same
loss and gradients), the neuron's derivative in a bit is an exact difference of two entries, the
unbiased estimator is the exact difference of the loss, every term reaches its parameters, and
the trained tables become the search's `ByteDecoder` in input units."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from sgh.codes import pack_bits
from sgh.config import ModelConfig
from sgh.model.byte_tables import TABLE_RATE_SCALE
from sgh.model.ops import doubly_sn
from sgh.model.sgh_model import SGH, bernoulli_kl


def _model(bits=12, dim=60, estimator="approximate", seed=0, rows=300):
    """A model of byte tables; ``dim`` > 4 bits gives the tables a subspace of 4 bits dims."""
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(rows, dim)) @ rng.normal(size=(dim, dim)) + 2.0).astype(np.float32)
    config = ModelConfig(bits=bits, decoder="bytes", gradient_estimator=estimator)
    return SGH.from_training_data(config, x, seed=seed), x


def _degree_one_tables(templates: np.ndarray) -> np.ndarray:
    """Byte tables that sum their set bits' templates (first bit most significant)."""
    bits, width = templates.shape
    padded = np.zeros((-(-bits // 8) * 8, width), templates.dtype)
    padded[:bits] = templates
    corners = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.float32)
    return np.stack([corners @ padded[8 * j : 8 * j + 8] for j in range(len(padded) // 8)])


@pytest.mark.parametrize("estimator", ["approximate", "unbiased"])
def test_the_linear_decoder_is_the_tables_degree_one_case(estimator):
    # Without a subspace (r = dim) and with tables summing U's rows, the byte decoder's loss and
    # every gradient are the linear decoder's (whose offset c is 0 at the start).
    bits, dim = 11, 30
    x = np.random.default_rng(1).normal(size=(64, dim)).astype(np.float32)
    linear = SGH.from_training_data(ModelConfig(bits=bits, gradient_estimator=estimator), x, 0)
    tables = SGH.from_training_data(ModelConfig(bits=bits, decoder="bytes",
                                                gradient_estimator=estimator), x, 0)
    assert tables.decoder.basis is None  # 4 * 11 >= 30: the features' own axes
    tables.W.assign(linear.W)
    tables.decoder.scaled_tables.assign(_degree_one_tables(linear.U.numpy()) / TABLE_RATE_SCALE)
    epsilon = tf.random.stateless_uniform([len(x), bits], seed=[3, 4])
    results = []
    for model in (linear, tables):
        with tf.GradientTape() as tape:
            terms = model.loss_terms(tf.constant(x), epsilon)
        results.append((terms, tape.gradient(terms["total"], [model.W, model.b, model.log_rho,
                                                              model.prior_logits])))
    for name in ("total", "reconstruction", "gaussian_nll", "kl"):
        np.testing.assert_allclose(results[1][0][name], results[0][0][name], rtol=1e-5)
    for mine, theirs in zip(results[1][1], results[0][1], strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-6)


def test_a_bits_derivative_is_the_difference_of_its_two_table_entries():
    model, _ = _model(bits=12)
    tables = model.decoder.tables.numpy()
    h = tf.constant(np.random.default_rng(2).integers(0, 2, (5, 12)), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(h)
        reconstruction, differences = model.decoder(h)
        projected = tf.reduce_sum(reconstruction * tf.range(1.0, reconstruction.shape[1] + 1.0))
    codes = pack_bits(h.numpy().astype(bool))
    np.testing.assert_allclose(reconstruction, tables[0][codes[:, 0]] + tables[1][codes[:, 1]],
                               rtol=1e-6)
    for k in range(12):
        on, off = h.numpy().copy(), h.numpy().copy()
        on[:, k], off[:, k] = 1, 0
        expected = (tables[k // 8][pack_bits(on.astype(bool))[:, k // 8]]
                    - tables[k // 8][pack_bits(off.astype(bool))[:, k // 8]])
        np.testing.assert_allclose(differences[:, k], expected, rtol=1e-5, atol=1e-6)
    weights = np.arange(1.0, reconstruction.shape[1] + 1.0)
    np.testing.assert_allclose(tape.gradient(projected, h), differences.numpy() @ weights,
                               rtol=1e-4)


def test_the_unbiased_estimator_is_the_exact_difference_of_the_loss():
    # d total / d z_k = sigma'(z_k) (L(h_k=1) - L(h_k=0)) / B + d KL / d z_k, L the item's
    # reconstruction term ||x~ - x~^(h)||^2 / (2 rho^2), computed here by decoding both codes.
    model, x = _model(estimator="unbiased")
    batch = tf.constant(x[:8])
    z = tf.Variable(model.logits(batch))
    epsilon = tf.random.stateless_uniform(z.shape, seed=[0, 1])
    with tf.GradientTape(persistent=True) as tape:
        h, _ = doubly_sn(z, epsilon)
        total = model._paper_terms(batch, z, h)["total"]
        kl = tf.reduce_mean(tf.reduce_sum(bernoulli_kl(z, model.prior_logits), axis=1))
    x_norm = ((batch - model.mean) / model.scale).numpy()
    rho2 = float(np.exp(2 * model.log_rho.numpy()))

    def loss(codes):
        return np.sum((x_norm - model.decode(tf.constant(codes)).numpy()) ** 2, 1) / (2 * rho2)

    differences = np.empty(h.shape)
    for k in range(h.shape[1]):
        on, off = h.numpy().copy(), h.numpy().copy()
        on[:, k], off[:, k] = 1, 0
        differences[:, k] = loss(on) - loss(off)
    p = tf.sigmoid(z).numpy()
    expected = p * (1 - p) * differences / 8 + tape.gradient(kl, z).numpy()
    np.testing.assert_allclose(tape.gradient(total, z), expected, rtol=2e-3, atol=1e-5)


def test_every_loss_term_reaches_its_parameters_and_the_basis_is_fixed():
    model, x = _model()
    variables = {v.name.split(":")[0]: v for v in model.trainable_variables}
    assert set(variables) == {"W", "b", "scaled_tables", "log_rho", "prior_logits"}
    epsilon = tf.random.stateless_uniform([len(x), model.bits], seed=[5, 6])
    with tf.GradientTape(persistent=True) as tape:
        terms = model.loss_terms(tf.constant(x), epsilon)
    for term, expected in {"gaussian_nll": {"W", "b", "scaled_tables", "log_rho"},
                           "kl": {"W", "b", "prior_logits"}}.items():
        gradients = tape.gradient(terms[term], list(variables.values()))
        assert {name for name, g in zip(variables, gradients, strict=True)
                if g is not None and np.any(g.numpy() != 0)} == expected, term
    basis = model.decoder.basis.numpy()
    assert basis.shape == (60, 48) and not model.decoder.basis.trainable
    np.testing.assert_allclose(basis.T @ basis, np.eye(48), atol=1e-5)


def test_the_reconstruction_term_counts_what_the_subspace_leaves_out():
    # ||x~ - U c||^2 = ||U^T x~ - c||^2 + ||x~||^2 - ||U^T x~||^2: the reported reconstruction
    # is that of the decoded vectors in input units, whatever the subspace.
    model, x = _model(bits=8, dim=40)
    h = tf.constant(np.random.default_rng(4).integers(0, 2, (len(x), 8)), tf.float32)
    z = model.logits(tf.constant(x))
    terms = model._paper_terms(tf.constant(x), z, h)
    decoded = model.decode(h).numpy() * model.scale.numpy() + model.mean.numpy()
    np.testing.assert_allclose(terms["reconstruction"],
                               0.5 * np.mean(np.sum((x - decoded) ** 2, axis=1)), rtol=1e-4)


def test_training_lowers_the_loss_and_the_weights_round_trip_with_the_basis():
    from sgh.config import TrainerConfig
    from sgh.training.loop import Trainer

    model, x = _model()
    logs = Trainer(model, x, TrainerConfig(steps=300, batch_size=50, steps_per_call=50,
                                           jit_compile=True)).fit()
    assert logs[-1].terms["reconstruction"] < 0.8 * logs[0].terms["reconstruction"]
    twin = SGH.skeleton(model.config, model.dim)
    twin.assign_weights(model.weights())
    np.testing.assert_array_equal(twin.decoder.basis.numpy(), model.decoder.basis.numpy())
    np.testing.assert_array_equal(twin.decode(tf.eye(12)).numpy(), model.decode(tf.eye(12)))
    assert model.decoder_templates().shape == (12, 60)


def test_the_search_decoder_reconstructs_as_the_model_does_in_input_units():
    model, x = _model()
    decoder = model.byte_decoder()
    codes = model.encode_bits(x).numpy()
    expected = model.decode(tf.constant(codes, tf.float32)).numpy() * model.scale.numpy() \
        + model.mean.numpy()
    np.testing.assert_allclose(decoder.decode(pack_bits(codes.astype(bool))), expected,
                               rtol=1e-4, atol=1e-4)
    assert SGH.from_training_data(ModelConfig(bits=12), x, 0).byte_decoder() is None


def test_an_mlp_encoder_trains_with_the_byte_tables():
    from sgh.config import TrainerConfig
    from sgh.training.loop import Trainer

    x = np.random.default_rng(3).normal(size=(300, 60)).astype(np.float32)
    config = ModelConfig(bits=16, encoder="mlp", encoder_hidden=[32], decoder="bytes")
    model = SGH.from_training_data(config, x, seed=0)
    logs = Trainer(model, x, TrainerConfig(steps=200, batch_size=50, steps_per_call=50,
                                           jit_compile=True)).fit()
    assert logs[-1].terms["total"] < logs[0].terms["total"]
    assert {"encoder_kernel_0", "scaled_tables"} <= set(model.weights())
    assert model.byte_decoder().tables.shape == (2, 256, 60)  # 4 x 16 > 60: all dimensions
