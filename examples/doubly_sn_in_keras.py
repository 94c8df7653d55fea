"""The doubly stochastic neuron inside your own Keras model: a deep binary autoencoder.

    python examples/doubly_sn_in_keras.py [--epochs N]

`DoublySN` samples codes h ~ Bern(sigmoid(logits)) in training and gives the deterministic code
1[logits >= 0] at inference; its backward pass is SGH's reparametrised gradient, so the encoder
learns through the binary step with a plain `model.fit`.
"""

import argparse

import keras
import numpy as np
from sklearn.datasets import load_digits

from sgh.layers import DoublySN

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=100, help="training epochs (default 100)")
epochs = parser.parse_args().epochs

keras.utils.set_random_seed(0)
x = load_digits().data.astype(np.float32) / 16  # (1797, 64) in [0, 1]

inputs = keras.Input((64,))
hidden = keras.layers.Dense(128, activation="relu")(inputs)
codes = DoublySN(seed=0, name="codes")(keras.layers.Dense(16)(hidden))  # 16-bit codes
decoded = keras.layers.Dense(64)(keras.layers.Dense(128, activation="relu")(codes))
autoencoder = keras.Model(inputs, decoded)
autoencoder.compile(optimizer=keras.optimizers.Adam(3e-3), loss="mse")
history = autoencoder.fit(x, x, epochs=epochs, batch_size=128, verbose=0)
print(f"reconstruction MSE: {history.history['loss'][0]:.4f} after epoch 1, "
      f"{history.history['loss'][-1]:.4f} after epoch {epochs}")

encoder = keras.Model(inputs, codes)  # deterministic at inference
bits = encoder.predict(x, verbose=0).astype(np.uint8)
packed = np.packbits(bits, axis=1)  # (1797, 2) uint8, the layout of codes.npz
print(f"{len(np.unique(packed, axis=0))} distinct 16-bit codes for {len(x)} digits")
