"""The trained encoder as a TensorFlow SavedModel: float features in, packed codes out.

    <run_dir>/encoder/         a SavedModel (saved_model.pb, variables/)
      serving_default          features: float32 [None, dim] -> codes: uint8 [None, ceil(bits/8)]
      metadata                 () -> bits: int32 scalar, dim: int32 scalar, unit_normalise: bool

`codes` are the model's own `encode_bits` of its input features (after the file's conversion,
e.g. uint8 / 255), packed as in `codes.npz`. Exports are atomic and replace only an earlier
SavedModel; `sgh-export run=RUN_DIR` exports a finished run that has none (`restore_run_model`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tensorflow as tf
from omegaconf import OmegaConf

from sgh.artifacts.atomic import DirectoryKind, atomic_directory
from sgh.artifacts.run_directory import RunDirectory
from sgh.config import ENCODE_BATCH_SIZE, ModelConfig
from sgh.errors import UserInputError
from sgh.methods import METHODS
from sgh.model.sgh_model import SGH

SERVING_SIGNATURE, METADATA_SIGNATURE = "serving_default", "metadata"
INPUT_NAME, OUTPUT_NAME = "features", "codes"
# What `tf.saved_model.save` writes, and so the only directory an export replaces.
SAVED_MODEL = DirectoryKind(
    "a SavedModel (saved_model.pb, variables/)", required=frozenset({"saved_model.pb"}),
    optional=frozenset({"variables", "assets", "fingerprint.pb", "keras_metadata.pb"}))


def pack_bits_in_graph(bits: tf.Tensor, n_bits: int) -> tf.Tensor:
    """`np.packbits(bits, axis=1)` in the graph: (n, n_bits) 0/1 -> (n, ceil(n_bits/8)) uint8."""
    width = (n_bits + 7) // 8
    padded = tf.pad(tf.cast(bits, tf.int32), [[0, 0], [0, 8 * width - n_bits]])
    grouped = tf.reshape(padded, tf.stack([tf.shape(bits)[0], width, 8]))
    weights = tf.constant([128, 64, 32, 16, 8, 4, 2, 1], tf.int32)
    return tf.cast(tf.reduce_sum(grouped * weights, axis=2), tf.uint8)


class _ServingEncoder(tf.Module):
    """What the SavedModel holds: the encoder's variables and the two signatures."""

    def __init__(self, model: SGH, unit_normalise: bool):
        super().__init__(name="sgh_encoder")
        # Tracked here so that they are saved; the decoder's variables are deliberately not.
        self.mean, self.scale = model.mean, model.scale
        if model.config.encoder == "mlp":
            self.encoder = model.encoder
        else:
            self.W, self.b = model.W, model.b
        bits, dim = int(model.bits), int(model.dim)

        def serve(features):
            if unit_normalise:  # dataset.similarity=angular: trained on unit vectors
                features = features / tf.norm(features, axis=1, keepdims=True)
            return {OUTPUT_NAME: pack_bits_in_graph(model.encode_bits(features), bits)}

        def metadata():
            return {"bits": tf.constant(bits, tf.int32), "dim": tf.constant(dim, tf.int32),
                    "unit_normalise": tf.constant(unit_normalise)}

        # autograph off: the branches above are on Python values; converting slows tracing.
        self.serve = tf.function(serve, input_signature=[
            tf.TensorSpec([None, dim], tf.float32, name=INPUT_NAME)], autograph=False)
        self.metadata = tf.function(metadata, input_signature=[], autograph=False)


def export_encoder(model: SGH, path: str | os.PathLike, unit_normalise: bool = False) -> Path:
    """Write `model`'s encoder as a SavedModel at `path`; `unit_normalise` (angular runs): the
    graph divides each row by its L2 norm first (in float32: a logit near 0 may differ)."""
    path = Path(path)
    module = _ServingEncoder(model, unit_normalise)
    with atomic_directory(path, replaces=SAVED_MODEL) as temporary:
        # Without the neuron's custom gradient: uint8 codes carry none, and tracing it is slow.
        tf.saved_model.save(module, str(temporary), signatures={
            SERVING_SIGNATURE: module.serve.get_concrete_function(),
            METADATA_SIGNATURE: module.metadata.get_concrete_function()},
            options=tf.saved_model.SaveOptions(experimental_custom_gradients=False))
    return path


