"""The SGH model: encoder, doubly stochastic neuron, decoder, and the two objectives.

    x~ = (x - mean) / scale,   z = x~ W + b,   (h, p) = DoublySN(z, xi),   x^ = h A + c
(`model.encoder=mlp` / `model.decoder=mlp`, objective `paper`: dense networks, `MLP`, instead;
`model.decoder=bytes`: a table of reconstructions per code byte, `sgh.model.byte_tables`).

Objective `paper` (Dai et al. 2017; the negative ELBO in nats per item), with rho and the prior
theta = sigmoid(prior_logits) learned, and an offset `c` the paper does not write, which frees
the direction of U that N(Uh, rho^2 I) spends on U E[h] = 0 for centred data:
    ||x~ - (hU + c)||^2 / (2 rho^2) + d log rho + (d/2) log 2 pi + KL(Bern(p) || Bern(theta))
Objective `released` (the authors' demo, exactly; sums over the batch; its alpha term is
-alpha log q(h|x), the opposite sign of the paper's bits-back term):
    1/2 ||x - ((hU) * |s| + m)||^2 + alpha BCE(logits=z, labels=h) + beta/2 (||U||^2 + ||W||^2)

Estimators through the binary step: `approximate`, the neuron's own backward; `unbiased`, with
L(h_k=1) - L(h_k=0) for dL/dh_k (`unbiased_correction`, `finite_differences`; docs/design.md).
"""

from __future__ import annotations

import math
import types

import numpy as np
import tensorflow as tf

from sgh.config import ModelConfig
from sgh.data.feature_statistics import feature_statistics, principal_directions
from sgh.data.streamed_features import Features
from sgh.model.byte_tables import TRAINED_SUBSPACE_DIMS_PER_BIT, ByteTables
from sgh.model.layers import DoublySN
from sgh.model.quiet_tensorflow import traced_once_per_model
from sgh.scores.asymmetric import AsymmetricScore, decoder_score, encoder_score
from sgh.scores.byte_decoder import ByteDecoder
from sgh.scores.decoded import DecoderNetwork

# The stateless RNG of the neuron's noise and the batches: named, so the stream cannot change
# under us (XLA draws with its own kernel: runs are reproducible per trainer.jit_compile).
RNG_ALGORITHM = "philox"

# `reconstruction`: 1/2 ||x - x^||^2 per item in input units, comparable across objectives.
LOSS_TERMS = {"paper": ("total", "reconstruction", "gaussian_nll", "kl", "rho"),
              "released": ("total", "reconstruction", "bce", "weight_decay")}


