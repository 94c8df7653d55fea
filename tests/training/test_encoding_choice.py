"""A model's byte decoder and the encoding of its index's items: the trained tables refitted and
carried in the model's scores, each encoding measured on the validation split and the cheapest
near the best taken by default, `SGHIndex` coding items that way (any other way on request), all
of it saved and loaded, and TensorBoard's view of the decoder while it trains."""

import dataclasses

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from sgh import SGHHasher, SGHIndex
from sgh.scores.score_set import ScoreSet
from sgh.training import encoding_choice
from sgh.training.encoding_choice import VALIDATED_ENCODINGS, default_encoding


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    with threadpool_limits(1):  # small least-squares solves: threads only fight on 2 cores
        yield


@pytest.fixture(scope="module")
def fitted():
    """A 16-bit SGH with its byte decoder on 2,000 clustered points, and 200 held-out ones."""
    rng = np.random.default_rng(0)
    centres = rng.normal(0, 3, (20, 24))
    x = (centres[rng.integers(0, 20, 2200)] + rng.normal(size=(2200, 24))).astype(np.float32)
    hasher = SGHHasher(n_bits=16, decoder="bytes", steps=400, validation_every=200,
                       validation_database=1500, random_state=0).fit(x[:2000])
    return hasher, x[:2000], x[2000:]


def test_the_default_is_the_cheapest_encoding_near_the_best():
    figures = dict(zip(VALIDATED_ENCODINGS, (0.80, 0.90, 0.92, 0.93, 0.934), strict=True))
    assert default_encoding(figures) == "flip6"  # 0.004 below the best
    assert default_encoding({**figures, "flip5": 0.931}) == "flip5"
    assert default_encoding({**figures, "flip6": 0.928}) == "local_search"
    assert default_encoding({**figures, "encoder": 0.934}) == "encoder"  # a tie: the cheaper


def test_the_trained_decoder_is_refitted_and_its_validated_encoding_is_the_indexs(fitted):
    hasher, x, queries = fitted
    scores = hasher.scores_
    assert set(scores.encodings) == set(VALIDATED_ENCODINGS)
    assert scores.encoding == default_encoding(scores.encodings)
    assert scores.encodings["flip6"] > scores.encodings["encoder"]
    trained = hasher.model_.byte_decoder()
    assert scores.byte_decoder.fingerprint != trained.fingerprint  # refitted
    np.testing.assert_array_equal(scores.byte_decoder.basis, trained.basis) \
        if trained.basis is not None else None
    assert hasher.fit_info_["byte_decoder_encoding"] == scores.encoding
    index = SGHIndex(hasher, mode="bytes")
    assert index.is_trained and index.encoding == scores.encoding  # no train() needed
    index.add(x)
    assert index.search(queries, 10)[1].shape == (200, 10)


def test_each_encoding_codes_items_as_named_and_never_worse_than_the_encoder(fitted):
    hasher, x, _ = fitted
    decoder = hasher.scores_.byte_decoder
    errors = {}
    for encoding in ("encoder", "flip2", "flip6", "icm1", "local_search"):
        codes = SGHIndex(hasher, mode="bytes", encoding=encoding).encode(x)
        residual = x.astype(np.float64) - decoder.decode(codes)
        errors[encoding] = np.einsum("ij,ij->i", residual, residual)
    np.testing.assert_array_equal(SGHIndex(hasher, mode="bytes", encoding="encoder").encode(x),
                                  SGHIndex(hasher).encode(x))  # the encoder's own codes
    for encoding in ("flip2", "flip6", "icm1", "local_search"):
        assert (errors[encoding] <= errors["encoder"] * (1 + 1e-5) + 1e-4).all(), encoding
    assert errors["flip6"].sum() < errors["flip2"].sum() < errors["encoder"].sum()
    assert errors["local_search"].sum() <= errors["icm1"].sum()


@pytest.mark.parametrize("arguments, message", [
    ({"encoding": "flip4"}, "encoding='flip4' says how far the byte decoder's codes go; an "
                            "index of the modes hamming, scan and two_stage stores the encoder's "
                            "own codes: accepted: mode='bytes', or no encoding"),
    ({"mode": "bytes", "encoding": "icm99"}, "encoding='icm99' is not known; accepted: "
                                             "encoder, flip1 .. flip8"),
    ({"mode": "bytes", "encoding": "encoder", "nlist": 4},
     "encoding='encoder' with nlist: items in inverted lists are coded as residuals"),
])
def test_an_encoding_the_index_cannot_use_is_refused(fitted, arguments, message):
    with pytest.raises(ValueError, match=message):
        SGHIndex(fitted[0], **arguments)


