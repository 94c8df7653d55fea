"""TensorBoard views (sgh/reports/tensorboard_views.py), read back with TensorBoard's reader.

Each test writes into a fresh directory (`sgh.artifacts.tensorboard_events`, no TensorFlow) and
reads the event files with TensorBoard's own EventAccumulator, checking the tags, the plugin that
will display them, and the values against numbers computed here independently (numpy, brute
force, or worked by hand).
"""

import collections
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata as hparams_metadata
from tensorboard.plugins.pr_curve import plugin_data_pb2
from tensorboard.util import tensor_util

from sgh.artifacts.tensorboard_events import recording_to
from sgh.config import Config, ModelConfig, SyntheticDatasetConfig
from sgh.metrics import pr_curve
from sgh.model.sgh_model import SGH
from sgh.reports import tensorboard_views as views


def _write(logdir, write):
    """Run `write()` recording into `logdir`; return TensorBoard's reader of it."""
    with recording_to(logdir):
        result = write()
    accumulator = EventAccumulator(str(logdir), size_guidance={"tensors": 0})
    accumulator.Reload()
    return accumulator, result


def _plugin(accumulator, tag):
    return accumulator.SummaryMetadata(tag).plugin_data.plugin_name


def _last(accumulator, tag):
    return tensor_util.make_ndarray(accumulator.Tensors(tag)[-1].tensor_proto)


def _tiny_model(objective="paper", dim=16, bits=4, n=64, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 16.0, (n, dim)).astype(np.float32)  # like sklearn digits: 0..16
    if objective == "paper":
        config = ModelConfig(bits=bits)
    else:
        config = ModelConfig(bits=bits, objective="released", noise="fixed",
                             normalization="none", init="released")
    model = SGH.from_training_data(config, x, seed=seed)
    # Weights away from their initial values, so that c, b and U all matter below.
    for variable in model.trainable_variables:
        variable.assign(variable + rng.normal(0.0, 0.3, variable.shape).astype(np.float32))
    return model, x


# ---- code health ------------------------------------------------------------------------------
# 8 codes of 4 bits: bit 0 always 1 (dead), bit 1 alternates, bit 2 = NOT bit 1, bit 3 on for the
# first three codes.  Rows: 1011 1101 1011 1100 1010 1100 1010 1100 -> 4 distinct codes with
# counts 1011: 2, 1101: 1, 1100: 3, 1010: 2.  Balances p = (1, 1/2, 1/2, 3/8).
CODES = np.array([[1, i % 2, 1 - i % 2, int(i < 3)] for i in range(8)], np.uint8)


def test_code_health_scalars_match_independent_counts(tmp_path):
    accumulator, scalars = _write(tmp_path, lambda: views.write_code_health(CODES, step=7))
    tags = accumulator.Tags()["tensors"]
    for name in views.CODE_HEALTH_DESCRIPTIONS:
        assert f"code_health/{name}" in tags
        assert _plugin(accumulator, f"code_health/{name}") == "scalars"
        assert accumulator.Tensors(f"code_health/{name}")[-1].step == 7
    value = {name: float(_last(accumulator, f"code_health/{name}"))
             for name in views.CODE_HEALTH_DESCRIPTIONS}

    assert value["distinct_codes"] == len({tuple(row) for row in CODES}) == 4
    assert value["dead_bits"] == 1
    # mean |p - 1/2| = (1/2 + 0 + 0 + 1/8) / 4 = 0.15625
    assert value["balance_deviation"] == pytest.approx(0.15625)
    assert (value["bit_balance_min"], value["bit_balance_max"]) == (0.375, 1.0)
    # Entropy of the code frequencies (2, 1, 3, 2) / 8, in bits.
    frequencies = np.array(list(collections.Counter(map(tuple, CODES)).values())) / len(CODES)
    assert value["code_entropy"] == pytest.approx(-(frequencies * np.log2(frequencies)).sum())
    assert value["code_entropy"] == pytest.approx(1.905639, abs=1e-6)  # 1/2+1/2+3/8+0.530639
    # Per-bit entropies 0 + 1 + 1 + H(3/8).
    h38 = -(0.375 * np.log2(0.375) + 0.625 * np.log2(0.625))
    assert value["bit_entropy_sum"] == pytest.approx(2.0 + h38, rel=1e-6)
    # Mean |r| over the pairs of live bits 1, 2, 3 (bits 1 and 2 are exactly anti-correlated).
    r = np.corrcoef(CODES[:, 1:].T.astype(float))
    expected = np.mean(np.abs(r[np.triu_indices(3, k=1)]))
    assert value["mean_abs_bit_correlation"] == pytest.approx(expected, rel=1e-6)
    assert scalars["distinct_codes"] == 4

    histogram = _last(accumulator, "code_health/bit_balance")  # rows (left, right, count)
    assert _plugin(accumulator, "code_health/bit_balance") == "histograms"
    assert histogram[:, 2].sum() == 4  # one value per bit
    assert histogram[0, 0] == pytest.approx(0.375) and histogram[-1, 1] == pytest.approx(1.0)


