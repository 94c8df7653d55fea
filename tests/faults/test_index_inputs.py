"""What enters an `SGHIndex` (and `AsymmetricIndex`) is checked against what the model recorded:
features at another scale, beyond float32 or so large that their scores overflow it, ids that
are padding or wrap around, a training that would leave items stale, an engine a concurrent
search built from the items before. Each is refused in one line with nothing changed, or
answered as the search guide says (D float32, padded with inf; a shortlist no longer than the
items)."""

import dataclasses
import warnings

import numpy as np
import pytest

from sgh import ITQ
from sgh.data.feature_conversion import UINT8_CONVERSION
from sgh.errors import UserInputError
from sgh.scores.asymmetric_index import AsymmetricIndex
from sgh.scores.decoded import DecoderNetwork
from sgh.scores.score_set import ScoreSet
from sgh.search.sgh_index import SGHIndex


@pytest.fixture(scope="module")
def unit_model():
    """A model of features in [0, 1], whose run recorded 'uint8 / 255' (pixels / 255)."""
    rng = np.random.default_rng(0)
    x = rng.random((1500, 16)).astype(np.float32)
    hasher = ITQ(n_bits=16, random_state=0).fit(x)
    scores = dataclasses.replace(SGHIndex(hasher).scores, feature_conversion=UINT8_CONVERSION)
    return scores, x


def test_features_at_another_scale_than_the_run_recorded_are_refused_at_every_entry_point(
        unit_model):
    """Raw 0..255 values as floats for a model of uint8 / 255 were searched silently (the
    recall of BIGANN-style data fell from .963 to .905): refused as sgh-index refuses a file."""
    scores, x = unit_model
    index = SGHIndex(scores, nlist=4)
    index.train(x)
    index.add(x)
    raw = x[:20] * 255
    refusal = (r"has values outside \[0, 1\] \(first at row \d+, column \d+: [\d.]+\) but the "
               r"model was trained on uint8 features divided by 255; convert them first, e.g. "
               r"x.astype\(np.float32\) / 255 \(the run recorded its features' conversion, "
               r"'uint8 / 255'\)$")
    for call in (lambda: index.search(raw, 5), lambda: index.add(raw),
                 lambda: index.encode(raw), lambda: SGHIndex(scores, nlist=4).train(raw)):
        with pytest.raises(ValueError, match=refusal):
            call()
    assert index.ntotal == len(x)
    # One bad row among good ones: nothing of the call is added.
    mixed = np.concatenate([x[:10], raw[:1]])
    with pytest.raises(ValueError, match=r"^x has values outside \[0, 1\] \(first at row 10"):
        index.add(mixed)
    assert index.ntotal == len(x)
    index.search(x[:20], 5)  # the scale the model saw: searched