class SGH(tf.Module):
    """SGH (module doc); build with `SGH.from_training_data`."""

    def __init__(self, config: ModelConfig, dim: int, mean, scale, init: dict[str, np.ndarray],
                 seed: int = 0):
        super().__init__(name="sgh")
        self.config, self.dim, self.bits = config, dim, config.bits
        # The Keras layer users get, held outside the checkpointed state: training passes its
        # own stateless noise per step (`sample_noise`), so checkpoints keep their layout.
        self._parts = types.SimpleNamespace(
            neuron=DoublySN(noise=config.noise, return_probabilities=True, name="neuron"))
        # The normaliser is part of the model: encoding new data must use the same.
        self.mean = tf.Variable(np.asarray(mean, np.float32), trainable=False, name="mean")
        self.scale = tf.Variable(np.float32(scale), trainable=False, name="scale")
        if config.encoder == "mlp":
            self.encoder = MLP("encoder", [dim, *config.encoder_hidden, self.bits],
                               config.encoder_activation, np.random.default_rng([seed, 1]))
        else:
            self.W = tf.Variable(init["W"], name="W")
            self.b = tf.Variable(init["b"], name="b")
        if config.decoder == "mlp":
            self.decoder = MLP("decoder", [self.bits, *config.decoder_hidden, dim],
                               config.decoder_activation, np.random.default_rng([seed, 2]))
        elif config.decoder == "bytes":
            self.decoder = ByteTables(self.bits, init["tables"], init.get("basis"))
        else:
            self.U = tf.Variable(init["U"], name="U")
        if config.objective == "paper":
            if config.decoder == "linear":
                self.c = tf.Variable(np.zeros(dim, np.float32), name="c")
            self.log_rho = tf.Variable(np.float32(0.0), name="log_rho")
            self.prior_logits = tf.Variable(np.zeros(self.bits, np.float32), name="prior_logits")
        else:
            self.s = tf.Variable(init["s"], name="s")
            self.m = tf.Variable(init["m"], name="m")

    @classmethod
    def from_training_data(cls, config: ModelConfig, x_train: Features, seed: int) -> SGH:
        """The model for training on `x_train` (in memory or streamed: one pass over it, and a
        second for the byte decoder's subspace)."""
        statistics = feature_statistics(x_train)
        basis = None
        if config.decoder == "bytes":  # directions of x, which normalising only scales
            basis = principal_directions(x_train, statistics.mean,
                                         TRAINED_SUBSPACE_DIMS_PER_BIT * config.bits)
        dim = len(statistics.mean)
        if config.normalization == "isotropic":
            # One global scale (RMS of the centred coordinates) keeps Euclidean neighbours intact.
            mean = statistics.mean.astype(np.float32)
            # Centred on the float32 mean the model subtracts: sum (x - mean32)^2 =
            # sum (x - mean64)^2 + n (mean64 - mean32)^2 per dimension.
            variance = float(np.sum(statistics.squared_deviations
                                    + statistics.count * np.square(statistics.mean - mean))
                             / (statistics.count * dim))
            scale = math.sqrt(variance) if variance > 0 else 1.0
        else:
            mean, scale = np.zeros(dim, np.float32), 1.0
        init = initial_weights(config, dim, (statistics.mean - mean) / scale,
                               statistics.variance / scale**2, seed, basis)
        return cls(config, dim, mean, scale, init, seed)

    @classmethod
    def skeleton(cls, config: ModelConfig, dim: int) -> SGH:
        """A model of the right shapes with placeholder values, for weights restored next."""
        zeros = np.zeros(dim, np.float32)
        r = TRAINED_SUBSPACE_DIMS_PER_BIT * config.bits
        basis = np.eye(dim, r, dtype=np.float32) if config.decoder == "bytes" and r < dim else None
        return cls(config, dim, zeros, 1.0, initial_weights(config, dim, zeros, zeros + 1, 0,
                                                            basis))

    def weights(self) -> dict[str, np.ndarray]:
        """Every variable's value by name (normaliser included): what a saved model holds."""
        return {variable.name.split(":")[0]: variable.numpy() for variable in self.variables}

    def assign_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Set every variable from `weights()` of a model of the same configuration."""
        mine = {variable.name.split(":")[0]: variable for variable in self.variables}
        if set(weights) != set(mine):
            raise ValueError(f"weights for {sorted(weights)} do not fit this model's "
                             f"{sorted(mine)}")
        for name, variable in mine.items():
            if tuple(weights[name].shape) != tuple(variable.shape):
                raise ValueError(f"weight {name!r} has shape {weights[name].shape}; this model's "
                                 f"is {tuple(variable.shape)}")
            variable.assign(weights[name])

    def logits(self, x: tf.Tensor) -> tf.Tensor:
        normalised = (x - self.mean) / self.scale
        if self.config.encoder == "mlp":
            return self.encoder(normalised)
        return tf.matmul(normalised, self.W) + self.b

    def decode(self, h: tf.Tensor) -> tf.Tensor:
        """Objective `paper`: the decoder's mean of x~ (normalised) for codes h, (n, dim)."""
        if self.config.decoder == "mlp":
            return self.decoder(h)
        if self.config.decoder == "bytes":
            return self.decoder.in_features(self.decoder(h)[0])
        return tf.matmul(h, self.U) + self.c

    # One traced function per model, for any batch size; no autograph: nothing branches on a tensor.
    @traced_once_per_model
    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32)], autograph=False)
    def encode_bits(self, x: tf.Tensor) -> tf.Tensor:
        """Deterministic codes: the mode of q(h|x), h = 1[p >= 1/2], as uint8 0/1 (n, bits)."""
        codes, _ = self._parts.neuron(self.logits(x), training=False)
        return tf.cast(codes, tf.uint8)

    def reconstruct(self, x: tf.Tensor) -> tf.Tensor:
        """Reconstruction x^ of x from its code `encode_bits`, in the input space, (n, dim)."""
        h = tf.cast(self.encode_bits(tf.convert_to_tensor(x, tf.float32)), tf.float32)
        if self.config.objective == "paper":
            return self.decode(h) * self.scale + self.mean
        return tf.matmul(h, self.U) * tf.abs(self.s) + self.m

    def decoder_templates(self) -> tf.Tensor:
        """What turning bit k on adds to the reconstruction, in input units, (bits, dim)."""
        if self.config.decoder != "linear":  # from the code of zeros
            codes = tf.concat([tf.eye(self.bits), tf.zeros([1, self.bits])], axis=0)
            decoded = self.decode(codes)
            return (decoded[:-1] - decoded[-1:]) * self.scale
        if self.config.objective == "paper":
            return self.U * self.scale
        return self.U * tf.abs(self.s)

    def asymmetric_scores(self, similarity: str) -> dict[str, AsymmetricScore]:
        """Per-bit query-against-code scores: ``encoder``, and ``decoder`` if it is linear."""
        scores = {"encoder": self.encoder_score()}
        if self.config.decoder == "linear":
            offset = self.c * self.scale + self.mean if self.config.objective == "paper" else self.m
            scores["decoder"] = decoder_score(self.decoder_templates().numpy(), offset.numpy(),
                                              similarity)
        return scores

    def encoder_score(self) -> AsymmetricScore:
        """``-log q(h|x)`` of each code, per bit: the encoder's logits against the code."""
        if self.config.encoder == "mlp":
            kernels = [kernel.numpy() for kernel in self.encoder.kernels]
            biases = [bias.numpy() for bias in self.encoder.biases]
        else:
            kernels, biases = [self.W.numpy()], [self.b.numpy()]
        return encoder_score(kernels, biases, self.config.encoder_activation, self.mean.numpy(),
                             float(self.scale.numpy()))

    def decoder_network(self) -> DecoderNetwork | None:
        """An mlp decoder as NumPy arrays, to rescore shortlists (`sgh.scores.decoded`), or None."""
        if self.config.decoder != "mlp":
            return None
        kernels = [kernel.numpy() for kernel in self.decoder.kernels]
        biases = [bias.numpy() for bias in self.decoder.biases]
        return DecoderNetwork(tuple(kernels[:-1]), tuple(biases[:-1]),
                              self.config.decoder_activation, kernels[-1], biases[-1],
                              self.mean.numpy().astype(np.float64), float(self.scale.numpy()),
                              float(np.exp(2.0 * self.log_rho.numpy())))

    def byte_decoder(self) -> ByteDecoder | None:
        """A byte decoder's tables in input units, for search (`sgh.scores.byte_decoder`), or
        None: x^ = mean + scale U sum_j C_j[h_j]."""
        if self.config.decoder != "bytes":
            return None
        basis = self.decoder.basis
        scale = float(self.scale.numpy())
        return ByteDecoder(self.bits, self.mean.numpy(),
                           (self.decoder.tables.numpy() * scale).astype(np.float32),
                           None if basis is None else basis.numpy())

    def noise_variance(self) -> float:
        """sigma^2 of the decoder's Gaussian p(x|h) in input units (`released`: 1)."""
        if self.config.objective == "paper":
            # In float64: the square of a large feature scale overflows float32.
            return math.exp(2.0 * float(self.log_rho.numpy())) * float(self.scale.numpy()) ** 2
        return 1.0

    def sample_noise(self, batch_size, seed: tf.Tensor) -> tf.Tensor:
        if self.config.noise == "fixed":
            return tf.fill([batch_size, self.bits], 0.5)
        return tf.random.stateless_uniform([batch_size, self.bits], seed=seed, alg=RNG_ALGORITHM)

    def loss_terms(self, x: tf.Tensor, epsilon: tf.Tensor) -> dict[str, tf.Tensor]:
        """The objective on a batch; `total` is what the optimizer minimises."""
        z = self.logits(x)
        h, _ = self._parts.neuron(z, training=True, epsilon=epsilon)
        if self.config.objective == "paper":
            return self._paper_terms(x, z, h)
        return self._released_terms(x, z, h)

    def _paper_terms(self, x, z, h):
        x_norm = (x - self.mean) / self.scale
        rho2 = tf.exp(2.0 * self.log_rho)
        unbiased = self.config.gradient_estimator == "unbiased"
        exact_differences = unbiased and self.config.decoder == "mlp"
        if self.config.decoder == "bytes":  # in the tables' subspace, and the rest apart
            within, outside = self.decoder.coordinates(x_norm)
            reconstruction, differences = self.decoder(h)
            squared = tf.reduce_sum(tf.square(within - reconstruction), axis=1) + outside
        else:
            # With exact differences the codes' gradient comes from them alone (below).
            residual = x_norm - self.decode(tf.stop_gradient(h) if exact_differences else h)
            squared = tf.reduce_sum(tf.square(residual), axis=1)
        d = float(self.dim)
        gaussian_nll = tf.reduce_mean(squared) / (2.0 * rho2) + d * self.log_rho \
            + 0.5 * d * math.log(2.0 * math.pi)
        kl = tf.reduce_mean(tf.reduce_sum(bernoulli_kl(z, self.prior_logits), axis=1))
        total = gaussian_nll + kl
        batch = tf.cast(tf.shape(x)[0], x.dtype)
        if exact_differences:
            # Zero-valued, with d/dh_k = (L(h_k=1) - L(h_k=0)) / batch: the unbiased estimator.
            differences = tf.stop_gradient(finite_differences(self.decode, x_norm, h, rho2))
            total += tf.reduce_sum(differences * (h - tf.stop_gradient(h))) / batch
        elif unbiased:  # the linear decoder's templates, or each item's table differences
            column_norms = tf.reduce_sum(tf.square(
                differences if self.config.decoder == "bytes" else self.U), axis=-1) / rho2
            total += unbiased_correction(h, column_norms) / batch
        return {"total": total,
                "reconstruction": 0.5 * tf.reduce_mean(squared) * tf.square(self.scale),
                "gaussian_nll": gaussian_nll, "kl": kl, "rho": tf.exp(self.log_rho)}

    def _released_terms(self, x, z, h):
        alpha, beta = self.config.alpha, self.config.beta
        decoded_columns = self.U * tf.abs(self.s)  # rows a_k of the effective decoder
        reconstruction = 0.5 * tf.reduce_sum(tf.square(x - (tf.matmul(h, decoded_columns)
                                                            + self.m)))
        # Labels flow back into the neuron, as in TF 0.10 where this loss was built of plain ops.
        bce = alpha * tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=h, logits=z))
        weight_decay = beta * (tf.nn.l2_loss(self.U) + tf.nn.l2_loss(self.W))
        total = reconstruction + bce + weight_decay
        if self.config.gradient_estimator == "unbiased":
            total += unbiased_correction(h, tf.reduce_sum(tf.square(decoded_columns), axis=1))
        batch = tf.cast(tf.shape(x)[0], x.dtype)
        # Summed over the batch (the optimizer sees the demo's exact loss); reported per item.
        return {"total_sum": total, "total": total / batch,
                "reconstruction": reconstruction / batch, "bce": bce / batch,
                "weight_decay": weight_decay / batch}

    def objective(self, terms: dict[str, tf.Tensor]) -> tf.Tensor:
        return terms.get("total_sum", terms["total"])


