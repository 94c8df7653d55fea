"""An mlp decoder rescores a shortlist through its last layer's split: brute-force decoding's
scores and order, for every block size, cache or none, and the joint kind."""

import numpy as np
import pytest
import tensorflow as tf

from sgh.codes import pack_bits
from sgh.config import ModelConfig
from sgh.model.sgh_model import SGH
from sgh.scores.asymmetric_index import AsymmetricIndex
from sgh.scores.decoded import DecodedRescorer, DecoderNetwork


def _model(seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(200, 6)) * 3 + 1).astype(np.float32)
    model = SGH.from_training_data(ModelConfig(bits=8, encoder="mlp", decoder="mlp",
                                               encoder_hidden=[5], decoder_hidden=[7, 4]), x, 0)
    return model, x, rng


def _decoded(model, bits):
    return (model.decode(tf.constant(bits, tf.float32)).numpy() * model.scale.numpy()
            + model.mean.numpy()).astype(np.float64)


@pytest.mark.parametrize("similarity", ["euclidean", "inner_product"])
@pytest.mark.parametrize("cached", [True, False])
@pytest.mark.parametrize("dense", [True, False])
def test_each_candidate_scores_as_its_decoded_code_against_its_query(similarity, cached, dense,
                                                                     monkeypatch):
    model, x, rng = _model()
    bits = rng.integers(0, 2, (300, 8)).astype(np.uint8)
    queries = x[:7]
    candidates = rng.integers(0, 300, (7, 25))
    candidates[:, -2:] = -1  # padding
    # Blocks of two queries, and no cache of the hidden layers: the scores must not change.
    monkeypatch.setattr("sgh.scores.decoded.BLOCK_VALUES", 2 * 25 * 4)
    if not cached:
        monkeypatch.setattr("sgh.scores.decoded.CACHE_BYTES", 0)
    # Products with every distinct code (long shortlists), or one dot per pair (short ones).
    monkeypatch.setattr("sgh.scores.decoded.DENSE_SHARE", 10**9 if dense else 0)
    rescorer = DecodedRescorer(model.decoder_network(), pack_bits(bits), similarity)
    D, I = rescorer.rescore(queries, candidates)
    decoded = _decoded(model, bits)
    scale = float(model.scale.numpy())
    for row in range(7):
        ids = candidates[row, :-2]
        rows = decoded[ids]
        # In the model's normalised units: the input-unit score / scale^2, up to a per-query
        # constant for the inner product (-<x, mean> / scale^2).
        exact = (-(rows @ queries[row]) if similarity == "inner_product"
                 else ((rows - queries[row]) ** 2).sum(1)) / scale**2
        order = np.lexsort((ids, exact))
        np.testing.assert_array_equal(I[row, :-2], ids[order])
        shift = 0.0 if similarity != "inner_product" else \
            float(queries[row].astype(np.float64) @ model.mean.numpy()) / scale**2
        np.testing.assert_allclose(D[row, :-2] - shift, exact[order], rtol=1e-5, atol=1e-6)
        assert (I[row, -2:] == -1).all() and np.isinf(D[row, -2:]).all()


def test_the_joint_kind_adds_the_weighted_decoder_term_to_the_encoder_score():
    model, x, rng = _model(1)
    codes = pack_bits(rng.integers(0, 2, (120, 8)).astype(np.uint8))
    queries, candidates = x[:5], rng.integers(0, 120, (5, 30))
    network = model.decoder_network()
    encoder = model.asymmetric_scores("euclidean")["encoder"]
    joint = DecodedRescorer(network, codes, "euclidean", "joint", encoder, weight=0.5)
    decoder = DecodedRescorer(network, codes, "euclidean").scores(queries, candidates)
    index = AsymmetricIndex(encoder)
    index.add(codes)
    expected = index.candidate_scores(queries, candidates) + 0.5 / (
        2 * network.noise_variance) * decoder
    np.testing.assert_allclose(joint.scores(queries, candidates), expected, rtol=1e-6)


def test_the_network_round_trips_through_plain_arrays_and_names_damage():
    model, _, _ = _model()
    network = model.decoder_network()
    again = DecoderNetwork.from_arrays(network.arrays("d."), "f.npz", "d.")
    for a, b in zip(network.arrays(), again.arrays().values(), strict=True):
        np.testing.assert_array_equal(network.arrays()[a], b)
    broken = network.arrays()
    broken["output_kernel"] = broken["output_kernel"][:, :3]
    with pytest.raises(ValueError, match="f.npz: the decoder's output layer"):
        DecoderNetwork.from_arrays(broken, "f.npz")
    del broken["scale"]
    with pytest.raises(ValueError, match="f.npz: an incomplete decoder network .missing scale"):
        DecoderNetwork.from_arrays(broken, "f.npz")


def test_networks_and_rescorers_print_in_one_short_line():
    model, _, rng = _model()
    codes = pack_bits(rng.integers(0, 2, (50, 8)).astype(np.uint8))
    encoder = model.asymmetric_scores("euclidean")["encoder"]
    rescorer = DecodedRescorer(model.decoder_network(), codes, "euclidean", "joint", encoder)
    network = "DecoderNetwork(8 bits -> hidden (7, 4), relu -> 6 features)"
    assert repr(model.decoder_network()) == network
    assert repr(rescorer) == f"DecodedRescorer(joint, 8 bits, 50 codes, {network})"
    assert repr(encoder.network) == "QueryNetwork(6 features -> hidden (5), relu -> 8 bits)"
    assert "mlp of 1 hidden layers" in repr(encoder) and "array" not in repr(encoder)


def test_a_two_stage_index_rescores_the_encoders_shortlist_by_the_joint_decoded_score():
    from sgh.scores.score_set import ScoreSet
    from sgh.search.sgh_index import SGHIndex

    model, x, rng = _model(2)
    codes = pack_bits(rng.integers(0, 2, (400, 8)).astype(np.uint8))
    encoder = model.asymmetric_scores("euclidean")["encoder"]
    scores = ScoreSet({"encoder": encoder}, "encoder", "joint", joint_weight=0.25,
                      decoder=model.decoder_network())
    index = SGHIndex(scores, mode="two_stage")
    index.shortlist, index.refine_factor = 60, 8  # 8 x 60 candidates: the encoder's exact top 60
    index.add_codes(codes)
    D, I = index.search(x[:6], 20)
    candidates = AsymmetricIndex(encoder, codes).search(x[:6], 60)[1]
    joint = DecodedRescorer(model.decoder_network(), codes, "euclidean", "joint", encoder, 0.25)
    expected_D, expected_I = joint.rescore(x[:6], candidates)
    np.testing.assert_array_equal(I, expected_I[:, :20])
    np.testing.assert_array_equal(D, expected_D[:, :20].astype(np.float32))
    assert (I != candidates[:, :20]).any()  # the decoder's term reorders the shortlist


def test_an_empty_database_rescores_padding_only_as_padding():
    # An empty index's shortlist is all padding: no row 0 stands in for it.
    model, x, _ = _model()
    rescorer = DecodedRescorer(model.decoder_network(), np.zeros((0, 1), np.uint8), "euclidean")
    D, I = rescorer.rescore(x[:3], np.full((3, 5), -1))
    assert (I == -1).all() and np.isinf(D).all() and D.shape == (3, 5)