@dataclass
class ExportedEncoder:
    """A loaded SavedModel encoder: `encode_packed(features)` -> packed uint8 codes."""

    path: Path
    bits: int
    dim: int
    _loaded: object  # keeps the restored variables alive for the signature
    _serve: object

    @property
    def code_bytes(self) -> int:
        return (self.bits + 7) // 8

    def encode_packed(self, features: np.ndarray, batch_size: int = ENCODE_BATCH_SIZE
                      ) -> np.ndarray:
        """Packed codes (n, ceil(bits/8)) uint8 of float features (n, dim), in batches."""
        features = np.asarray(features)
        if features.ndim != 2 or features.shape[1] != self.dim:
            raise UserInputError(f"features of shape {features.shape} do not fit the encoder "
                                 f"{self.path} ({self.dim} features per item); expected "
                                 f"(n, {self.dim})")
        if not np.issubdtype(features.dtype, np.floating):
            raise UserInputError(f"features of dtype {features.dtype}: the encoder {self.path} "
                                 "takes float features, converted as at training (uint8: / 255)")
        codes = np.empty((len(features), self.code_bytes), np.uint8)
        for start in range(0, len(features), batch_size):
            chunk = np.asarray(features[start:start + batch_size], np.float32)
            if not np.isfinite(chunk).all():
                row, column = np.argwhere(~np.isfinite(chunk))[0]
                raise UserInputError(f"features have NaN/Inf (first at row {start + row}, column "
                                     f"{column}); a code of a non-finite vector is meaningless")
            codes[start:start + len(chunk)] = self.encode_batch(chunk)
        return codes

    def encode_batch(self, features: np.ndarray) -> np.ndarray:
        """One call of the serving signature on checked float32 (n, dim) features."""
        return self._serve(**{INPUT_NAME: tf.constant(features)})[OUTPUT_NAME].numpy()


def load_encoder(path: str | os.PathLike) -> ExportedEncoder:
    """Load an exported encoder (a directory written by `export_encoder`)."""
    path = Path(path)
    if not (path / "saved_model.pb").is_file():
        raise UserInputError(f"{path}: not a SavedModel directory (no saved_model.pb); expected "
                             "an encoder exported by sgh.model.export (<run_dir>/encoder)")
    try:
        loaded = tf.saved_model.load(str(path))
    except (OSError, ValueError, tf.errors.OpError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error)
        raise UserInputError(f"{path}: unreadable SavedModel ({first_line})") from None
    signatures = getattr(loaded, "signatures", {})
    if SERVING_SIGNATURE not in signatures or METADATA_SIGNATURE not in signatures:
        raise UserInputError(f"{path}: a SavedModel but not an SGH encoder (signatures: "
                             f"{', '.join(signatures) or 'none'}; expected {SERVING_SIGNATURE} "
                             f"and {METADATA_SIGNATURE})")
    metadata = signatures[METADATA_SIGNATURE]()
    return ExportedEncoder(path=path, bits=int(metadata["bits"]), dim=int(metadata["dim"]),
                           _loaded=loaded, _serve=signatures[SERVING_SIGNATURE])


def _trained_run(run_dir: str | os.PathLike) -> RunDirectory:
    """The run directory of a trained method; one-line errors for a non-run or a baseline run."""
    run = RunDirectory.existing(run_dir)
    name = run.model_section().get("name")
    if name not in METHODS or not METHODS[name].uses_tensorflow:
        raise UserInputError(
            f"run={run.path} is a model={name} baseline run, which has no TensorFlow encoder; "
            f"only {' or '.join(f'model={n}' for n, m in METHODS.items() if m.uses_tensorflow)} "
            "runs can encode new data")
    return run


def run_encoder_path(run_dir: str | os.PathLike) -> Path:
    """`<run_dir>/encoder`, or a one-line error saying why the run has none and what to do."""
    run = _trained_run(run_dir)
    if not (run.encoder / "saved_model.pb").is_file():
        raise UserInputError(
            f"run={run.path}: this run has no exported encoder ({run.encoder}); export it from "
            f"the run's final checkpoint with: sgh-export run={run.path}")
    return run.encoder


def restore_run_model(run_dir: str | os.PathLike) -> SGH:
    """The trained SGH model of a finished run: `config.yaml` + the final checkpoint."""
    run = _trained_run(run_dir).chosen()  # with candidate recipes, the chosen one's model
    checkpoint = run.final_checkpoint()
    config = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConfig),
                                                 run.model_section()))
    shapes = tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map()
    model = SGH.skeleton(config, shapes["model/mean/.ATTRIBUTES/VARIABLE_VALUE"][0])
    tf.train.Checkpoint(model=model).restore(checkpoint).expect_partial() \
        .assert_existing_objects_matched()
    return model
