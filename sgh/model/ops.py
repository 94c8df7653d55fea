"""Custom-gradient ops for Stochastic Generative Hashing.

SGH's hash layer is a binary step: ``h = 1[sigmoid(z) >= xi]``. Its true derivative is zero almost
everywhere, so plain backpropagation gives the encoder no training signal at all. The layer trains
only because its backward pass is *replaced* by a chosen gradient. The ops here do that with
``tf.custom_gradient``, which works eagerly, inside ``tf.function`` and under XLA
(``jit_compile=True``), and reproduces what the TF1 mechanisms (``RegisterGradient`` +
``gradient_override_map``) computed -- see ``tests/model/test_ops.py`` for the reference values.

- :func:`doubly_sn` -- the doubly stochastic sign neuron of the released SGH code, with its
  approximate (sigmoid-scaled straight-through) gradient.
- :func:`ste_sign` -- ``sign(x)`` with the hard-tanh straight-through gradient, for +-1 codes.
- :func:`gradient_reversal` -- identity forward, ``-scale * grad`` backward (adversarial terms).
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
    # TF currently passes zeros (not None) for an output the loss does not use, in eager, in
    # tf.function and under XLA; guard anyway so an unconnected output can never crash the backward.
    return tf.zeros_like(like) if grad is None else grad


def _unbroadcast(grad: tf.Tensor, shape: tf.Tensor) -> tf.Tensor:
    # Sum a gradient back to the shape of an input that was broadcast (e.g. a scalar epsilon = 0.5,
    # as in the released demo); same rule as TF's own gradient for Add.
    _, axes = tf.raw_ops.BroadcastGradientArgs(s0=tf.shape(grad), s1=shape)
    return tf.reshape(tf.reduce_sum(grad, axis=axes), shape)


def doubly_sn(logits, epsilon) -> tuple[tf.Tensor, tf.Tensor]:
    """Doubly stochastic sign neuron: returns ``(codes, probs)``.

    Forward: ``probs = sigmoid(logits)`` and ``codes = 1[probs >= epsilon]`` as strict 0/1 values
    in the dtype of ``logits``. With ``epsilon ~ U(0, 1)`` this samples ``codes ~ Bern(probs)``;
    with ``epsilon = 0.5`` it is the deterministic test-time hash ``1[logits >= 0]``.
    (The released ``(sign(p - e) + 1) / 2`` returns 0.5 on a tie ``p == e``: not a bit.)

    Backward (the released code's approximate, "biased" estimator):
    ``d_logits = p (1 - p) (g_codes + g_probs)`` and ``d_epsilon = g_codes``.

    Args:
        logits: floating tensor ``z``.
        epsilon: thresholds ``xi``, same shape as ``logits`` or broadcastable to it; converted to
            the dtype of ``logits``.
    """
    logits = _float_tensor(logits, "logits")
    epsilon = _float_tensor(epsilon, "epsilon", dtype=logits.dtype)
    return _doubly_sn(logits, epsilon)


@tf.custom_gradient
def _doubly_sn(logits, epsilon):
    probs = tf.sigmoid(logits)
    # `>=` (not sign) so a tie gives a real bit; broadcasting gives codes the shape of both.
    codes = tf.cast(probs >= epsilon, logits.dtype)

    def grad(g_codes, g_probs):
        g_codes = _or_zeros(g_codes, codes)
        g_probs = _or_zeros(g_probs, probs)
        # Treat the step as if it were the identity of p: chain both upstream paths through
        # sigmoid'(z) = p (1 - p). The step's true derivative (0 a.e.) is deliberately ignored.
        d_logits = _unbroadcast(probs * (1.0 - probs) * (g_codes + g_probs), tf.shape(logits))
        d_epsilon = _unbroadcast(g_codes, tf.shape(epsilon))
        return d_logits, d_epsilon

    return (codes, probs), grad


def ste_sign(x) -> tf.Tensor:
    """``sign(x)`` forward (``sign(0) = 0``); backward passes ``g`` where ``-1 <= x <= 1``, else 0.

    The window is the derivative of hard-tanh: saturated units stop receiving gradient, which keeps
    the pre-activations from drifting without bound.
    """
    return _ste_sign(_float_tensor(x, "x"))


@tf.custom_gradient
def _ste_sign(x):
    def grad(g):
        g = _or_zeros(g, x)
        return g * tf.cast(tf.abs(x) <= 1.0, x.dtype)

    return tf.sign(x), grad


def gradient_reversal(x, scale: float = 1.0) -> tf.Tensor:
    """Identity forward, ``-scale * g`` backward.

    Lets one loss term push the layers below it *against* its own objective (e.g. an adversary
    that must not be able to predict something from the codes) without a second optimizer.
    """
    # A Python number only: a bool, a string or a tensor here is almost surely a mistake, and an
    # inf/nan scale would silently poison every gradient below this point.
    scale = check_real("scale", scale)
    x = _float_tensor(x, "x")

    @tf.custom_gradient
    def _reverse(x):
        def grad(g):
            return -scale * _or_zeros(g, x)

        return tf.identity(x), grad

    return _reverse(x)
