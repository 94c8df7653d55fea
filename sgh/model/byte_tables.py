"""The byte decoder as SGH's own decoder (`model.decoder=bytes`), trained through the neuron.

Its mean is one table of 256 reconstructions per code byte, summed over the bytes,

    x~^(h) = U sum_j C_j[h_j]        (h_j: byte j of the code as `sgh.codes.pack_bits` packs it)

in the model's normalised units, ``U`` the training features' top ``r`` principal directions
(`sgh.scores.byte_decoder`'s subspace: the part of ``x~`` outside it costs every code the same).
A table is the multilinear polynomial of its byte's 8 bits that takes the value ``C_j[v]`` at
each corner ``v``, so it is differentiable in relaxed bits, and at a binary code its derivative
in bit ``k`` is exactly the difference of two entries,

    Delta_k = C_j[v with bit k set] - C_j[v with bit k cleared].

The doubly stochastic neuron's estimators follow as for the linear decoder, which is the tables'
degree-1 part (``C_j[v]`` the sum of the templates of ``v``'s set bits): the approximate one
takes ``dL/dh_k = <dL/dx^, Delta_k>``; the unbiased one the exact difference of the loss
``||x~ - x~^||^2 / (2 rho^2)`` between the two codes, which adds ``-(h_k - 1/2) ||Delta_k||^2 /
rho^2`` (`sgh.model.sgh_model.unbiased_correction`).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

# The tables learn at this many times the trainer's rate (a scale inside the variable, so one
# optimizer serves the model). Each entry averages 1/256 of a byte's items, and its gradient is
# noisier than a shared weight's by as much: at the trainer's rate the tables lag the encoder,
# at 10x it they outrun it (on glove the encoder's own codes became near useless). Chosen on
# validation splits of MNIST, CIFAR-10 GIST and glove (docs/results.md).
TABLE_RATE_SCALE = 3.0
# The tables' subspace, principal directions per bit: this recipe was chosen with 4
# (docs/results.md); a fitted decoder's 2 (`sgh.scores.byte_decoder`) was validated without it.
TRAINED_SUBSPACE_DIMS_PER_BIT = 4
_BIT_VALUES = 2 ** np.arange(7, -1, -1)  # a bit's value in its byte, first bit most significant


class ByteTables(tf.Module):
    """``tables`` ``(ceil(bits / 8), 256, r)`` in the coordinates of ``basis`` ``(dim, r)``
    (orthonormal columns; None: the features' own, ``r = dim``); module doc."""

    def __init__(self, bits: int, tables: np.ndarray, basis: np.ndarray | None):
        super().__init__(name="byte_tables")
        self.bits, self.bytes = bits, len(tables)
        self.scaled_tables = tf.Variable(np.asarray(tables, np.float32) / TABLE_RATE_SCALE,
                                         name="scaled_tables")
        self.basis = None if basis is None else tf.Variable(
            np.asarray(basis, np.float32), trainable=False, name="basis")

    @staticmethod
    def initial_tables(bits: int, width: int, rng: np.random.Generator) -> np.ndarray:
        """``(bytes, 256, width)`` tables that start as the linear decoder does: sums of random
        templates ``N(0, 1 / bits)``, its degree-1 part (module doc)."""
        n_bytes = -(-bits // 8)
        templates = rng.normal(0.0, 1.0 / np.sqrt(bits), (8 * n_bytes, width))
        templates[bits:] = 0.0  # the last byte's padding bits are always 0
        corners = (np.arange(256)[:, None] & _BIT_VALUES).astype(bool).astype(np.float64)
        tables = np.stack([corners @ templates[8 * j : 8 * j + 8] for j in range(n_bytes)])
        return tables.astype(np.float32)

    @property
    def tables(self) -> tf.Tensor:
        return self.scaled_tables * TABLE_RATE_SCALE

    def coordinates(self, x_norm: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """``(U^T x~, ||x~||^2 - ||U^T x~||^2)``: the part the tables reconstruct, and the
        squared norm of the rest, which every code leaves as it is."""
        if self.basis is None:
            return x_norm, tf.zeros(tf.shape(x_norm)[:1], x_norm.dtype)
        within = tf.matmul(x_norm, self.basis)
        outside = tf.reduce_sum(tf.square(x_norm), axis=1) - tf.reduce_sum(tf.square(within), 1)
        return within, tf.maximum(outside, 0.0)

    def __call__(self, h: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """``(sum_j C_j[h_j], Delta)`` of 0/1 codes ``h`` ``(n, bits)``: ``(n, r)`` and the
        per-bit differences ``(n, bits, r)``; the first carries the derivative in ``h`` (module
        doc), both the tables'."""
        n = tf.shape(h)[0]
        padded = tf.pad(tf.stop_gradient(h), [[0, 0], [0, 8 * self.bytes - self.bits]])
        weights = tf.constant(_BIT_VALUES, tf.int32)
        values = tf.reduce_sum(tf.cast(tf.reshape(padded, [n, self.bytes, 8]), tf.int32)
                               * weights, axis=2)  # (n, bytes)
        rows = tf.constant(256 * np.arange(self.bytes), tf.int32)
        flat = tf.reshape(self.tables, [256 * self.bytes, -1])
        reconstruction = tf.reduce_sum(tf.gather(flat, values + rows[None]), axis=1)
        with_bit = tf.bitwise.bitwise_or(values[:, :, None], weights) + rows[:, None]
        without_bit = tf.bitwise.bitwise_and(values[:, :, None], 255 - weights) + rows[:, None]
        differences = tf.reshape(tf.gather(flat, with_bit) - tf.gather(flat, without_bit),
                                 [n, 8 * self.bytes, -1])[:, : self.bits]
        # Zero-valued: its derivative in h_k is Delta_k, the polynomial's at a binary code.
        reconstruction += tf.einsum("nk,nkr->nr", h - tf.stop_gradient(h),
                                    tf.stop_gradient(differences))
        return reconstruction, differences

    def in_features(self, coordinates: tf.Tensor) -> tf.Tensor:
        """Coordinates in the tables' subspace as vectors of the normalised features."""
        return coordinates if self.basis is None else tf.matmul(coordinates, self.basis,
                                                                transpose_b=True)
