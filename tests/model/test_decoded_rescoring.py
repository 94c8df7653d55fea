# ruff: noqa: E741  (``D, I`` is faiss's name for search results)
"""A deep decoder rescores a shortlist by decoding it: the scores of brute force, in order."""

import numpy as np
import pytest
import tensorflow as tf

from sgh.codes import pack_bits
from sgh.config import ModelConfig
from sgh.model.decoded_rescoring import DecoderRescorer
from sgh.model.sgh_model import SGH


@pytest.mark.parametrize("similarity", ["euclidean", "inner_product"])
def test_each_candidate_is_decoded_and_scored_against_its_query(similarity, monkeypatch):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 6)).astype(np.float32)
    model = SGH.from_training_data(ModelConfig(bits=8, encoder="mlp", decoder="mlp",
                                               encoder_hidden=[5], decoder_hidden=[5]), x, 0)
    bits = rng.integers(0, 2, (300, 8)).astype(np.uint8)
    queries = x[:7]
    candidates = rng.integers(0, 300, (7, 25))
    candidates[:, -2:] = -1  # padding
    # Blocks of two queries: decoding is per block, the scores must not depend on it.
    monkeypatch.setattr("sgh.model.decoded_rescoring.BLOCK_VALUES", 2 * 25 * 6)
    D, I = DecoderRescorer(model, pack_bits(bits), similarity).rescore(queries, candidates)
    decoded = (model.decode(tf.constant(bits, tf.float32)).numpy() * model.scale.numpy()
               + model.mean.numpy()).astype(np.float64)
    for row in range(7):
        ids = candidates[row, :-2]
        rows = decoded[ids]
        exact = (-(rows @ queries[row]) if similarity == "inner_product"
                 else ((rows - queries[row]) ** 2).sum(1))
        order = np.lexsort((ids, exact))
        np.testing.assert_array_equal(I[row, :-2], ids[order])
        np.testing.assert_allclose(D[row, :-2], exact[order], rtol=1e-5)
        assert (I[row, -2:] == -1).all() and np.isinf(D[row, -2:]).all()