def test_code_health_rejects_a_vector(tmp_path):
    with recording_to(tmp_path):
        with pytest.raises(ValueError, match="shape"):
            views.write_code_health(CODES[0], step=0)


def test_nothing_is_computed_or_written_without_a_writer(tmp_path):
    # No current writer: a no-op (the training loop may run without TensorBoard).
    assert views.write_code_health(CODES, step=0) == {}
    model, x = _tiny_model(dim=64)
    assert views.write_images(model, x, step=0) is False
    with recording_to(tmp_path):
        pass
    assert views.write_code_health(CODES, step=0) == {}  # the block has ended: nothing kept
    accumulator = EventAccumulator(str(tmp_path))
    accumulator.Reload()
    assert accumulator.Tags()["tensors"] == []


# ---- encoder histograms -----------------------------------------------------------------------
def test_encoder_histograms_cover_every_logit(tmp_path):
    model, x = _tiny_model()
    accumulator, _ = _write(tmp_path, lambda: views.write_encoder_histograms(model, x, step=3))
    # Logits recomputed in numpy from the weights: ((x - mean) / scale) W + b.
    z = ((x - model.mean.numpy()) / model.scale.numpy()) @ model.W.numpy() + model.b.numpy()
    for tag, values in (("encoder/logits", z), ("encoder/probabilities", 1 / (1 + np.exp(-z)))):
        assert _plugin(accumulator, tag) == "histograms"
        histogram = _last(accumulator, tag)
        assert histogram[:, 2].sum() == x.shape[0] * model.bits
        assert histogram[0, 0] == pytest.approx(values.min(), rel=1e-4, abs=1e-5)
        assert histogram[-1, 1] == pytest.approx(values.max(), rel=1e-4, abs=1e-5)


# ---- reconstruction (the model's additive methods used by the image view) --------------------
@pytest.mark.parametrize("objective", ["paper", "released"])
def test_reconstruction_is_the_objectives_decoder_at_the_mode(objective):
    """The loss's own reconstruction term at noise 1/2 (h = 1[p >= 1/2], the code) equals
    1/2 ||x - reconstruct(x)||^2 per item: reconstruct() is the objective's decoder."""
    model, x = _tiny_model(objective)
    terms = model.loss_terms(tf.constant(x), tf.fill([len(x), model.bits], 0.5))
    reconstruction = model.reconstruct(x).numpy()
    assert reconstruction.shape == x.shape
    per_item = 0.5 * np.mean(np.sum((x - reconstruction) ** 2, axis=1))
    assert float(terms["reconstruction"]) == pytest.approx(per_item, rel=1e-4)


