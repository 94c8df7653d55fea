"""The exported encoder: SavedModel signatures, in-graph packing, atomic export, loading."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from sgh.config import ModelConfig
from sgh.errors import UserInputError
from sgh.model.encoding import encode_packed
from sgh.model.export import (
    METADATA_SIGNATURE,
    SERVING_SIGNATURE,
    export_encoder,
    load_encoder,
    pack_bits_in_graph,
)
from sgh.model.sgh_model import SGH


def _model(bits=12, dim=10, objective="paper", seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(500, dim)) * 3 + 5).astype(np.float32)
    model = SGH.from_training_data(ModelConfig(bits=bits, objective=objective), x, seed=seed)
    # A non-zero bias, so that codes depend on it too (b = 0 at initialisation).
    model.b.assign(rng.normal(0, 0.5, bits).astype(np.float32))
    return model, x


@pytest.mark.parametrize("n_bits", [1, 7, 8, 12, 33, 64])
def test_pack_bits_is_numpy_packbits(n_bits):
    bits = np.random.default_rng(n_bits).integers(0, 2, (37, n_bits), dtype=np.uint8)
    packed = pack_bits_in_graph(tf.constant(bits), n_bits).numpy()
    np.testing.assert_array_equal(packed, np.packbits(bits, axis=1))
    empty = pack_bits_in_graph(tf.zeros([0, n_bits], tf.uint8), n_bits)
    assert empty.shape == (0, (n_bits + 7) // 8)


def test_pack_bits_worked_example():
    # 1011 0000 | 1 -> 0b10110000 = 176, then 0b10000000 = 128 (pad bits are zero).
    bits = tf.constant([[1, 0, 1, 1, 0, 0, 0, 0, 1]], tf.uint8)
    np.testing.assert_array_equal(pack_bits_in_graph(bits, 9).numpy(), [[176, 128]])


@pytest.mark.parametrize("objective", ["paper", "released"])
def test_exported_encoder_reproduces_the_model(tmp_path, objective):
    model, x = _model(objective=objective)
    encoder = load_encoder(export_encoder(model, tmp_path / "encoder"))
    assert (encoder.bits, encoder.dim, encoder.code_bytes) == (12, 10, 2)
    expected = encode_packed(model, x)
    assert len(np.unique(expected, axis=0)) > 20  # a code that actually varies
    for batch_size in (1, 97, 65536):
        np.testing.assert_array_equal(encoder.encode_packed(x, batch_size=batch_size), expected)
    np.testing.assert_array_equal(encoder.encode_packed(x.astype(np.float64)), expected)
    assert encoder.encode_packed(x[:0]).shape == (0, 2)


def test_serving_signature_as_tf_serving_sees_it(tmp_path):
    model, x = _model(bits=20, dim=6)
    path = export_encoder(model, tmp_path / "encoder")
    loaded = tf.saved_model.load(str(path))
    serve = loaded.signatures[SERVING_SIGNATURE]
    _, inputs = serve.structured_input_signature
    assert list(inputs) == ["features"]
    assert inputs["features"].dtype == tf.float32 and inputs["features"].shape.as_list() == [
        None, 6]
    assert serve.structured_outputs["codes"].dtype == tf.uint8
    assert serve.structured_outputs["codes"].shape.as_list() == [None, 3]
    codes = serve(features=tf.constant(x))["codes"].numpy()
    np.testing.assert_array_equal(codes, encode_packed(model, x))
    metadata = loaded.signatures[METADATA_SIGNATURE]()
    assert int(metadata["bits"]) == 20 and int(metadata["dim"]) == 6
    # Only the encoder's variables are shipped, not the decoder's.
    names = {name.split("/")[0] for name, _ in tf.train.list_variables(
        str(path / "variables" / "variables")) if not name.startswith("_")}
    assert names == {"mean", "scale", "W", "b"}


def test_export_replaces_an_existing_one_and_leaves_no_temporary(tmp_path):
    first, x = _model(seed=0)
    second, _ = _model(seed=1)
    export_encoder(first, tmp_path / "encoder")
    export_encoder(second, tmp_path / "encoder")
    np.testing.assert_array_equal(load_encoder(tmp_path / "encoder").encode_packed(x),
                                  encode_packed(second, x))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["encoder"]


def test_a_failed_export_keeps_the_previous_one(tmp_path, monkeypatch):
    first, x = _model(seed=0)
    second, _ = _model(seed=1)
    export_encoder(first, tmp_path / "encoder")
    real_save = tf.saved_model.save

    def save_then_crash(module, directory, **kwargs):
        real_save(module, directory, **kwargs)  # a complete SavedModel in the temporary...
        raise RuntimeError("crash before the rename")  # ...that must never be renamed

    monkeypatch.setattr(tf.saved_model, "save", save_then_crash)
    with pytest.raises(RuntimeError, match="crash before the rename"):
        export_encoder(second, tmp_path / "encoder")
    np.testing.assert_array_equal(load_encoder(tmp_path / "encoder").encode_packed(x),
                                  encode_packed(first, x))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["encoder"]


def test_load_encoder_rejects_what_is_not_an_encoder(tmp_path):
    with pytest.raises(UserInputError, match="not a SavedModel directory"):
        load_encoder(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserInputError, match="not a SavedModel directory"):
        load_encoder(tmp_path / "empty")
    other = tf.Module()
    other.f = tf.function(lambda x: x + 1, input_signature=[tf.TensorSpec([None], tf.float32)])
    tf.saved_model.save(other, str(tmp_path / "other"), signatures=other.f.get_concrete_function())
    with pytest.raises(UserInputError, match="not an SGH encoder"):
        load_encoder(tmp_path / "other")
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "saved_model.pb").write_bytes(b"not a protobuf")
    with pytest.raises(UserInputError, match="unreadable SavedModel"):
        load_encoder(tmp_path / "corrupt")


def test_encode_packed_rejects_bad_features(tmp_path):
    model, x = _model()
    encoder = load_encoder(export_encoder(model, tmp_path / "encoder"))
    with pytest.raises(UserInputError, match=r"\(n, 10\)"):
        encoder.encode_packed(x[:, :9])
    with pytest.raises(UserInputError, match="takes float features"):
        encoder.encode_packed(np.zeros((3, 10), np.uint8))
    bad = x.copy()
    bad[70, 3] = np.nan
    with pytest.raises(UserInputError, match="row 70, column 3"):
        encoder.encode_packed(bad, batch_size=64)


def test_a_deep_encoder_exports_and_gives_the_models_codes(tmp_path):
    x = np.random.default_rng(3).normal(size=(200, 7)).astype(np.float32)
    config = ModelConfig(bits=10, encoder="mlp", decoder="mlp", encoder_hidden=[16, 8],
                         decoder_hidden=[8])
    model = SGH.from_training_data(config, x, seed=0)
    encoder = load_encoder(export_encoder(model, tmp_path / "encoder"))
    np.testing.assert_array_equal(encoder.encode_packed(x), encode_packed(model, x))
    names = {name.split("/")[0] for name, _ in tf.train.list_variables(
        str(tmp_path / "encoder" / "variables" / "variables")) if not name.startswith("_")}
    assert names == {"mean", "scale", "encoder"}  # the decoder stays behind


def test_an_angular_runs_encoder_normalises_its_input(tmp_path):
    # Trained on unit vectors (dataset.similarity=angular): the served graph divides each row
    # by its norm, so raw features give the codes of their unit vectors.
    model, x = _model()
    unit = (x / np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)).astype(np.float32)
    encoder = load_encoder(export_encoder(model, tmp_path / "encoder", unit_normalise=True))
    agree = np.mean(encoder.encode_packed(x * 7.0) == encode_packed(model, unit))
    assert agree > 0.999  # float32 norm in the graph vs float64 normalisation of the data
    metadata = tf.saved_model.load(str(tmp_path / "encoder")).signatures[METADATA_SIGNATURE]()
    assert bool(metadata["unit_normalise"])