def test_an_index_keeps_the_codes_it_was_built_for(fitted):
    # The byte decoder is a mode (no decoder= any more): its codes are its own, so an index
    # switches into or out of it never; the encoder's three modes switch freely.
    hasher, x, _ = fitted
    with pytest.raises(TypeError, match="decoder"):
        SGHIndex(hasher, decoder="bytes")
    tables, signs = SGHIndex(hasher, mode="bytes"), SGHIndex(hasher, mode="two_stage")
    for index, mode, held in ((tables, "scan", "the byte decoder's"),
                              (signs, "bytes", "the encoder's signs")):
        with pytest.raises(ValueError, match=f"^mode='{mode}': the index's codes are {held}"):
            index.mode = mode
    assert tables.mode == "bytes" and not hasattr(tables, "decoder")
    for mode in ("hamming", "scan", "two_stage"):
        signs.mode = mode
        assert signs.mode == mode


def test_inverted_lists_fit_a_decoder_of_residuals_and_take_any_other_encoding(fitted):
    hasher, x, queries = fitted
    index = SGHIndex(hasher, mode="bytes", nlist=4)
    assert not index.is_trained and index.encoding == "local_search"  # no validated default
    index.train(x)
    assert index.byte_decoder is not hasher.scores_.byte_decoder
    fast = SGHIndex(hasher, mode="bytes", nlist=4, encoding="flip4")
    fast.train(x)
    fast.add(x)
    assert fast.search(queries, 5)[1].min() >= 0


def test_the_encoding_is_saved_with_the_index_and_the_decoder_with_the_scores(fitted, tmp_path):
    hasher, x, queries = fitted
    index = SGHIndex(hasher, mode="bytes", encoding="flip2")
    index.add(x)
    index.save(tmp_path / "index")
    loaded = SGHIndex.load(tmp_path / "index")
    assert loaded.encoding == "flip2" and "encoding='flip2'" in repr(loaded)
    np.testing.assert_array_equal(loaded.encode(queries), index.encode(queries))
    for got, expected in zip(loaded.search(queries, 10), index.search(queries, 10), strict=True):
        np.testing.assert_array_equal(got, expected)
    hasher.scores_.save(tmp_path / "scores.npz")
    again = ScoreSet.load(tmp_path / "scores.npz")
    assert again.encoding == hasher.scores_.encoding and again.encodings == hasher.scores_.encodings
    assert again.byte_decoder.fingerprint == hasher.scores_.byte_decoder.fingerprint
    damaged = dataclasses.replace(hasher.scores_, encoding="icm0")
    damaged.save(tmp_path / "damaged.npz")
    with pytest.raises(ValueError, match=r"damaged.npz: key 'encoding': encoding='icm0' is not "
                                         "known"):
        ScoreSet.load(tmp_path / "damaged.npz")


def test_features_beyond_float32s_squares_get_no_byte_decoder(fitted, caplog):
    hasher, x, _ = fitted
    model, encoder = hasher.model_, hasher.scores_.scores["encoder"]
    assert encoding_choice.byte_decoder_choice(model, encoder, x * np.float32(1e19)) is None
    assert "no byte decoder: the training features' squared norms" in caplog.text
    unvalidated = encoding_choice.byte_decoder_choice(model, encoder, x)
    assert unvalidated.encoding == "local_search" and unvalidated.figures == {}


def test_tensorboard_shows_the_decoder_and_how_often_the_encoder_finds_its_mode(fitted, tmp_path):
    from sgh.artifacts import tensorboard_events as events
    from sgh.reports.tensorboard_views import write_byte_decoder_health

    hasher, x, _ = fitted
    with events.recording_to(tmp_path):
        scalars = write_byte_decoder_health(hasher.model_, x[:300], step=7)
    assert set(scalars) == {"reconstruction", "mode_share", "mode_share_byte_0",
                            "mode_share_byte_1"}
    assert 0 <= scalars["mode_share"] <= min(scalars["mode_share_byte_0"],
                                             scalars["mode_share_byte_1"]) <= 1
    decoder = hasher.model_.byte_decoder()
    codes = hasher.encode(x[:300])
    residual = x[:300] - decoder.decode(codes)
    assert scalars["reconstruction"] == pytest.approx(
        0.5 * np.einsum("ij,ij->i", residual, residual).mean(), rel=1e-5)
    linear = SGHHasher(n_bits=16, steps=20, validation_every=0, random_state=0).fit(x)
    with events.recording_to(tmp_path):
        assert write_byte_decoder_health(linear.model_, x[:300], step=7) == {}
