"""Deterministic codes of features (in memory or streamed), in chunks, by the model's own
`encode_bits`: the one way codes are made from a trained model."""

from __future__ import annotations

import numpy as np

from sgh.data.streamed_features import Features, iter_chunks
from sgh.model.sgh_model import SGH

ENCODE_BATCH = 16384


def _bit_chunks(model: SGH, x: Features, batch_size: int):
    """(first row, unpacked codes) of each chunk of `batch_size` rows."""
    for start, rows in iter_chunks(x, batch_size):
        yield start, model.encode_bits(rows).numpy()


def encode_bit_matrix(model: SGH, x: Features, batch_size: int = ENCODE_BATCH) -> np.ndarray:
    """Unpacked `(n, bits)` uint8 0/1 codes, encoded in chunks (for code-health statistics)."""
    chunks = [bits for _, bits in _bit_chunks(model, x, batch_size)]
    return np.concatenate(chunks) if chunks else np.zeros((0, model.bits), np.uint8)


def encode_packed(model: SGH, x: Features, batch_size: int = ENCODE_BATCH) -> np.ndarray:
    """Packed codes `np.packbits(bits, axis=1)` (`sgh.codes`), encoded in chunks."""
    codes = np.empty((len(x), (model.bits + 7) // 8), np.uint8)
    for start, bits in _bit_chunks(model, x, batch_size):
        codes[start:start + len(bits)] = np.packbits(bits, axis=1)
    return codes
