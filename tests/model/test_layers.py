"""The Keras layers: the reference gradients through the layer, Keras models of every kind
(Sequential, Functional, `model.fit`, XLA), and a `.keras` round trip with identical codes."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from sgh.config import ModelConfig
from sgh.layers import DoublySN, GradientReversal, StraightThroughSign
from sgh.model.sgh_model import SGH


def test_reference_gradient_through_the_layer():
    # Reference case 1 (tests/model/test_ops.py): z = 10, e = 10, both outputs summed (upstream
    # 1 and 1): outputs (0, sigmoid(10)), dz = p (1 - p) (1 + 1) = 9.083335e-05 in float32, de = 1.
    logits, epsilon = tf.Variable([10.0]), tf.Variable([10.0])
    layer = DoublySN(return_probabilities=True)
    with tf.GradientTape() as tape:
        codes, probabilities = layer(logits, training=True, epsilon=epsilon)
        total = tf.reduce_sum(codes) + tf.reduce_sum(probabilities)
    d_logits, d_epsilon = tape.gradient(total, [logits, epsilon])
    assert codes.numpy().tolist() == [0.0]
    assert probabilities.numpy()[0] == np.float32(0.9999546)
    assert d_logits.numpy()[0] == np.float32(9.083335e-05)
    assert d_epsilon.numpy()[0] == 1.0


def test_inference_is_the_deterministic_code_and_training_samples_bernoulli():
    z = tf.constant([[-3.0, -1e-3, 0.0, 1e-3, 3.0]])
    layer = DoublySN(seed=0)
    np.testing.assert_array_equal(layer(z).numpy(), [[0, 0, 1, 1, 1]])  # 1[z >= 0], z = 0 -> 1
    logits = tf.fill([20000, 1], 0.4)  # p = sigmoid(0.4) = 0.5987
    draws = layer(logits, training=True).numpy()
    assert set(np.unique(draws)) <= {0.0, 1.0}
    p = 1 / (1 + np.exp(-0.4))
    assert abs(draws.mean() - p) < 4 * np.sqrt(p * (1 - p) / draws.size)
    fixed = DoublySN(noise="fixed")(logits, training=True).numpy()  # xi = 1/2: the mode
    assert fixed.min() == 1.0


def test_the_same_seed_gives_the_same_noise():
    logits = tf.zeros([50, 8])
    first = DoublySN(seed=3)(logits, training=True).numpy()
    again = DoublySN(seed=3)(logits, training=True).numpy()
    other = DoublySN(seed=4)(logits, training=True).numpy()
    np.testing.assert_array_equal(first, again)
    assert (first != other).any()


@pytest.mark.parametrize("arguments, message", [
    ({"noise": "gauss"}, "noise='gauss' is not known; accepted: uniform, fixed"),
    ({"seed": -1}, "seed=-1 is impossible"),
    ({"return_probabilities": "yes"}, "return_probabilities='yes'"),
])
def test_bad_arguments_are_named(arguments, message):
    with pytest.raises(ValueError, match=message):
        DoublySN(**arguments)
    with pytest.raises(ValueError, match="scale=nan is impossible"):
        GradientReversal(scale=float("nan"))


def test_straight_through_sign_and_gradient_reversal_reference_values():
    # Reference cases 2 and 6 (tests/model/test_ops.py), through the layers.
    x = tf.Variable([10.0, 0.0, -10.0, -0.05, 0.05])
    with tf.GradientTape() as tape:
        y = StraightThroughSign()(10.0 * x)
    np.testing.assert_array_equal(y.numpy(), [1, 0, -1, -1, 1])
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [0, 10, 0, 10, 10])
    x1, x2 = tf.Variable(1.0), tf.Variable(2.0)
    with tf.GradientTape() as tape:
        y = GradientReversal()(x1 + x2)
    assert [g.numpy() for g in tape.gradient(y, [x1, x2])] == [-1.0, -1.0]


def _autoencoder(kind: str, dim: int = 16, bits: int = 8):
    if kind == "sequential":
        return keras.Sequential([keras.Input((dim,)), keras.layers.Dense(bits),
                                 DoublySN(seed=1), keras.layers.Dense(dim)])
    inputs = keras.Input((dim,))
    codes = DoublySN(seed=1, name="codes")(keras.layers.Dense(bits)(inputs))
    return keras.Model(inputs, keras.layers.Dense(dim)(codes))


@pytest.mark.parametrize("kind, jit_compile", [("sequential", False), ("functional", True)])
def test_a_plain_autoencoder_trains_with_model_fit(kind, jit_compile):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(512, 4)) @ rng.normal(size=(4, 16))).astype(np.float32)
    model = _autoencoder(kind)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse", jit_compile=jit_compile)
    history = model.fit(x, x, epochs=15, batch_size=64, verbose=0)
    losses = history.history["loss"]
    assert np.isfinite(losses).all() and losses[-1] < 0.7 * losses[0]
    encoder_weights = model.layers[0].kernel if kind == "sequential" else model.layers[1].kernel
    assert np.abs(encoder_weights.numpy()).sum() > 0  # the encoder is reached through the codes


def test_a_keras_file_round_trip_gives_identical_codes(tmp_path):
    model = _autoencoder("functional")
    encoder = keras.Model(model.inputs, model.get_layer("codes").output)
    x = np.random.default_rng(1).normal(size=(100, 16)).astype(np.float32)
    encoder.save(tmp_path / "encoder.keras")
    loaded = keras.models.load_model(tmp_path / "encoder.keras")
    assert isinstance(loaded.get_layer("codes"), DoublySN)
    assert loaded.get_layer("codes").get_config()["seed"] == 1
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), encoder.predict(x, verbose=0))


def test_the_sgh_model_encodes_through_the_same_layer():
    x = np.random.default_rng(2).normal(size=(200, 12)).astype(np.float32)
    model = SGH.from_training_data(ModelConfig(bits=10), x, seed=0)
    logits = model.logits(tf.constant(x))
    np.testing.assert_array_equal(model.encode_bits(x).numpy(),
                                  DoublySN()(logits).numpy().astype(np.uint8))
    # The layer is not part of the model's variables or checkpoints (its layout is unchanged).
    assert sorted(v.name.split(":")[0] for v in model.variables) == [
        "U", "W", "b", "c", "log_rho", "mean", "prior_logits", "scale"]


def test_another_keras_backend_is_refused_in_one_line():
    # No other backend is installed here: Keras is told it runs on JAX, as KERAS_BACKEND=jax
    # would make it, before the layers are imported.
    from tests.helpers import fresh_python

    printed = fresh_python("import keras; keras.backend.backend = lambda: 'jax'\n"
                           "from sgh.errors import UserInputError\n"
                           "try:\n"
                           "    import sgh.model.layers\n"
                           "except UserInputError as error:\n"
                           "    print(error)\n")
    assert printed.splitlines() == [
        "Keras runs on the 'jax' backend (KERAS_BACKEND, or ~/.keras/keras.json); sgh's layers "
        "and model need its TensorFlow backend: set KERAS_BACKEND=tensorflow"]
