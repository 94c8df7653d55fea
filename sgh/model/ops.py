"""Custom-gradient ops for Stochastic Generative Hashing: the neuron and two companions.

SGH's hash layer, a binary step ``h = 1[sigmoid(z) >= xi]``, trains only because its backward
pass is replaced by a chosen gradient: here with ``tf.custom_gradient`` (eager, ``tf.function``
and XLA alike), as the TF1 mechanisms computed it (reference values: tests/model/test_ops.py).
"""

from __future__ import annotations

import tensorflow as tf

from sgh.errors import check_real

__all__ = ["doubly_sn", "ste_sign", "gradient_reversal"]


def _float_tensor(x, name: str, dtype=None) -> tf.Tensor:
    x = tf.convert_to_tensor(x, dtype=dtype, name=name)
    if not x.dtype.is_floating:
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype.name}")
    return x


def _or_zeros(grad, like: tf.Tensor) -> tf.Tensor:
    # TF passes zeros (not None) for an unused output today; guard so None never crashes either.
    return tf.zeros_like(like) if grad is None else grad


def _unbroadcast(grad: tf.Tensor, shape: tf.Tensor) -> tf.Tensor:
    # Sum a gradient back to the shape of a broadcast input (a scalar epsilon = 0.5), as TF's Add.
    _, axes = tf.raw_ops.BroadcastGradientArgs(s0=tf.shape(grad), s1=shape)
    return tf.reshape(tf.reduce_sum(grad, axis=axes), shape)


def doubly_sn(logits, epsilon) -> tuple[tf.Tensor, tf.Tensor]:
    """The released code's doubly stochastic sign neuron: ``probs = sigmoid(logits)``, ``codes =
    1[probs >= epsilon]`` (0/1 in the dtype of ``logits``; ``epsilon`` broadcastable to it: U(0, 1)
    samples, 0.5 is the test-time hash). Backward (the approximate estimator): ``d_logits =
    p (1 - p) (g_codes + g_probs)``, ``d_epsilon = g_codes``. Returns ``(codes, probs)``."""
    logits = _float_tensor(logits, "logits")
    epsilon = _float_tensor(epsilon, "epsilon", dtype=logits.dtype)
    return _doubly_sn(logits, epsilon)


@tf.custom_gradient
def _doubly_sn(logits, epsilon):
    probs = tf.sigmoid(logits)
    # `>=`, not the released (sign(p - e) + 1) / 2, which gives 0.5 on a tie: not a bit.
    codes = tf.cast(probs >= epsilon, logits.dtype)

    def grad(g_codes, g_probs):
        g_codes = _or_zeros(g_codes, codes)
        g_probs = _or_zeros(g_probs, probs)
        # The step treated as the identity of p: both upstream paths through sigmoid'(z).
        d_logits = _unbroadcast(probs * (1.0 - probs) * (g_codes + g_probs), tf.shape(logits))
        d_epsilon = _unbroadcast(g_codes, tf.shape(epsilon))
        return d_logits, d_epsilon

    return (codes, probs), grad


def ste_sign(x) -> tf.Tensor:
    """``sign(x)`` forward (``sign(0) = 0``); backward passes ``g`` where ``-1 <= x <= 1`` (the
    hard-tanh derivative, which keeps saturated pre-activations from drifting), else 0."""
    return _ste_sign(_float_tensor(x, "x"))


@tf.custom_gradient
def _ste_sign(x):
    def grad(g):
        return _or_zeros(g, x) * tf.cast(tf.abs(x) <= 1.0, x.dtype)

    return tf.sign(x), grad


def gradient_reversal(x, scale: float = 1.0) -> tf.Tensor:
    """Identity forward, ``-scale * g`` backward: an adversary's loss without a second optimizer."""
    # A finite Python number only: an inf/nan scale would poison every gradient below.
    scale = check_real("scale", scale)
    x = _float_tensor(x, "x")

    @tf.custom_gradient
    def _reverse(x):
        def grad(g):
            return -scale * _or_zeros(g, x)

        return tf.identity(x), grad

    return _reverse(x)
