"""SGH's building blocks as Keras 3 layers over the ops of `sgh.model.ops`, for anyone's Keras
model (docs/guide/python-api.md) and SGH's own; serializable (package `sgh`) in `.keras` files.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from sgh.config import NOISES
from sgh.errors import UserInputError, check_choice, check_int, check_real
from sgh.model.ops import doubly_sn, gradient_reversal, ste_sign

# Custom gradients need TensorFlow: refused in one line, not deep inside a model's first call.
if keras.backend.backend() != "tensorflow":
    raise UserInputError(
        f"Keras runs on the {keras.backend.backend()!r} backend (KERAS_BACKEND, or "
        "~/.keras/keras.json); sgh's layers and model need its TensorFlow backend: set "
        "KERAS_BACKEND=tensorflow")


@keras.saving.register_keras_serializable(package="sgh")
class DoublySN(keras.layers.Layer):
    """The doubly stochastic sign neuron (`sgh.model.ops.doubly_sn`): `noise="uniform"` draws
    xi ~ U(0, 1) in training (the paper; `seed`: its seed), `"fixed"` takes xi = 1/2 as at
    inference (the released demo); `layer(logits, epsilon=...)` takes the caller's noise.
    `return_probabilities`: return `(codes, sigmoid(logits))`."""

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
    """`sign(x)` with the straight-through gradient of `sgh.model.ops.ste_sign`: +-1 codes."""

    def call(self, inputs):
        return ste_sign(inputs)

    def compute_output_shape(self, input_shape):
        return input_shape


@keras.saving.register_keras_serializable(package="sgh")
class GradientReversal(keras.layers.Layer):
    """Identity forward, `-scale * gradient` backward (`sgh.model.ops.gradient_reversal`)."""

    def __init__(self, scale: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.scale = check_real("scale", scale)

    def call(self, inputs):
        return gradient_reversal(inputs, self.scale)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self) -> dict:
        return {**super().get_config(), "scale": self.scale}