ACTIVATIONS = {"relu": tf.nn.relu, "tanh": tf.tanh, "gelu": tf.nn.gelu, "elu": tf.nn.elu,
               "sigmoid": tf.sigmoid}


class MLP(tf.Module):
    """Dense layers `sizes[0] -> ... -> sizes[-1]`, the activation after each but the last."""

    def __init__(self, name: str, sizes: list[int], activation: str, rng: np.random.Generator):
        super().__init__(name=name)
        self.activation = ACTIVATIONS[activation]
        self.kernels, self.biases = [], []
        for index, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            limit = math.sqrt(6.0 / (fan_in + fan_out))
            self.kernels.append(tf.Variable(
                rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32),
                name=f"{name}_kernel_{index}"))
            self.biases.append(tf.Variable(np.zeros(fan_out, np.float32),
                                           name=f"{name}_bias_{index}"))

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        for kernel, bias in zip(self.kernels[:-1], self.biases[:-1], strict=True):
            x = self.activation(tf.matmul(x, kernel) + bias)
        return tf.matmul(x, self.kernels[-1]) + self.biases[-1]


def finite_differences(decode, x_norm: tf.Tensor, h: tf.Tensor, rho2: tf.Tensor) -> tf.Tensor:
    """L(h_k=1) - L(h_k=0) per item and bit, (B, l), of L(h) = ||x~ - decode(h)||^2 / (2 rho^2)."""
    bits = h.shape[-1]
    identity = tf.eye(bits, dtype=h.dtype)
    with_bit = tf.maximum(h[:, None, :], identity)  # row k: h with bit k set
    without_bit = h[:, None, :] * (1.0 - identity)  # row k: h with bit k cleared
    codes = tf.reshape(tf.concat([with_bit, without_bit], axis=1), [-1, bits])
    decoded = tf.reshape(decode(codes), [tf.shape(h)[0], 2 * bits, -1])
    squared = tf.reduce_sum(tf.square(x_norm[:, None, :] - decoded), axis=2)
    return (squared[:, :bits] - squared[:, bits:]) / (2.0 * rho2)