def test_queries_beyond_float32_or_whose_scores_overflow_it_are_refused_everywhere(unit_model):
    """float64 queries of 1e300 gave D = inf and I = -1 with numpy's warnings, no error."""
    scores, x = unit_model
    plain = dataclasses.replace(scores, feature_conversion=None)  # no scale rule in the way
    exact = AsymmetricIndex(plain.scores["encoder"])
    exact.add(SGHIndex(plain).encode(x))
    flat, listed = SGHIndex(plain), SGHIndex(plain, nlist=4)
    listed.train(x)
    for index in (flat, listed):
        index.add(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow warning on the way to the refusal
        for search in (lambda q: exact.search(q, 5, workers=1), lambda q: flat.search(q, 5),
                       lambda q: listed.search(q, 5)):
            with pytest.raises(ValueError, match=r"hold NaN or infinite values as float32 \("
                                                 r"first at row 0, column 0: 1e\+300, beyond "
                                                 r"float32's range\)"):
                search(np.full((2, 16), 1e300))
            # Finite in float32, but far beyond the model's scale: the sums overflow.
            with pytest.raises(ValueError, match="overflow float32 .* scale them as its "
                                                 "training features were"):
                search(np.full((2, 16), 3e38, np.float32))
        flat.mode = "hamming"
        with pytest.raises(ValueError, match="overflow float32"):
            flat.search(np.full((2, 16), 3e38, np.float32), 5)


def test_a_byte_decoders_distances_that_overflow_float32_are_refused(unit_model):
    """||x||^2 beyond float32 made every D inf: the ranking was lost without a word."""
    scores, x = unit_model
    index = SGHIndex(dataclasses.replace(scores, feature_conversion=None), mode="bytes")
    index.train(x)
    index.add(x)
    with pytest.raises(ValueError, match="^queries row 1: its scores overflow float32"):
        index.search(np.stack([x[0], np.full(16, 1e19, np.float32)]), 5)
    assert np.isfinite(index.search(x[:3] * 1e3, 5)[0]).all()  # large, within float32: ranked


def test_ids_that_are_padding_or_wrap_around_are_refused_and_none_is_handed_out_twice(
        unit_model, tmp_path):
    scores, x = unit_model
    index = SGHIndex(scores)
    index.add(x[:10])
    refusals = [(lambda: index.add(x[:2], ids=np.array([-1, 5])), "ids must not be -1"),
                (lambda: index.add(x[:1], ids=np.array([2**63], np.uint64)),
                 "ids must fit in int64, got 9223372036854775808"),
                (lambda: index.add_codes(index.encode(x[:1]), ids=[-1]), "ids must not be -1"),
                (lambda: index.remove_ids([5.7]), r"ids must be a 1-D integer array.*float64")]
    for call, message in refusals:
        with pytest.raises(ValueError, match=message):
            call()
    assert index.ntotal == 10  # nothing added, nothing removed (5.7 used to remove 5)
    # A removed id is never given to another item: a caller may still hold it.
    assert index.remove_ids([9]) == 1
    index.add(x[10:11])
    assert index.search(x[10:11], 1)[1][0, 0] == 10
    loaded = SGHIndex.load(index.save(tmp_path / "index"))
    assert loaded.remove_ids([10]) == 1
    loaded.add(x[11:12])
    assert loaded.search(x[11:12], 1)[1][0, 0] == 11


def test_training_an_index_with_lists_again_after_add_is_refused(unit_model):
    """The items kept the lists of the old centroids, searched by the new ones."""
    scores, x = unit_model
    index = SGHIndex(scores, nlist=4)
    index.train(x)
    index.add(x[:500])
    before = index.search(x[:20], 5)
    with pytest.raises(ValueError, match="^train: the index holds 500 items in its lists, which "
                                         "new training would leave stale; train a new SGHIndex"):
        index.train(x[::-1], seed=3)
    for kept, searched in zip(before, index.search(x[:20], 5), strict=True):
        np.testing.assert_array_equal(kept, searched)
    index.remove_ids(np.arange(500))
    index.train(x[::-1], seed=3)  # emptied: trained anew


def test_a_search_during_an_add_never_keeps_a_stale_engine(unit_model, monkeypatch):
    """An engine built from the items before an add, stored after the add had cleared the
    engines, was searched from then on: the added items were never found."""
    scores, x = unit_model
    index = SGHIndex(scores)
    index.add(x[:100])
    build = SGHIndex._build_engine

    def add_meanwhile(self, name):  # the add of another thread, while this search builds
        engine = build(self, name)
        monkeypatch.setattr(SGHIndex, "_build_engine", build)
        self.add(x[100:101])
        return engine

    monkeypatch.setattr(SGHIndex, "_build_engine", add_meanwhile)
    index.search(x[:1], 1)  # the search the add interleaves with
    assert index.ntotal == 101
    assert index.search(x[100:101], 1)[1][0, 0] == 100


def test_a_two_stage_shortlist_is_no_longer_than_the_items(unit_model):
    """shortlist=10**12 on a small index allocated for 10**12 candidates per query."""
    scores, x = unit_model
    index = SGHIndex(scores, mode="two_stage")
    index.add(x[:300])
    index.shortlist = 10**12
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the encoder score rescoring its own shortlist
        D, ids = index.search(x[:4], 400)
    assert ids.shape == (4, 400) and (ids[:, 300:] == -1).all() and np.isinf(D[:, 300:]).all()
    assert sorted(ids[0, :300]) == list(range(300))


def test_every_mode_answers_float32_distances_padded_with_inf(unit_model):
    """Hamming mode answered int32 padded with 2**31 - 1, a deep decoder's two-stage float64:
    the guide (and sgh-index's results) say float32 and inf."""
    scores, x = unit_model
    rng = np.random.default_rng(1)
    network = DecoderNetwork((rng.normal(size=(16, 8)).astype(np.float32),),
                             (np.zeros(8, np.float32),), "relu",
                             rng.normal(size=(8, 16)).astype(np.float32),
                             np.zeros(16, np.float32), np.zeros(16), 1.0, 1.0)
    deep = ScoreSet({"encoder": scores.scores["encoder"]}, "encoder", "decoder",
                    decoder=network)
    for model, mode in ((scores, "hamming"), (deep, "two_stage"), (scores, "scan")):
        index = SGHIndex(model, mode=mode)
        index.add(x[:30])
        D, ids = index.search(x[:3], 40)
        assert D.dtype == np.float32 and ids.dtype == np.int64, mode
        assert np.isinf(D[:, 30:]).all() and (ids[:, 30:] == -1).all(), mode
        assert np.isfinite(D[:, :30]).all() and (np.diff(D[:, :30], axis=1) >= 0).all(), mode


def test_saving_an_untrained_index_is_refused_and_an_empty_one_round_trips(unit_model, tmp_path):
    scores, x = unit_model
    for index, what in ((SGHIndex(scores, nlist=4), "nlist=4 inverted lists, not learned yet"),
                        (SGHIndex(scores, mode="bytes"), "byte decoder not fitted yet")):
        with pytest.raises(ValueError, match=f"{what}: call index.train"):
            index.save(tmp_path / "untrained")
        assert not (tmp_path / "untrained").exists()
    with pytest.raises(ValueError, match="^train: no points to fit the byte decoder on"):
        SGHIndex(scores, mode="bytes").train(x[:0])  # numpy's LinAlgError, with warnings
    empty = SGHIndex.load(SGHIndex(scores).save(tmp_path / "empty"))
    assert empty.ntotal == 0 and (empty.search(x[:2], 3)[1] == -1).all()
    listed = SGHIndex(scores, nlist=4)
    listed.train(x)
    emptied = SGHIndex.load(listed.save(tmp_path / "listed"))  # trained, never filled
    emptied.add(x[:50])
    assert emptied.ntotal == 50


def test_a_user_input_error_is_a_value_error(unit_model):
    """Python callers catch ValueError, as scikit-learn's; the command line, one line of it."""
    scores, _ = unit_model
    with pytest.raises(UserInputError):
        SGHIndex(scores).search(np.full((1, 16), 2.0, np.float32), 1)
