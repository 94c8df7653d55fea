"""SGH's building blocks as Keras 3 layers, for use in anyone's Keras model (usage:
docs/guide/python-api.md).

    DoublySN              logits -> binary codes h in {0, 1}: sampled in training, the mode at
                          inference; backward: the neuron's reparametrised gradient
    StraightThroughSign   x -> sign(x); backward: the hard-tanh straight-through gradient
    GradientReversal      identity; backward: -scale * gradient

Each is a thin layer over the op of `sgh.model.ops` (one implementation of each gradient): the
project's own SGH model calls the same `DoublySN`. All three are registered as serializable
(package `sgh`), so models that use them survive a `.keras` save and load.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from sgh.config import NOISES
from sgh.errors import UserInputError, check_choice, check_int, check_real
from sgh.model.ops import doubly_sn, gradient_reversal, ste_sign

# The neuron's gradients are TensorFlow custom gradients (`sgh.model.ops`), which no other Keras
# backend runs: refused here in one line, not deep inside a model's first call.
if keras.backend.backend() != "tensorflow":
    raise UserInputError(
        f"Keras runs on the {keras.backend.backend()!r} backend (KERAS_BACKEND, or "
        "~/.keras/keras.json); sgh's layers and model need its TensorFlow backend: set "
        "KERAS_BACKEND=tensorflow")


@keras.saving.register_keras_serializable(package="sgh")
class DoublySN(keras.layers.Layer):
    """The doubly stochastic sign neuron: codes `h = 1[sigmoid(logits) >= xi]`.

    Args:
        noise: `"uniform"`: in training, xi ~ U(0, 1) per item and bit, so h ~ Bern(sigmoid(z))
            (the paper); `"fixed"`: xi = 1/2 in training too (the authors' released demo, a
            deterministic binary autoencoder).
        seed: seed of the uniform noise (None: a random one), for reproducible training.
        return_probabilities: also return p = sigmoid(logits), as `(codes, probabilities)`.

    Call: `layer(logits, training=False, epsilon=None)`. At inference (`training=False`) the
    codes are the deterministic mode, xi = 1/2: `1[sigmoid(z) >= 1/2]`, i.e. `1[z >= 0]`.
    `epsilon` (broadcastable to `logits`) replaces the noise, e.g. for a training loop that
    draws its own stateless noise per step. Codes are strict 0/1 values in the dtype of the
    logits.

    Backward (the approximate estimator): d logits = p (1 - p) (g_codes + g_probabilities), and
    d epsilon = g_codes (`sgh.model.ops.doubly_sn`).
    """

    def __init__(self, noise: str = "uniform", seed: int | None = None,
                 return_probabilities: bool = False, **kwargs):
        super().__init__(**kwargs)
        check_choice("noise", noise, NOISES)
        if seed is not None:
            check_int("seed", seed, 0)
        if not isinstance(return_probabilities, bool):
            raise ValueError(f"return_probabilities={return_probabilities!r}; accepted: True "
                             "or False")
        self.noise, self.seed, self.return_probabilities = noise, seed, return_probabilities
        self.seed_generator = keras.random.SeedGenerator(seed) if noise == "uniform" else None

    def call(self, logits, training=False, epsilon=None):
        logits = tf.convert_to_tensor(logits)
        if epsilon is None:
            if training and self.noise == "uniform":
                epsilon = keras.random.uniform(tf.shape(logits), dtype=logits.dtype,
                                               seed=self.seed_generator)
            else:
                epsilon = tf.constant(0.5, logits.dtype)
        codes, probabilities = doubly_sn(logits, epsilon)
        return (codes, probabilities) if self.return_probabilities else codes

    def compute_output_shape(self, input_shape):
        return (input_shape, input_shape) if self.return_probabilities else input_shape

    def get_config(self) -> dict:
        return {**super().get_config(), "noise": self.noise, "seed": self.seed,
                "return_probabilities": self.return_probabilities}


@keras.saving.register_keras_serializable(package="sgh")
class StraightThroughSign(keras.layers.Layer):
    """`sign(x)` (sign(0) = 0), whose backward passes the gradient where -1 <= x <= 1 (the
    hard-tanh derivative) and 0 elsewhere (`sgh.model.ops.ste_sign`): +-1 codes that train."""

    def call(self, inputs):
        return ste_sign(inputs)

    def compute_output_shape(self, input_shape):
        return input_shape


@keras.saving.register_keras_serializable(package="sgh")
class GradientReversal(keras.layers.Layer):
    """Identity forward, `-scale * gradient` backward (`sgh.model.ops.gradient_reversal`): a
    loss term behind it pushes the layers below against its own objective (an adversary)."""

    def __init__(self, scale: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.scale = check_real("scale", scale)

    def call(self, inputs):
        return gradient_reversal(inputs, self.scale)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self) -> dict:
        return {**super().get_config(), "scale": self.scale}