def bernoulli_kl(logits: tf.Tensor, prior_logits: tf.Tensor) -> tf.Tensor:
    """KL(Bern(sigmoid(z)) || Bern(sigmoid(phi))) per bit, from logits (stable for large |z|)."""
    p = tf.sigmoid(logits)
    # log p = -softplus(-z), log(1 - p) = -softplus(z); likewise for the prior.
    return p * (tf.nn.softplus(-prior_logits) - tf.nn.softplus(-logits)) \
        + (1.0 - p) * (tf.nn.softplus(prior_logits) - tf.nn.softplus(logits))


def unbiased_correction(h: tf.Tensor, column_norms: tf.Tensor) -> tf.Tensor:
    """A term that is exactly 0 but adds -(h_k - 1/2) ||a_k||^2 / rho^2 (`column_norms`, (bits,)
    or per item (n, bits)) to dL/dh_k, making it L(h_k=1) - L(h_k=0) for a loss 1/2 ||x - hA -
    c||^2 / rho^2, or ||x - x^(h)||^2 / (2 rho^2) with a_k the item's Delta_k (byte tables)."""
    slope = tf.stop_gradient(-(h - 0.5) * column_norms)
    return tf.reduce_sum(slope * h - tf.stop_gradient(slope * h))


def initial_weights(config: ModelConfig, dim: int, mean: np.ndarray, variance: np.ndarray,
                    seed: int, basis: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The demo's initial W, b, U (and `released`'s s, m) from normalised-data statistics; b = 0
    for init `random`, as a N(0, 1) bias saturates the bits of small features. Byte tables
    (``basis``: their subspace) start as sums of templates drawn as U's rows are, after them."""
    rng = np.random.default_rng(seed)
    bits = config.bits
    weights = {
        "W": rng.normal(0.0, 1.0 / math.sqrt(dim), (dim, bits)).astype(np.float32),
        "b": (rng.normal(0.0, 1.0, bits) if config.init == "released"
              else np.zeros(bits)).astype(np.float32),
        "U": rng.normal(0.0, 1.0 / math.sqrt(bits), (bits, dim)).astype(np.float32),
    }
    if config.decoder == "bytes":
        weights.update(tables=ByteTables.initial_tables(bits, dim if basis is None else
                                                        basis.shape[1], rng), basis=basis)
    if config.objective == "released":
        weights["s"] = np.clip(variance, 1e-7, None).astype(np.float32)
        weights["m"] = mean.astype(np.float32)
    return weights