@pytest.mark.parametrize("objective", ["paper", "released"])
def test_decoder_templates_are_what_each_bit_adds(objective):
    """reconstruct(x) - h(x) T is the same offset for every x: the decoder is linear in h."""
    model, x = _tiny_model(objective)
    codes = model.encode_bits(x).numpy().astype(np.float64)
    assert len({tuple(row) for row in codes}) > 1  # several codes, so the check has teeth
    offsets = model.reconstruct(x).numpy() - codes @ model.decoder_templates().numpy()
    np.testing.assert_allclose(offsets, np.broadcast_to(offsets[0], offsets.shape),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("objective", ["paper", "released"])
@pytest.mark.parametrize("similarity", ["euclidean", "inner_product"])
def test_the_asymmetric_score_is_the_decoders_reconstruction_distance(objective, similarity):
    """Search ranks codes by ||x - x^(h)||^2 (or -<x, x^(h)>), x^ the objective's decoder."""
    from sgh.codes import pack_bits
    from sgh.scores.asymmetric_index import AsymmetricIndex

    model, x = _tiny_model(objective)
    h = np.random.default_rng(1).integers(0, 2, (40, model.bits)).astype(np.float32)
    if objective == "paper":
        decoded = model.decode(tf.constant(h)).numpy() * model.scale.numpy() + model.mean.numpy()
    else:
        decoded = h @ model.U.numpy() * np.abs(model.s.numpy()) + model.m.numpy()
    exact = (-(x.astype(np.float64) @ decoded.T) if similarity == "inner_product" else
             ((x[:, None, :].astype(np.float64) - decoded[None]) ** 2).sum(-1))
    index = AsymmetricIndex(model.asymmetric_scores(similarity)["decoder"])
    index.add(pack_bits(h.astype(np.uint8)))
    _, _, scores = next(index.score_blocks(x))
    constant = exact - scores  # one per query
    np.testing.assert_allclose(constant, np.broadcast_to(constant[:, :1], constant.shape),
                               atol=1e-3 * np.abs(exact).max())


def test_the_two_stage_curve_is_shown_against_the_shortlist_size(tmp_path):
    curve = {"shortlist": [100, 300, 1000], "recall10@100": [0.5, 0.6, 0.7],
             "queries_per_second": [900.0, 400.0, 100.0]}
    accumulator, _ = _write(tmp_path, lambda: views.write_shortlist_curve(curve))
    recall = accumulator.Tensors("search/recall10@100")
    assert [event.step for event in recall] == [100, 300, 1000]
    assert [float(tensor_util.make_ndarray(e.tensor_proto)) for e in recall] == \
        pytest.approx([0.5, 0.6, 0.7])
    assert len(accumulator.Tensors("search/queries_per_second")) == 3


# ---- images -----------------------------------------------------------------------------------
def test_image_shape_is_inferred_only_for_square_images():
    assert views.infer_image_shape(784) == (28, 28, 1)  # MNIST
    assert views.infer_image_shape(64) == (8, 8, 1)  # sklearn digits
    for dim in (512, 128, 960, 32, 16):  # CIFAR-10 GIST, SIFT, GIST-1M, synthetic, too small
        assert views.infer_image_shape(dim) is None


def _png(accumulator, tag):
    # An image summary is the string tensor [width, height, png bytes...].
    return tf.io.decode_png(accumulator.Tensors(tag)[-1].tensor_proto.string_val[2]).numpy()


def test_images_show_inputs_reconstructions_and_templates(tmp_path):
    model, x = _tiny_model(dim=64, bits=4)
    accumulator, written = _write(tmp_path, lambda: views.write_images(model, x, step=5))
    assert written is True
    for tag in ("images/inputs_and_reconstructions", "images/decoder_templates"):
        assert _plugin(accumulator, tag) == "images"

    # 8x8 tiles upscaled x6 to 48 px, 1 px gaps: 2 rows x 8 columns of items.
    pairs = _png(accumulator, "images/inputs_and_reconstructions")[..., 0].astype(int)
    assert pairs.shape == (2 * 48 + 1, 8 * 48 + 7)
    low, high = x.min(), x.max()

    def shown(values):  # the display map: [min, max] of the sample's inputs -> 0..255
        return np.round(255 * np.clip((values - low) / (high - low), 0, 1)).astype(int)

    for item in (0, 7):
        column = item * 49
        input_tile = pairs[0:48:6, column:column + 48:6]  # one pixel per feature
        np.testing.assert_allclose(input_tile, shown(x[item].reshape(8, 8)), atol=1)
        output_tile = pairs[49:97:6, column:column + 48:6]
        expected = shown(model.reconstruct(x[item:item + 1]).numpy().reshape(8, 8))
        np.testing.assert_allclose(output_tile, expected, atol=1)

    # Templates: one row of 4 tiles, each on its own scale: 0 -> mid-grey, +-max|t_k| -> 255/0.
    shown_templates = _png(accumulator, "images/decoder_templates")[..., 0].astype(int)
    assert shown_templates.shape == (48, 4 * 48 + 3)
    templates = model.decoder_templates().numpy()
    for k, template in enumerate(templates):
        expected = 255 * (0.5 + template / (2 * np.abs(template).max()))
        tile = shown_templates[0:48:6, k * 49:k * 49 + 48:6]
        np.testing.assert_allclose(tile, expected.reshape(8, 8), atol=1)


def test_images_are_skipped_for_features_that_are_not_images(tmp_path):
    gist_like, x = _tiny_model(dim=512)  # CIFAR-10 GIST's dimension: not an image
    accumulator, written = _write(tmp_path, lambda: views.write_images(gist_like, x, step=0))
    assert written is False
    assert accumulator.Tags()["tensors"] == []


def test_an_image_shape_that_does_not_fit_is_refused():
    model, x = _tiny_model(dim=64)
    with pytest.raises(ValueError, match="image_shape=\\(8, 9\\)"):
        views.write_images(model, x, step=0, image_shape=(8, 9))


def test_explicit_colour_image_shape(tmp_path):
    model, x = _tiny_model(dim=8 * 8 * 3)  # 192 features, not a square: needs image_shape
    accumulator, written = _write(
        tmp_path, lambda: views.write_images(model, x, step=0, image_shape=(8, 8, 3)))
    assert written is True
    assert _png(accumulator, "images/inputs_and_reconstructions").shape[-1] == 3


# ---- PR curve ---------------------------------------------------------------------------------
def test_pr_curve_counts_and_values_match_brute_force(tmp_path):
    rng = np.random.default_rng(3)
    bits = 6
    query_bits = rng.integers(0, 2, (12, bits)).astype(np.uint8)
    database_bits = rng.integers(0, 2, (50, bits)).astype(np.uint8)
    query_labels = rng.integers(0, 3, 12)
    query_labels[0] = 9  # no relevant item: not scored, like pr_curve's default policy
    database_labels = rng.integers(0, 3, 50)
    query, database = np.packbits(query_bits, axis=1), np.packbits(database_bits, axis=1)

    accumulator, curve = _write(tmp_path, lambda: views.write_pr_curve(
        query, database, bits, query_labels, database_labels, step=11))
    tag = views.PR_CURVE_TAG
    assert _plugin(accumulator, tag) == "pr_curves"
    plugin_data = plugin_data_pb2.PrCurvePluginData.FromString(
        accumulator.SummaryMetadata(tag).plugin_data.content)
    assert plugin_data.num_thresholds == bits + 1
    data = _last(accumulator, tag)  # rows TP, FP, TN, FN, precision, recall; column i: r=bits-i
    assert data.shape == (6, bits + 1)

    distances = (query_bits[:, None, :] != database_bits[None, :, :]).sum(axis=2)
    relevant = query_labels[:, None] == database_labels[None, :]
    scored = relevant.any(axis=1)
    for column in range(bits + 1):
        radius = bits - column
        retrieved = (distances <= radius)[scored]
        tp = (retrieved & relevant[scored]).sum()
        fp = (retrieved & ~relevant[scored]).sum()
        fn = (~retrieved & relevant[scored]).sum()
        tn = (~retrieved & ~relevant[scored]).sum()
        np.testing.assert_array_equal(data[:4, column], [tp, fp, tn, fn])
    reference = pr_curve(query, database, bits, query_labels, database_labels)
    np.testing.assert_allclose(data[4], reference["precision"][::-1], rtol=1e-6)
    np.testing.assert_allclose(data[5], reference["recall"][::-1], rtol=1e-6)
    assert data[5, 0] == 1.0  # radius = bits retrieves everything
    assert curve["precision"] == reference["precision"]


# ---- HParams ----------------------------------------------------------------------------------
def test_hparams_session_holds_the_flattened_config(tmp_path):
    config = {"model": {"bits": 32, "objective": "paper", "jit": True},
              "eval": {"recall_n": [1, 10]}, "note": None, "lr": np.float32(0.5)}
    accumulator, _ = _write(tmp_path, lambda: views.write_hparams(config))
    tag = hparams_metadata.SESSION_START_INFO_TAG
    assert _plugin(accumulator, tag) == "hparams"
    session = hparams_metadata.parse_session_start_info_plugin_data(
        accumulator.SummaryMetadata(tag).plugin_data.content)
    values = session.hparams
    assert set(values) == {"model.bits", "model.objective", "model.jit", "eval.recall_n",
                           "note", "lr"}
    assert values["model.bits"].number_value == 32
    assert values["model.objective"].string_value == "paper"
    assert values["model.jit"].bool_value is True
    assert values["eval.recall_n"].string_value == "[1, 10]"
    assert values["note"].string_value == "None"
    assert values["lr"].number_value == 0.5


def test_hparams_of_reads_the_typed_config():
    config = Config(dataset=SyntheticDatasetConfig(), model=ModelConfig(bits=16))
    flat = views.hparams_of(config)
    assert flat["model.bits"] == 16 and flat["model.objective"] == "paper"
    assert flat["trainer.jit_compile"] is True and flat["dataset.name"] == "synthetic"
    assert flat["eval.recall_n"] == "[1, 10, 100, 1000]"
    assert all(isinstance(value, (str, int, float, bool)) for value in flat.values())


# ---- gradient norms ---------------------------------------------------------------------------
def test_gradient_norms_are_scalars(tmp_path):
    accumulator, _ = _write(tmp_path, lambda: views.write_gradient_norms(
        {"global": 2.5, "W": 1.5}, step=100))
    assert _plugin(accumulator, "gradients/global") == "scalars"
    assert float(_last(accumulator, "gradients/global")) == 2.5
    assert float(_last(accumulator, "gradients/W")) == 1.5
